"""Event time decides, not arrival order: sessions, clicks, dwell and conversions are
attributed by their timestamps within the allowed lateness, and one wrong clock cannot
blank a partition."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.cli.replay import replay
from monitor.config import Config, parse_config
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.inputs.events import Reason, Rejection
from monitor.inputs.generate import Traffic, World, events
from monitor.inputs.timestamps import Timestamps
from monitor.serve.report import report
from tests.support.events import click, conversion, dwell, query

DEFAULT = Config()  # timeout 30 min, allowed lateness 2 min, success dwell 30 s
TEN = 10 * 3600.0  # 10:00 after T0, so that the cases read as clock times


def at(clock: str) -> float:
    """Seconds after T0 of a clock time "HH:MM" or "HH:MM:SS" (T0 is 00:00)."""
    parts = [int(p) for p in clock.split(":")]
    return parts[0] * 3600.0 + parts[1] * 60.0 + (parts[2] if len(parts) > 2 else 0)


def fed(*messages: bytes, config: Config = DEFAULT) -> tuple[Pipeline, list[Reason | None]]:
    pipeline = Pipeline(config)
    reasons = []
    for message in messages:
        rejection = pipeline.feed(message)
        reasons.append(rejection.reason if rejection is not None else None)
    pipeline.close()
    return pipeline, reasons


def online(pipeline: Pipeline, name: str = "all") -> dict[str, Any]:
    entry: dict[str, Any] = report(pipeline)["online"][name]
    return entry


def test_a_click_that_arrives_before_its_query_counts_for_it() -> None:
    pipeline, reasons = fed(
        click("c1", at("10:00:05"), "s1", "q1"),
        query("e1", at("10:00:00"), "s1", "q1", klass="travel"),
    )
    assert reasons == [None, None]
    travel = online(pipeline, "travel")
    assert (travel["clicked_queries"], travel["clicks"], travel["ctr"]) == (1, 1, 1.0)
    assert online(pipeline, "other")["clicks"] == 0
    assert pipeline.sessions.unmatched_clicks == 0
    # the same two events in event order count the same
    in_order, _ = fed(
        query("e1", at("10:00:00"), "s1", "q1", klass="travel"),
        click("c1", at("10:00:05"), "s1", "q1"),
    )
    assert report(in_order)["online"] == report(pipeline)["online"]


def test_a_click_stamped_before_its_query_by_another_clock_still_counts_for_it() -> None:
    """A query id ties a click to its query whatever the two clocks say: the click waits in
    its session for the query until the session closes."""
    pipeline, _ = fed(
        query("e1", at("10:00:00"), "s1", "q0", klass="news"),
        click("c1", at("10:00:09"), "s1", "q1", position=2),
        query("e2", at("10:00:10"), "s1", "q1", klass="travel"),
    )
    assert online(pipeline, "travel")["clicked_queries"] == 1
    assert online(pipeline, "travel")["clicks"] == 1
    assert pipeline.sessions.unmatched_clicks == 0
    assert online(pipeline)["abandoned_sessions"] == 0


@pytest.mark.parametrize("reopened", [True, False], ids=["a new w1 is open", "no new w1"])
def test_an_event_of_a_closed_session_is_too_late_and_joins_no_other(reopened: bool) -> None:
    messages = [
        query("e1", at("10:00"), "w1", "q1"),
        query("e2", at("10:40"), "x9", "q2"),  # the watermark passes w1's end (10:30)
    ]
    if reopened:
        messages.append(query("e3", at("10:41"), "w1", "q3"))
    messages.append(click("c1", at("10:20"), "w1", "q1", dwell_ms=60_000))
    pipeline, reasons = fed(*messages)
    assert reasons[-1] is Reason.TOO_LATE
    result = online(pipeline)
    assert result["clicks"] == 0 and result["successful_sessions"] == 0
    assert result["sessions"] == (3 if reopened else 2)
    assert result["abandoned_sessions"] == result["sessions"]


@pytest.mark.parametrize("first", ["click", "query"])
def test_a_copy_of_an_event_refused_as_too_late_or_ahead_is_refused_alike(first: str) -> None:
    """The dedupe memory takes an id as the event is offered; an event refused (too late,
    or beyond the horizon) leaves no id behind: its copy is judged as it was, never a
    duplicate, while a copy of an event taken in is one."""
    late = (click("c1", at("10:20"), "w1", "q1") if first == "click"
            else query("e9", at("10:20"), "w1", "q9"))
    pipeline = Pipeline(DEFAULT)
    reasons = [pipeline.feed(m) for m in (
        query("e1", at("10:00"), "w1", "q1"),
        query("e2", at("10:40"), "x9", "q2"),  # the watermark passes w1's end (10:30)
        late, late,
        query("e3", at("10:37"), "x9", "q3"),  # behind the watermark (10:38): taken in
        query("e3", at("10:37"), "x9", "q3"),
    )]
    assert [r.reason if r is not None else None for r in reasons] == [
        None, None, Reason.TOO_LATE, Reason.TOO_LATE, None, Reason.DUPLICATE,
    ]
    pipeline.sessions.horizon = at("11:00")  # as the daemon bounds what is ahead of it
    ahead = query("e4", at("12:00"), "y1", "q4")
    assert [pipeline.feed(ahead).reason for _ in range(2)] == [  # type: ignore[union-attr]
        Reason.FUTURE_TIMESTAMP, Reason.FUTURE_TIMESTAMP,
    ]
    pipeline.sessions.horizon = float("inf")
    assert pipeline.feed(ahead) is None
    assert pipeline.feed(ahead).reason is Reason.DUPLICATE  # type: ignore[union-attr]


def test_a_copy_older_than_the_dedupe_memory_is_too_late_not_counted_again() -> None:
    """A session of a query every 10 minutes for 2.5 hours: the ids of its first queries
    are forgotten (two generations of 32 minutes), while the session stays open. A copy of
    its first query was counted a second time; it is too late now, and 16 queries count."""
    messages = [query(f"e{i}", at("10:00") + 600.0 * i, "long", f"q{i}") for i in range(16)]
    pipeline = Pipeline(DEFAULT)
    assert [pipeline.feed(m) for m in messages] == [None] * 16
    copy = pipeline.feed(messages[0])
    assert copy is not None and copy.reason is Reason.TOO_LATE
    recent = pipeline.feed(messages[14])  # within the memory: a duplicate, as before
    assert recent is not None and recent.reason is Reason.DUPLICATE
    pipeline.close()
    assert online(pipeline)["queries"] == 16 and online(pipeline)["sessions"] == 1


def test_a_session_has_the_class_of_its_first_query_in_event_time() -> None:
    """Class B's query at 10:00:50 arrives before class A's at 10:00:00: the session is A's,
    and A's query is the one reformulated (followed by B's within 60 s, no click between)."""
    pipeline, _ = fed(
        query("b", at("10:00:50"), "s1", "qb", klass="B"),
        query("a", at("10:00:00"), "s1", "qa", klass="A"),
    )
    assert online(pipeline, "A")["sessions"] == 1
    assert online(pipeline, "B")["sessions"] == 0
    assert online(pipeline, "A")["reformulated_queries"] == 1
    assert online(pipeline, "B")["reformulated_queries"] == 0
    assert pipeline.counters.queries_per_session.sums[pipeline.slices.classes.index["A"]] == 2


def test_dwell_and_conversions_count_in_event_time() -> None:
    pipeline, reasons = fed(
        conversion("v1", at("10:01:00"), "s1", "q1"),
        dwell("d1", at("10:00:50"), "s2", "q2", 45_000),
        query("e2", at("10:00:10"), "s2", "q2", klass="B"),
        query("e1", at("10:00:00"), "s1", "q1", klass="A"),
    )
    assert reasons == [None] * 4
    assert online(pipeline, "A")["conversions"] == 1
    assert online(pipeline, "A")["successful_sessions"] == 1
    assert online(pipeline, "B")["successful_sessions"] == 1


def test_a_late_event_inside_an_open_session_still_joins_it() -> None:
    """Beyond the allowed lateness, an event that falls inside its open session (at or after
    its first event) is applied; one that would start a session that has closed by now is
    too late."""
    pipeline, reasons = fed(
        query("e1", at("10:00"), "s1", "q1"),
        query("e2", at("10:10"), "s2", "q2"),  # watermark 10:08
        click("c1", at("10:02"), "s1", "q1"),  # 6 min behind it, inside s1
        click("c2", at("09:20"), "s3", "q3"),  # its session would have closed at 09:50
    )
    assert reasons == [None, None, None, Reason.TOO_LATE]
    assert online(pipeline)["clicked_queries"] == 1


def stream(seed: int) -> list[bytes]:
    world = World.build(seed)
    return [line for _, _, line in events(world, Traffic(
        seed=seed, duration=2 * 3600.0, sessions_per_second=0.5, malformed_rate=0.01,
        duplicate_rate=0.01,
    ))]


@pytest.mark.slow
@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), lateness=st.sampled_from([5.0, 30.0, 120.0]))
def test_any_arrival_order_within_the_lateness_gives_the_same_report(
    seed: int, lateness: float
) -> None:
    """Each event is delayed by a random time below the allowed lateness: every event then
    arrives no more than that behind the newest one before it, and the report is the same as
    for the log in event order (online counts, rejections by reason)."""
    config = parse_config(f'[sessions]\nallowed_lateness = "{lateness}s"')
    lines = STREAM
    rng = random.Random(seed)
    times = [Pipeline(config).read(line) for line in lines]
    keyed = []
    for index, (line, read) in enumerate(zip(lines, times, strict=True)):
        time = read[0][0] if isinstance(read, tuple) and not isinstance(read, Rejection) else 0.0
        keyed.append((time + rng.random() * lateness * 0.999 if time else -1.0, index, line))
    shuffled = [line for _, _, line in sorted(keyed)]
    assert shuffled != lines
    expected, _ = fed(*lines, config=config)
    got, _ = fed(*shuffled, config=config)
    want = report(expected)
    assert report(got)["online"] == want["online"]
    assert report(got)["rejected"] == want["rejected"]
    assert want["online"]["all"]["clicked_queries"] > 100


STREAM = stream(7)


def test_one_event_from_2100_is_rejected_and_the_log_counts_as_without_it(
    tmp_path: Path,
) -> None:
    """Wherever it is in the file (the first line too): replay judges a time against the
    median event time of the lines around it, which one clock cannot move."""
    lines = STREAM[:3000]
    future = query("f1", at("10:00") + 75 * 365 * 86400.0, "s-future", "qf")

    def replayed(lines: list[bytes]) -> dict[str, Any]:
        path = tmp_path / "events.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        pipeline = Pipeline(DEFAULT)
        replay(pipeline, path, RejectionLog(0))
        pipeline.close()
        return report(pipeline)

    clean = replayed(lines)
    for where in (0, 1500, 2999):
        got = replayed([*lines[:where], future, *lines[where:]])
        assert got["rejected"].pop("future_timestamp") == 1
        assert got == clean


def test_a_pause_in_the_log_longer_than_max_future_loses_nothing(tmp_path: Path) -> None:
    """The median is taken around each line, ahead of it too: after a six-hour pause the
    first events are judged against the ones after the pause."""
    before = [query(f"a{i}", 60.0 * i, f"s{i}", f"q{i}") for i in range(300)]
    after = [query(f"b{i}", 6 * 3600.0 + 60.0 * i, f"t{i}", f"r{i}") for i in range(300)]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(before + after) + b"\n")
    pipeline = Pipeline(DEFAULT)
    replay(pipeline, path, RejectionLog(0))
    pipeline.close()
    assert report(pipeline)["rejected"] == {}
    assert online(pipeline)["queries"] == 600


def test_the_daemon_rejects_what_is_ahead_of_its_clock() -> None:
    """``searchmon run`` sets the horizon to its wall clock plus max_future each batch."""
    pipeline = Pipeline(DEFAULT)
    pipeline.sessions.horizon = 1_790_000_000.0 + TEN + 300
    ahead = pipeline.feed(query("e1", TEN + 301, "s1", "q1"))
    assert ahead is not None and ahead.reason is Reason.FUTURE_TIMESTAMP
    assert "300 s ahead of" in ahead.detail
    assert pipeline.feed(query("e2", TEN + 299, "s1", "q2")) is None


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(st.lists(
    st.tuples(st.integers(0, 23), st.sampled_from("0123456789:.-TZz +\u0663\uff10")),
    min_size=1, max_size=3,
))
def test_timestamps_of_the_usual_form_read_as_fromisoformat_reads_them(
    changes: list[tuple[int, str]],
) -> None:
    """The cached reading of ``YYYY-MM-DDTHH:MM:SS.fffZ`` agrees with fromisoformat on
    every variation of that form: the same instant, or a rejection (a lower-case ``z`` at
    the end read as ``Z``, as RFC 3339 allows)."""
    from datetime import datetime

    text = list("2026-11-22T10:00:05.250Z")
    for index, character in changes:
        text[index] = character
    stamp = "".join(text)
    try:
        parsed = datetime.fromisoformat(stamp[:-1] + "Z" if stamp[-1] == "z" else stamp)
        want = parsed.timestamp() if parsed.tzinfo is not None else None
    except ValueError:
        want = None
    read = Timestamps().read(stamp)
    got = None if isinstance(read, Rejection) else read
    assert (got is None) == (want is None), stamp
    assert got is None or want is None or abs(got - want) < 1e-6, stamp


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from([
        "2026-11-22T10:00:05Z", "2026-11-22T10:00:05.2Z", "2026-11-22T10:00:05.250000Z",
        "2026-11-22T10:00:05.250+02:00", "2026-11-22T10:00:05-05:30",
        "1969-12-31T23:59:59.999999+14:00", "2026-11-22T10:00:05.1234567Z",
    ]),
    st.lists(
        st.tuples(st.integers(0, 31), st.sampled_from("0123456789:.-+TZ \u0663")),
        max_size=3,
    ),
)
def test_timestamps_of_the_other_common_forms_read_as_fromisoformat_reads_them(
    form: str, changes: list[tuple[int, str]],
) -> None:
    """The cached reading of the other common forms (a fraction of 1 to 6 digits or none,
    ``Z`` or an offset) gives exactly the float ``fromisoformat`` gives, or the same
    rejection, on every variation of them; read twice (the second time from the cache)."""
    from datetime import datetime

    text = list(form)
    for index, character in changes:
        if index < len(text):
            text[index] = character
    stamp = "".join(text)
    try:
        parsed = datetime.fromisoformat(stamp)
        want = parsed.timestamp() if parsed.tzinfo is not None else None
    except (OverflowError, ValueError):
        want = None
    timestamps = Timestamps()
    for _ in range(2):
        read = timestamps.read(stamp)
        got = None if isinstance(read, Rejection) else read
        assert got == want, stamp


def test_the_last_event_of_a_log_after_a_long_pause_is_not_lost(tmp_path: Path) -> None:
    """A log whose last query comes 40 minutes after the one before (past max_future, 5 min):
    with nothing after it to judge it by, it is judged against the wall clock, as ``run``
    judges live events, and counted. An event stamped beyond the wall clock still is not."""
    from monitor.cli.replay import replay_files
    from tests.support.events import query

    lines = [query(f"e{i}", 10.0 * i, f"s{i}", f"q{i}", klass="web") for i in range(20)]
    lines.append(query("late", 190.0 + 2400.0, "s-late", "q-late", klass="web"))
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    pipeline = replay_files(parse_config(""), [path], [], RejectionLog(0))
    assert report(pipeline)["online"]["web"]["queries"] == 21
    assert pipeline.health.rejected[Reason.FUTURE_TIMESTAMP] == 0
    ahead = json.dumps({**json.loads(lines[0]), "event_id": "x",
                        "timestamp": "2100-01-01T00:00:00Z"}).encode()
    path.write_bytes(b"\n".join([*lines, ahead]) + b"\n")
    pipeline = replay_files(parse_config(""), [path], [], RejectionLog(0))
    assert pipeline.health.rejected[Reason.FUTURE_TIMESTAMP] == 1
