"""Every definition of the online metrics (docs/concepts/event-time-and-sessions.md) on small
hand-made sessions."""

from __future__ import annotations

from dataclasses import fields as dataclass_fields
from typing import Any

import pytest

from monitor.config import Config, parse_config
from monitor.core.export import export
from monitor.core.online import SESSION_FIELDS, OnlineCounters
from monitor.core.pipeline import Pipeline
from monitor.inputs.events import Reason
from monitor.inputs.generate import Regression, Traffic, World, events
from monitor.serve.report import report
from tests.support.checkpoints import round_trip
from tests.support.events import T0, click, conversion, dwell, query

# Short timeouts keep the tables readable: sessions close 60 s after their last event,
# the watermark trails the newest event by 10 s.
CONFIG = parse_config(
    """
    [sessions]
    timeout = "60s"
    allowed_lateness = "10s"
    success_dwell = "30s"
    reformulation_window = "60s"
    """
)


def run(*messages: bytes, config: Config = CONFIG) -> tuple[dict[str, Any], Pipeline]:
    pipeline = Pipeline(config)
    for message in messages:
        pipeline.feed(message)
    pipeline.close()
    return report(pipeline)["online"]["all"], pipeline


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(
            [query("e1", 0, "s1", "q1"), click("e2", 5, "s1", "q1")],
            {"queries": 1, "clicked_queries": 1, "clicks": 1, "ctr": 1.0},
            id="a click carrying the query's id makes a clicked query",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1", results=0), click("e2", 5, "s1", "q1"),
             click("e3", 6, "s1", "q1"), query("e4", 20, "s1", "q2", result_count=0),
             query("e5", 40, "s1", "q3"), click("e6", 45, "s1", "q2"),
             click("e7", 46, "s1", "q3"), query("e8", 50, "s2", "q4", results=0)],
            {"queries": 4, "zero_result_queries": 3, "clicked_zero_result_queries": 2,
             "clicked_queries": 3},
            id="a zero-result query that gets a click counts once as clicked zero-result",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), click("e2", 5, "s1", "q1"),
             click("e3", 9, "s1", "q1", position=3)],
            {"queries": 1, "clicked_queries": 1, "clicks": 2, "ctr": 1.0},
            id="a query clicked twice counts once as clicked",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e2", 100, "s1", "q2"),
             click("e3", 105, "s1", "q2")],
            {"queries": 2, "clicked_queries": 1, "ctr": 0.5},
            id="CTR is clicked queries over queries",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1", results=0), query("e2", 1, "s2", "q2", results=3),
             query("e3", 2, "s3", "q3", results=3, result_count=0)],
            {"queries": 3, "zero_result_queries": 2, "zero_result_rate": 2 / 3,
             "result_impressions": 6},
            id="zero-result: result_count 0 when present, else an empty result list",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1", results=0, result_count=12)],
            {"zero_result_queries": 0},
            id="a positive result_count wins over an empty result list",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e2", 0, "s2", "q2"),
             click("e3", 3, "s2", "q2")],
            {"sessions": 2, "abandoned_sessions": 1, "abandonment_rate": 0.5},
            id="abandoned: at least one query and no click",
        ),
        pytest.param(
            [click("e1", 0, "s1", "q9"), conversion("e2", 1, "s1")],
            {"sessions": 0, "queries": 0},
            id="a session without a query does not count",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), click("e2", 3, "s1", "q1", dwell_ms=30_000),
             query("e3", 0, "s2", "q2"), click("e4", 3, "s2", "q2", dwell_ms=29_999),
             query("e5", 0, "s3", "q3"), click("e6", 3, "s3", "q3"),
             dwell("e7", 40, "s3", "q3", 45_000),
             query("e8", 0, "s4", "q4"), conversion("e9", 50, "s4", "q4")],
            {"sessions": 4, "successful_sessions": 3, "conversions": 1,
             "session_success_rate": 0.75},
            id="successful: a click with dwell >= 30 s, a dwell event, or a conversion",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e2", 20, "s1", "q2"),
             query("e3", 100, "s1", "q3"), click("e4", 101, "s1", "q3"),
             query("e5", 110, "s1", "q4")],
            {"queries": 4, "reformulated_queries": 1},
            id="reformulation: followed within 60 s by another query, no click between",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e2", 61, "s1", "q2")],
            {"reformulated_queries": 0},
            id="a query followed after more than 60 s is not reformulated",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e2", 30, "s1", "q2"),
             click("e3", 35, "s1", "q1")],
            {"reformulated_queries": 1, "clicked_queries": 1},
            id="a later click on the earlier query does not undo its reformulation",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e2", 100, "s1", "q2")],
            {"sessions": 2, "queries": 2},
            id="more than the timeout without events closes the session",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e2", 50, "s1", "q2"),
             query("e3", 100, "s1", "q3")],
            {"sessions": 1, "queries": 3},
            id="events within the timeout of each other stay in one session",
        ),
        pytest.param(
            [query("e1", 0, "s1", "q1"), query("e1", 0, "s1", "q1")],
            {"queries": 1},
            id="a query counts once per event_id",
        ),
    ],
)
def test_definitions(messages: list[bytes], expected: dict[str, Any]) -> None:
    result, _ = run(*messages)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value), key


def test_session_class_is_that_of_its_first_query() -> None:
    pipeline = Pipeline(CONFIG)
    for message in (
        query("e1", 0, "s1", "q1", klass="news"), query("e2", 5, "s1", "q2", klass="travel"),
    ):
        pipeline.feed(message)
    pipeline.close()
    online = report(pipeline)["online"]
    assert online["news"]["sessions"] == 1 and online["travel"]["sessions"] == 0
    assert online["news"]["queries"] == 1 and online["travel"]["queries"] == 1


def test_late_event_for_a_closed_session_is_rejected_and_counted() -> None:
    pipeline = Pipeline(CONFIG)
    assert pipeline.feed(query("e1", 0, "s1", "q1")) is None
    # s2 advances event time to 200: watermark 190 > 0 + 60, so s1 is closed
    assert pipeline.feed(query("e2", 200, "s2", "q2")) is None
    late = pipeline.feed(click("e3", 30, "s1", "q1"))
    assert late is not None and late.reason is Reason.TOO_LATE
    # within the allowed lateness an out-of-order event still joins its open session
    assert pipeline.feed(click("e4", 195, "s2", "q2")) is None
    pipeline.close()
    result = report(pipeline)
    assert result["rejected"] == {"too_late": 1}
    assert result["online"]["all"]["clicks"] == 1
    assert result["online"]["all"]["sessions"] == 2
    assert pipeline.health.rejected[Reason.TOO_LATE] == 1


def test_sessions_close_when_the_watermark_passes_them() -> None:
    pipeline = Pipeline(CONFIG)
    pipeline.feed(query("e1", 0, "s1", "q1"))
    pipeline.feed(query("e2", 65, "s2", "q2"))  # watermark 55 < 0 + 60: s1 still open
    # s2's query waits until the watermark passes it
    assert pipeline.counters.sessions == [0, 0] and list(pipeline.sessions.open) == ["s1"]
    assert [event[3] for event in pipeline.sessions.waiting_events()] == ["s2"]
    pipeline.feed(query("e3", 200, "s3", "q3"))  # watermark 190: s1 and s2 close
    assert sum(pipeline.counters.sessions) == 2
    assert not pipeline.sessions.open
    assert [e[3] for e in pipeline.sessions.waiting_events()] == ["s3"]


def test_an_idle_partition_finishes_counting_by_the_wall_clock() -> None:
    """Nothing after the last events: the watermark follows the wall clock once the partition
    is idle, so the held click is applied and the session closes, as at the end of a replay;
    a late event after that is placed or rejected by the usual rules; the state restores."""
    stream = [query("e1", 0, "s1", "q1"), click("e2", 5, "s1", "q1"),
              query("e3", 8, "s2", "q2")]
    pipeline = Pipeline(CONFIG)
    for message in stream:
        assert pipeline.feed(message) is None
    assert sum(pipeline.counters.clicks) == 0 and sum(pipeline.counters.sessions) == 0
    assert not pipeline.idle(T0 + 7), "a wall clock behind the events moves nothing"
    assert pipeline.idle(T0 + 20)  # watermark 10: the click and s2's query are applied
    assert sum(pipeline.counters.clicks) == 1 and not pipeline.sessions.waiting
    assert pipeline.sessions.open_count == 2
    assert pipeline.idle(T0 + 80)  # watermark 70 > 8 + 60: both sessions close
    assert not pipeline.sessions.open and not pipeline.idle(T0 + 81)
    _, closed = run(*stream)
    assert export(pipeline).slices == export(closed).slices, "counted as a replay's end"
    assert export(pipeline).newest == T0 + 8, "the newest event time stays the events'"
    late = pipeline.feed(click("e4", 9, "s2", "q2"))
    assert late is not None and late.reason is Reason.TOO_LATE
    assert pipeline.feed(query("e5", 75, "s3", "q3")) is None, "inside the lateness: placed"
    restored = round_trip(pipeline)
    assert restored.sessions.clock == pipeline.sessions.clock == T0 + 81
    assert restored.sessions.floor == T0 + 81


def test_first_click_histograms() -> None:
    _, pipeline = run(
        query("e1", 0, "s1", "q1"), click("e2", 4, "s1", "q1", position=2),
        click("e3", 9, "s1", "q1", position=1),
    )
    travel = pipeline.slices.classes.index["travel"]
    counters = pipeline.counters
    assert counters.time_to_first_click.sums[travel] == pytest.approx(4.0)
    assert counters.first_click_reciprocal_rank.sums[travel] == pytest.approx(0.5)
    assert counters.click_position.sums[travel] == 3
    assert sum(counters.queries_per_session.counts[travel]) == 1


def test_dedupe_memory_is_bounded_by_timeout_plus_lateness() -> None:
    pipeline = Pipeline(CONFIG)
    for i in range(2000):
        pipeline.feed(query(f"e{i}", i * 10.0, f"s{i}", f"q{i}"))
    remembered = len(pipeline.sessions.seen) + len(pipeline.sessions.seen_before)
    # ids are kept for timeout + lateness (70 s) to twice that: 7 to 14 events at 10 s each
    assert 7 <= remembered <= 16
    assert len(pipeline.sessions.open) <= 8
    # an id from within the memory is still recognised
    duplicate = pipeline.feed(query("e1999", 19990.0, "s1999", "q1999"))
    assert duplicate is not None and duplicate.reason is Reason.DUPLICATE


def test_clicks_on_forgotten_or_unknown_queries_count_under_the_session_class() -> None:
    _, pipeline = run(query("e1", 0, "s1", "q1", klass="news"), click("e2", 3, "s1", "zz"))
    news = pipeline.slices.classes.index["news"]
    assert pipeline.counters.clicks[news] == 1
    assert pipeline.counters.clicked_queries[news] == 0
    assert pipeline.sessions.unmatched_clicks == 1


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.8])
def test_a_pipeline_restored_mid_stream_counts_as_one_that_never_stopped(
    fraction: float,
) -> None:
    """Checkpoints keep the open sessions as columns: every field, recent queries included,
    must come back, so the rest of the stream counts the same; the offline state (qrels,
    windows, open and completed samples, verdicts) too."""
    world = World.build(5)
    stream = [line for _, _, line in events(world, Traffic(
        seed=5, duration=4 * 3600.0, sessions_per_second=2.0, qrels=True, judged_every=3600.0,
        judged_queries=60, regression=Regression("navigational", 1.79e9 + 2 * 3600.0),
    ))]
    half = int(len(stream) * fraction)
    uninterrupted, first = Pipeline(CONFIG), Pipeline(CONFIG)
    for line in stream[:half]:
        uninterrupted.feed(line)
        first.feed(line)
    assert any(s.older for s in first.sessions.open.values()), "no session with older queries"
    assert first.judged.qrels and first.judged.time_windows, "offline state to restore"
    restored = round_trip(first)

    def state(pipeline: Pipeline) -> dict[str, object]:
        snapshot = pipeline.snapshot()
        fields = {f: getattr(snapshot.sessions, f) for f in snapshot.sessions.__annotations__}
        fields["seen"], fields["seen_before"] = set(fields["seen"]), set(fields["seen_before"])
        rest = {
            f.name: getattr(snapshot, f.name)
            for f in dataclass_fields(snapshot) if f.name != "sessions"
        }
        return {**fields, "rest": rest}

    assert state(restored) == state(first)

    def fields(pipeline: Pipeline) -> dict[str, tuple[Any, ...]]:
        return {
            key: tuple(getattr(session, name) for name in SESSION_FIELDS)
            for key, session in pipeline.sessions.open.items()
        }

    assert fields(restored) == fields(first)
    for line in stream[half:]:
        uninterrupted.feed(line)
        restored.feed(line)
    uninterrupted.close()
    restored.close()
    assert report(restored) == report(uninterrupted)
    assert export(restored) == export(uninterrupted)
    assert uninterrupted.judged.verdicts, "samples were judged"


@pytest.mark.slow
def test_a_restored_pipeline_closes_the_same_sessions_at_the_same_time() -> None:
    """Out of order (the stream in three interleaved runs, as a topic refilled in parts):
    restored at any point, the counters equal the uninterrupted pipeline's before the end,
    not only after closing everything. (Found by killing the daemon in the middle of
    checkpoint writes: when sessions closed used to depend on the closing schedule, which a
    restore rebuilds.)"""
    stream = [line for _, _, line in events(World.build(17), Traffic(
        seed=17, duration=1800.0, sessions_per_second=2.0, malformed_rate=0.01,
        duplicate_rate=0.005,
    ))]
    order = stream[0::3] + stream[1::3] + stream[2::3]

    def counts(pipeline: Pipeline) -> dict[str, list[int]]:
        return {name: list(getattr(pipeline.counters, name)) for name in OnlineCounters.COUNTS}

    uninterrupted = Pipeline(Config())
    for line in order:
        uninterrupted.feed(line)
    for cut in range(100, len(order), 331):
        pipeline = Pipeline(Config())
        for line in order[:cut]:
            pipeline.feed(line)
        pipeline = round_trip(pipeline)
        for line in order[cut:]:
            pipeline.feed(line)
        assert counts(pipeline) == counts(uninterrupted), cut
