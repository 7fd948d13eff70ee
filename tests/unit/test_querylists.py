"""Which queries: the top lists against exact counts, privacy, outcomes, worsened queries,
state, and memory over a million distinct queries."""

from __future__ import annotations

import gc
import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from zlib import crc32

import pytest

from monitor.config import Config, QueryListsConfig, parse_config
from monitor.core.export import export
from monitor.core.heavy import SpaceSaving
from monitor.core.judged import Judged
from monitor.core.pipeline import Pipeline
from monitor.core.querylists import BUCKETS, QueryLists, memory_bound, merge_tallies
from monitor.core.snapshots import Layout
from monitor.inputs.generate import Regression, Traffic, World, events
from monitor.serve import page
from monitor.serve.queries import (
    STATE,
    FilterError,
    format_lists,
    merge_replicas,
    query_report,
    query_state,
    report_of,
    select,
    window_states,
)
from monitor.state import codec
from monitor.state.codec import UnitState
from tests.support.checkpoints import round_trip
from tests.support.events import T0, click, line, query, stamp

HOUR = 3600.0


def fed(config: Config, *messages: bytes, close: bool = True) -> Pipeline:
    pipeline = Pipeline(config)
    for message in messages:
        pipeline.feed(message)
    if close:
        pipeline.close()
    return pipeline


def entry(report: dict[str, Any], list_name: str, klass: str = "all", window: str = "1h") -> (
    list[dict[str, Any]]
):
    found = [e for e in report["lists"]
             if (e["list"], e["query_class"], e["window"]) == (list_name, klass, window)]
    assert len(found) == 1, (list_name, klass, window)
    rows: list[dict[str, Any]] = found[0]["rows"]
    return rows


def seconds_of(event: dict[str, Any]) -> float:
    """The event time of a generated event (epoch milliseconds or RFC 3339)."""
    stamp = event["timestamp"]
    return stamp / 1000 if isinstance(stamp, int) else datetime.fromisoformat(stamp).timestamp()


# --- top lists against exact counts, on generated traffic over two partitions --------------

def test_top_searches_and_zero_result_lists_hold_the_exact_counts_within_their_bounds() -> None:
    """Two partitions (sessions split by key), lists of 60 counters: the reported counts
    bound the exact ones, and the exact top 20 is reported wherever the bounds separate it."""
    config = parse_config(
        '[query_lists]\ncapacity = 60\nmin_sessions = 1\nwindows = ["1h"]\n'
    )
    partitions = [Pipeline(config), Pipeline(config)]
    exact: dict[str, Counter[str]] = {"searches": Counter(), "zero_results": Counter()}
    accepted = []
    stream = events(World.build(5), Traffic(seed=5, duration=2 * HOUR, sessions_per_second=3.0))
    for _, key, message in stream:
        pipeline = partitions[hash(key) % 2]
        if pipeline.feed(message) is None:
            event = json.loads(message)
            if event.get("type") == "query":
                accepted.append(event)
    lists = partitions[0].lists
    assert lists is not None
    merged, span = window_states(partitions, HOUR, config)
    overall = merge_tallies(list(merged.values()), 60, 1)
    assert span is not None and overall is not None
    for event in accepted:
        if seconds_of(event) >= span[0]:
            key = lists.key(event["query_text"])
            exact["searches"][key] += 1
            if event.get("result_count") == 0 or (
                "result_count" not in event and not event["result_ids"]
            ):
                exact["zero_results"][key] += 1
    assert len(exact["searches"]) > 3 * 60, "more distinct queries than counters"
    report = query_report(partitions, partitions[0], config)
    # two replicas, one partition each, merged as `searchmon top` merges them: bounds hold too
    replicas = report_of(merge_replicas([
        STATE.validate_json(STATE.dump_json(query_state([p], None, config)))
        for p in partitions
    ]))
    for list_name, counts in exact.items():
        for row in entry(replicas, list_name):
            assert row["count"] - row["error"] <= counts[row["query"]] <= row["count"], row
    for list_name, counts in exact.items():
        rows = entry(report, list_name)
        assert len(rows) == min(20, len(counts))
        for row in rows:
            assert row["count"] - row["error"] <= counts[row["query"]] <= row["count"], row
        summary = SpaceSaving(60)
        summary.restore((overall.searches if list_name == "searches" else overall.zero).counts)
        ranked = summary.top(21)
        threshold = ranked[20].count if len(ranked) > 20 else summary.unseen_bound()
        top20 = [key for key, _ in counts.most_common(20)]
        separated = [key for key in top20 if counts[key] > threshold]
        reported = {row["query"] for row in rows}
        assert set(separated) <= reported, list_name
        assert len(separated) >= min(10, len(counts)), f"{list_name}: too little separated"
    for name in merged:  # and per class
        for row in entry(report, "searches", name[0]):
            assert row["count"] - row["error"] <= exact["searches"][row["query"]] <= row["count"]


# --- outcomes: searches without a click, lowest click-through rate ------------------------

def test_no_click_and_lowest_ctr_lists_equal_a_hand_count() -> None:
    config = parse_config(
        '[query_lists]\nmin_sessions = 1\nmin_searches = 2\nwindows = ["1h"]\n'
        '[sessions]\nrecent_queries = 1\n'
    )
    pipeline = fed(
        config,
        query("e1", 0, "s1", "q1", text="Shoes"), click("c1", 5, "s1", "q1"),
        query("e2", 10, "s2", "q2", text="shoes"), click("c2", 15, "s2", "q2"),
        query("e3", 20, "s3", "q3", text="shoes"),
        query("e4", 30, "s4", "q4", text="boots"),
        query("e5", 40, "s5", "q5", text="boots"),
        query("e6", 50, "s6", "q6", text="hats"), click("c6", 55, "s6", "q6"),
        # recent_queries = 1: "boots" leaves s7's memory when "hats" follows, unclicked
        query("e7", 60, "s7", "q7", text="boots"), query("e8", 70, "s7", "q8", text="hats"),
        click("c8", 75, "s7", "q8"),
    )
    report = query_report([pipeline], pipeline, config)
    assert entry(report, "no_clicks") == [
        {"query": "boots", "count": 3, "error": 0},
        {"query": "shoes", "count": 1, "error": 0},
    ]
    assert entry(report, "low_ctr") == [
        {"query": "boots", "searches": 3, "clicked": 0, "ctr": 0.0, "error": 0},
        {"query": "shoes", "searches": 3, "clicked": 2, "ctr": pytest.approx(2 / 3),
         "error": 0},
        {"query": "hats", "searches": 2, "clicked": 2, "ctr": 1.0, "error": 0},
    ]
    assert entry(report, "searches") == [
        {"query": "boots", "count": 3, "error": 0},
        {"query": "shoes", "count": 3, "error": 0},
        {"query": "hats", "count": 2, "error": 0},
    ]
    assert entry(report, "zero_results") == []
    assert pipeline.lists is not None and not pipeline.lists.open


# --- privacy -------------------------------------------------------------------------------

def test_a_query_is_shown_only_once_min_sessions_distinct_sessions_issued_it() -> None:
    config = parse_config('[query_lists]\nmin_sessions = 3\nwindows = ["1h"]\n')
    messages = [
        query(f"r{i}", i, f"s{i % 2}", f"qr{i}", text="my rare secret", results=0)
        for i in range(10)  # ten times, by two sessions
    ] + [
        query(f"p{i}", 20 + i, f"t{i}", f"qp{i}", text="popular", results=0) for i in range(3)
    ]
    pipeline = fed(config, *messages)
    report = query_report([pipeline], pipeline, config)
    for list_name in ("searches", "zero_results", "no_clicks"):
        assert [r["query"] for r in entry(report, list_name)] == ["popular"], list_name
    assert "secret" not in json.dumps(report)
    # what leaves for other replicas holds neither the query nor session ids
    shared = STATE.dump_json(query_state([pipeline], pipeline, config))
    assert b"secret" not in shared and b"popular" in shared and b'"sessions"' not in shared
    merged = report_of(merge_replicas([STATE.validate_json(shared)] * 2))
    assert [r["query"] for r in entry(merged, "searches")] == ["popular"]
    assert entry(merged, "searches")[0]["count"] == 6


def test_a_ubi_query_that_names_no_user_adds_no_session_toward_min_sessions() -> None:
    """A UBI query record with neither session_id nor client_id is a session of its own
    query: six searches of one text, perhaps by one person, are not six sessions. They are
    counted, never shown by themselves; three with a session_id each make it shown."""
    config = parse_config('[query_lists]\nmin_sessions = 3\nwindows = ["1h"]\n')
    ubi = [json.dumps({
        "query_id": f"u{i}", "user_query": "jane doe results", "timestamp": stamp(i),
        "query_response_hit_ids": [] if i % 2 else ["d1"],
    }).encode() for i in range(6)]
    pipeline = fed(config, *ubi)
    report = query_report([pipeline], pipeline, config)
    for list_name in ("searches", "zero_results", "no_clicks"):
        assert entry(report, list_name) == [], list_name
    assert "jane" not in json.dumps(report)
    # kept without a session, it survives a checkpoint (a restore refused it before)
    assert pipeline.snapshot() == round_trip(pipeline).snapshot()
    named = [json.dumps({
        "query_id": f"n{i}", "user_query": "jane doe results", "timestamp": stamp(10 + i),
        "session_id": f"s{i}", "query_response_hit_ids": ["d1"],
    }).encode() for i in range(3)]
    pipeline = fed(config, *ubi, *named)
    rows = entry(query_report([pipeline], pipeline, config), "searches")
    assert [(r["query"], r["count"]) for r in rows] == [("jane doe results", 9)]


def rare_and_popular(rare_sessions: list[str]) -> list[bytes]:
    """"shoes" by six sessions, one click; "rare words" once per session given, found
    nothing, in the middle of them (so the window's span is the same without it)."""
    messages = [query(f"p{i}", 10.0 * i, f"s{i}", f"qp{i}", text="shoes") for i in range(6)]
    messages.append(click("c0", 1, "s0", "qp0"))
    messages += [query(f"r{i}", 15.0 + i, session, f"qr{i}", text="rare words", results=0)
                 for i, session in enumerate(rare_sessions)]
    return messages


def test_the_state_of_a_replica_is_the_same_without_the_searches_it_hides() -> None:
    """k = 5: "rare words", searched three times by two sessions, is hidden. Its count could
    be read off /queries/state (the summaries' bound on queries not listed was its count);
    now the state is byte for byte the state of the same traffic without its searches."""
    config = parse_config('[query_lists]\nmin_sessions = 5\nwindows = ["1h"]\n')
    hiding = fed(config, *rare_and_popular(["h1", "h1", "h2"]))
    without = fed(config, *rare_and_popular([]))
    state = query_state([hiding], hiding, config)
    assert STATE.dump_json(state) == STATE.dump_json(query_state([without], without, config))
    summaries = [part for window in state.windows for tally in window.tallies
                 for part in (tally.searches, tally.zero, tally.outcomes)]
    assert all(part.unseen == 0 for part in summaries)
    assert [r["query"] for r in entry(report_of(state), "searches")] == ["shoes"]


def test_a_replica_whose_window_ended_a_window_ago_is_not_in_the_last_one() -> None:
    """One replica stuck at 08:00, the other at 16:00: the last hour merged is the newer
    one's alone (before, the old replica's queries were listed as the last hour's); a
    replica a quarter of an hour behind still counts."""
    config = parse_config('[query_lists]\nmin_sessions = 1\nwindows = ["1h"]\n')

    def replica(start: float, text: str) -> Any:
        pipeline = fed(config, *(query(f"{text}{i}", start + 60.0 * i, f"s{i}", f"{text}{i}",
                                       text=text) for i in range(5)))
        return STATE.validate_json(STATE.dump_json(query_state([pipeline], None, config)))

    old, new, behind = replica(8 * HOUR, "python"), replica(16 * HOUR, "rust"), replica(
        15.75 * HOUR, "go")
    merged = report_of(merge_replicas([old, new]))
    assert {r["query"] for r in entry(merged, "searches")} == {"rust"}
    assert entry(merged, "searches")[0]["count"] == 5
    both = report_of(merge_replicas([old, new, behind]))
    assert {r["query"] for r in entry(both, "searches")} == {"rust", "go"}


def test_a_merge_counts_a_query_where_it_may_be_shown_and_nowhere_else() -> None:
    """One replica shows "rare words" (five sessions), the other hides it (three searches
    by two sessions): merged, the row is the first replica's. Before, it was 3 higher with
    an error of 3, and the difference was the hidden count."""
    config = parse_config('[query_lists]\nmin_sessions = 5\nwindows = ["1h"]\n')
    showing = fed(config, *(
        query(f"e{i}", 12.0 + i, f"t{i}", f"q{i}", text="rare words", results=0)
        for i in range(5)
    ))
    hiding = fed(config, *rare_and_popular(["h1", "h1", "h2"]))
    states = [STATE.validate_json(STATE.dump_json(query_state([p], None, config)))
              for p in (showing, hiding)]
    merged = report_of(merge_replicas(states))
    alone = report_of(states[0])
    for list_name in ("searches", "zero_results", "no_clicks"):
        rare = [r for r in entry(merged, list_name) if r["query"] == "rare words"]
        assert rare == [r for r in entry(alone, list_name) if r["query"] == "rare words"]
        assert rare and rare[0]["count"] == 5 and rare[0]["error"] == 0, list_name
    assert {r["query"]: r["count"] for r in entry(merged, "searches")} == {
        "rare words": 5, "shoes": 6,
    }


def test_merged_bounds_hold_for_the_searches_where_a_query_is_shown_or_not_kept() -> None:
    """Generated traffic, two partitions as two replicas, summaries of 60 counters, k = 10:
    every merged row bounds the query's searches at the replicas that list it or no longer
    keep it (not those where it is kept but hidden)."""
    config = parse_config(
        '[query_lists]\ncapacity = 60\nmin_sessions = 10\nwindows = ["1h"]\n'
    )
    replicas = [Pipeline(config), Pipeline(config)]
    accepted: list[list[dict[str, Any]]] = [[], []]
    stream = events(World.build(7), Traffic(seed=7, duration=2 * HOUR, sessions_per_second=3.0))
    for _, key, message in stream:
        side = crc32(key.encode()) % 2
        if replicas[side].feed(message) is None:
            event = json.loads(message)
            if event.get("type") == "query":
                accepted[side].append(event)
    states = [query_state([p], None, config) for p in replicas]
    exact: list[Counter[str]] = []
    counted: list[set[str]] = []  # listed, or not kept: where the bounds cover the searches
    for pipeline, state, events_of in zip(replicas, states, accepted, strict=True):
        merged, span = window_states([pipeline], HOUR, config)
        overall = merge_tallies(list(merged.values()), 60, 10)
        assert span is not None and overall is not None
        lists = pipeline.lists
        assert lists is not None
        exact.append(Counter(
            lists.key(e["query_text"]) for e in events_of if seconds_of(e) >= span[0]
        ))
        (window,) = state.windows
        listed = set(window.tallies[window.slices.index(["all"])].searches.keys)
        kept = set(overall.searches.counts.keys)
        counted.append({key for key in exact[-1] if key in listed or key not in kept})
        assert kept - listed, "some queries kept are hidden"
        assert len(kept) == 60, "the summary is full"
    rows = entry(report_of(merge_replicas(states)), "searches")
    assert rows
    for row in rows:
        covered = sum(e[row["query"]] for e, c in zip(exact, counted, strict=True)
                      if row["query"] in c)
        assert row["count"] - row["error"] <= covered <= row["count"], row


def test_zero_result_sessions_are_counted_apart_and_the_state_restores() -> None:
    """A query that found nothing for one session and something for another: its
    zero-result summary holds only the first session."""
    config = parse_config('[query_lists]\nmin_sessions = 2\nwindows = ["1h"]\n')
    pipeline = fed(config, query("e0", 0, "s0", "q0", text="shoes", results=0),
                   query("e1", 1, "s1", "q1", text="shoes", results=10),
                   query("e2", 2, "s2", "q2", text="shoes", results=0), close=False)
    state = codec.encode("unit", UnitState(
        "t", 0, 0, 1.0, None, codec.fingerprint(config), pipeline.snapshot()
    ))
    restored = Pipeline.restore(config, codec.decode_unit(state, "test").pipeline)
    assert restored.lists is not None
    (tally,) = restored.lists.buckets[HOUR][int(T0 // (HOUR / BUCKETS))].values()
    assert tally.zero.distinct("shoes") == 2 and tally.searches.distinct("shoes") == 2
    report = query_report([restored], restored, config)
    assert entry(report, "zero_results") == [{"query": "shoes", "count": 2, "error": 0}]


def test_redaction_happens_before_anything_is_kept() -> None:
    config = parse_config(
        '[query_lists]\nmin_sessions = 1\nwindows = ["1h"]\nredact_patterns = ["order-\\\\w+"]\n'
    )
    texts = ["mail Bob.Smith@example.com", "call 555 123 4567 now", "where is order-AB12",
             "iphone 15 case 2026"]
    pipeline = fed(config, *(
        query(f"e{i}", i, f"s{i}", f"q{i}", text=text) for i, text in enumerate(texts)
    ), close=False)
    state = codec.encode("unit", UnitState(
        "t", 0, 0, 1.0, None, codec.fingerprint(config), pipeline.snapshot()
    ))
    for secret in (b"example.com", b"555 123", b"AB12", b"bob"):
        assert secret not in state.lower(), secret
    pipeline.close()
    report = query_report([pipeline], pipeline, config)
    assert sorted(r["query"] for r in entry(report, "searches")) == [
        "call <digits> now", "iphone 15 case 2026", "mail <email>", "where is <redacted>",
    ]


@pytest.mark.timeout(60)  # redacting before the cut took tens of minutes for these
def test_a_query_text_of_a_mebibyte_is_redacted_and_cut_in_linear_time() -> None:
    """Events at the default size limit: each is accepted, and its query is kept as at most
    200 redacted characters, whatever the text's shape."""
    config = Config()
    limit = config.input.max_event_bytes
    envelope = len(query("e", 0, "s", "q", text=""))
    room = limit - envelope - 64
    texts = {
        "q1": ("Mail Jane.Doe@Example.com or call 030-1234-5678 now " * limit)[:room],
        "q2": "x " + "a" * room + "@example.com",  # one address as long as the event allows
        "q3": ("1 " * limit)[:room],
        "q4": ("a." * limit)[:room - 1] + "@",
    }
    pipeline = Pipeline(config)
    for i, (query_id, text) in enumerate(texts.items()):
        message = query(f"e{i}", i, f"s{i}", query_id, text=text)
        assert limit - 1024 < len(message) <= limit
        started = time.perf_counter()
        assert pipeline.feed(message) is None
        print(f"{query_id}: {time.perf_counter() - started:.3f} s")
    lists = pipeline.lists
    assert lists is not None
    keys = {query_id: lists.open[query_id] for query_id in texts}
    assert all(len(key) <= 200 for key in keys.values())
    assert keys["q1"] == ("mail <email> or call <digits> now " * 8)[:200]
    assert keys["q2"] == "x <email>"
    assert keys["q3"] == "<digits>"
    assert keys["q4"] == "a." * 100
    assert all(len(text) <= 400 for text in lists._keys), "long texts are not memoised"
    state = codec.encode("unit", UnitState(
        "t", 0, 0, 1.0, None, codec.fingerprint(config), pipeline.snapshot()
    ))
    for secret in (b"jane", b"example", b"1234"):
        assert secret not in state.lower(), secret


def test_disabled_lists_keep_and_show_no_query_text() -> None:
    config = parse_config('[query_lists]\nenabled = false\n')
    pipeline = fed(config, query("e1", 0, "s1", "q1", text="private words"),
                   click("c1", 5, "s1", "q1"), close=False)
    assert pipeline.lists is None and pipeline.snapshot().queries is None
    state = codec.encode("unit", UnitState(
        "t", 0, 0, 1.0, None, codec.fingerprint(config), pipeline.snapshot()
    ))
    assert b"private" not in state
    report = query_report([pipeline], pipeline, config)
    assert report["enabled"] is False and report["lists"] == [] and report["worsened"] == []
    assert b"disabled" in page.render(export(pipeline), report)
    assert "disabled" in format_lists(report, 10)


# --- what changed between judged samples, and in the live join ----------------------------

def judgment(sample: str, at: float, text: str, ranking: list[str], labels: dict[str, int],
             klass: str = "travel") -> bytes:
    return line({"type": "judgment", "sample_id": sample, "timestamp": stamp(at),
                 "query_id": f"{sample}-{text}", "query_text": text, "ranking": ranking,
                 "labels": labels, "query_class": klass})


def test_worsened_queries_between_samples_equal_a_hand_computation() -> None:
    config = parse_config(
        '[offline]\nmeasures = ["P@2", "RR"]\nmin_shared_queries = 2\nsample_quiet = "10m"\n'
        '[query_classes]\nnames = ["travel", "food"]\n'
    )
    relevant = {"d1": 1}
    before = {  # P@2, RR in sample A
        "flights": ["d1", "d2"],     # 0.5, 1
        "hotels": ["d1", "d3"],      # 0.5, 1
        "pizza": ["d2", "d1"],       # 0.5, 0.5
        "trains": ["d3", "d4", "d1"],  # 0, 1/3
    }
    after = {  # in sample B
        "flights": ["d2", "d3", "d1"],  # 0, 1/3: P@2 -0.5, RR -2/3
        "hotels": ["d2", "d1"],         # 0.5, 0.5: RR -0.5
        "pizza": ["d3", "d4"],          # 0, 0: P@2 -0.5, RR -0.5
        "trains": ["d1", "d2"],         # 0.5, 1: better
    }
    klass = {"pizza": "food"}
    messages = [
        judgment("A", i, text, ranking, relevant, klass.get(text, "travel"))
        for i, (text, ranking) in enumerate(before.items())
    ] + [
        judgment("B", HOUR + i, text, ranking, relevant, klass.get(text, "travel"))
        for i, (text, ranking) in enumerate(after.items())
    ]
    pipeline = fed(config, *messages)
    worsened = query_report([pipeline], pipeline, config)["worsened"]
    cells = {(e["query_class"], e["measure"]): [(r["query"], r["before"], r["after"])
                                                for r in e["rows"]]
             for e in worsened if e["source"] == "sample"}
    assert {e["sample_id"] for e in worsened} == {"B"}
    assert {e["baseline_id"] for e in worsened} == {"A"}
    assert cells[("all", "P@2")] == [("flights", 0.5, 0.0), ("pizza", 0.5, 0.0)]
    assert cells[("all", "RR")] == [
        ("flights", 1.0, pytest.approx(1 / 3)), ("hotels", 1.0, 0.5), ("pizza", 0.5, 0.0),
    ]
    assert cells[("travel", "RR")] == [
        ("flights", 1.0, pytest.approx(1 / 3)), ("hotels", 1.0, 0.5),
    ]
    assert cells[("food", "P@2")] == [("pizza", 0.5, 0.0)]
    assert ("food", "RR") in cells and ("travel", "P@2") in cells
    assert all(r["delta"] == pytest.approx(r["after"] - r["before"])
               for e in worsened for r in e["rows"])


def test_worsened_live_queries_compare_the_last_window_with_the_one_before() -> None:
    config = parse_config('[offline]\nmeasures = ["RR"]\nwindows = ["1h"]\n')
    served = {  # time -> (text, results): qrels say d1 is the relevant one
        0.0: ("cheap flights", ["d1", "d2"]), 600.0: ("cheap flights", ["d1", "d2"]),
        1200.0: ("pizza", ["d2", "d1"]),
        3700.0: ("cheap flights", ["d2", "d1"]), 4300.0: ("cheap flights", ["d2", "d3", "d1"]),
        4400.0: ("pizza", ["d2", "d1"]),
    }
    messages = [
        line({"type": "qrels", "timestamp": stamp(-10), "query_text": text,
              "labels": {"d1": 1}})
        for text in ("cheap flights", "pizza")
    ] + [
        query(f"e{i}", at, f"s{i}", f"q{i}", text=text, result_ids=results)
        for i, (at, (text, results)) in enumerate(served.items())
    ]
    pipeline = fed(config, *messages)
    live = [e for e in query_report([pipeline], pipeline, config)["worsened"]
            if e["source"] == "live" and e["query_class"] == "all"]
    # the clock is 4400 s: the last hour is the half-hour buckets from 3600 s, the hour
    # before those from 0 s; cheap flights fell from RR 1 to (1/2 + 1/3) / 2, pizza stayed
    assert [(e["window"], e["measure"]) for e in live] == [("1h", "RR")]
    assert [(r["query"], r["before"], r["after"]) for r in live[0]["rows"]] == [
        ("cheap flights", 1.0, pytest.approx(5 / 12)),
    ]


def test_live_drift_keeps_at_most_two_windows_whatever_the_order_of_arrival() -> None:
    """Live queries forwarded out of order (a partition lagging another) keep at most the
    four half-window buckets of the two windows compared, and the state restores."""
    config = Config().offline
    judged = Judged(config)
    judged.show = str
    judged.active = True
    judged.store_qrels("shoes", {"d0": 1})
    half = 1800.0
    judged.advance(12 * half + 1)
    for bucket in (13, 9, 10, 11, 12):
        judged.live_query(bucket * half + 5, 0, "shoes", ["d0"])
    judged.close()
    assert sorted(judged.drift[HOUR]["shoes"][1]) == [10, 11, 12, 13]
    again = Judged.restore(Layout(Config(), 1), judged.snapshot())
    assert again.drift == judged.drift


# --- state: checkpoint round trip, settings, filters ---------------------------------------

def generated(seed: int = 2, hours: float = 2.0) -> list[bytes]:
    return [m for _, _, m in events(World.build(seed), Traffic(
        seed=seed, duration=hours * HOUR, sessions_per_second=2.0, qrels=True,
        judged_every=HOUR, judged_queries=60, regression=Regression("navigational", T0 + HOUR),
    ))]


def test_lists_survive_a_checkpoint_and_restart_anew_under_other_settings() -> None:
    config = Config()
    stream = generated()
    half = len(stream) // 2
    pipeline = fed(config, *stream[:half], close=False)
    state = pipeline.snapshot()
    data = codec.encode("unit", UnitState("t", 0, half, 1.0, None, codec.fingerprint(config),
                                          state))
    restored = Pipeline.restore(config, codec.decode_unit(data, "test").pipeline)
    assert restored.lists is not None and pipeline.lists is not None
    assert restored.lists.snapshot() == pipeline.lists.snapshot()
    for message in stream[half:]:
        restored.feed(message)
        pipeline.feed(message)
    restored.close()
    pipeline.close()
    assert query_report([restored], restored, config) == query_report([pipeline], pipeline,
                                                                        config)
    other = parse_config("[query_lists]\ncapacity = 200\n")
    anew = Pipeline.restore(other, state)
    assert anew.lists is not None and not any(anew.lists.buckets.values())


def test_filters_select_by_class_window_and_list() -> None:
    config = Config()
    pipeline = fed(config, *generated())
    report = query_report([pipeline], pipeline, config)
    assert {e["window"] for e in report["lists"]} == {"1h", "24h"}
    chosen = select(report, "navigational", "24h", "zero_results")
    assert chosen["lists"] and all(
        (e["query_class"], e["window"], e["list"]) == ("navigational", "24h", "zero_results")
        for e in chosen["lists"]
    ) and chosen["worsened"] == []
    worse = select(report, "navigational", None, "worsened")
    assert worse["lists"] == [] and worse["worsened"]
    assert {e["query_class"] for e in worse["worsened"]} == {"navigational"}
    assert select(report, window="86400")["lists"] == select(report, window="24h")["lists"]
    with pytest.raises(FilterError, match="expected one of"):
        select(report, list_name="top")
    with pytest.raises(FilterError, match="duration"):
        select(report, window="yesterday")
    # a class or window no list has is a mistake to say, not an empty answer
    with pytest.raises(FilterError, match=r"class 'Navigational': no list of it \(classes: "
                                          r"all, .*navigational"):
        select(report, "Navigational")
    with pytest.raises(FilterError, match=r"window '2h': no list of it \(windows: 1h, 24h\)"):
        select(report, window="2h")
    nothing = {**report, "lists": [], "worsened": []}  # before anything is counted
    assert select(nothing, "Navigational", "2h")["lists"] == []
    # the worsened queries' classes and windows are asked for too (live: 7d by default)
    live = {"source": "live", "window": "7d", "query_class": "news", "measure": "AP",
            "rows": []}
    both = {**report, "worsened": [*report["worsened"], live]}
    assert select(both, "news", "7d", "worsened")["worsened"] == [live]


def letters(number: int) -> str:
    word = ""
    while True:
        number, digit = divmod(number, 26)
        word += chr(ord("a") + digit)
        if not number:
            return word


def test_the_memo_of_keys_holds_a_bounded_number_of_characters() -> None:
    """The memo of text -> key is bounded by the characters it holds, not only by the
    number of texts: 65,536 distinct texts of 390 four-byte characters stay within it."""
    from monitor.core.querylists import MEMO_CHARS, MEMO_TEXTS

    lists = QueryLists(QueryListsConfig())
    most = most_texts = 0
    for i in range(65_536):
        text = ("\U0001f600" * 380) + f" n{i}"
        assert lists.key(text) == lists.key(text)
        if len(lists._keys) > most_texts:
            most_texts = len(lists._keys)
            most = sum(len(t) for t in lists._keys)
    assert most <= MEMO_CHARS
    assert most_texts >= MEMO_CHARS // 390 - 1, "it memoises up to its bound"
    # and short texts: at most MEMO_TEXTS of them (2^20 characters would be far more)
    lists = QueryLists(QueryListsConfig())
    most_texts = 0
    for i in range(200_000):
        lists.key(f"q{i}")
        most_texts = max(most_texts, len(lists._keys))
    assert most_texts == MEMO_TEXTS


# --- memory --------------------------------------------------------------------------------

@pytest.mark.slow
def test_memory_stays_within_the_configured_bound_over_a_million_distinct_queries() -> None:
    """Default settings, one class, a day: a million distinct queries (each also finishing)
    take no more memory than two hundred thousand (both fill every summary of both windows),
    and at most the bound documented per class."""
    config = Config().query_lists

    def filled(distinct: int) -> tuple[QueryLists, int]:
        lists = QueryLists(config)
        for i in range(distinct):
            time = T0 + i * (24 * HOUR / distinct)
            text = f"distinct query {letters(i)}"  # digits would be redacted into one query
            lists.searched(0, time, f"q{i}", text, f"s{i % 50_000}", i % 2 == 0)
            lists.finished(f"q{i}", 0, time, f"s{i % 50_000}", i % 3 == 0)
        lists.flush()
        lists._keys.clear()  # the text memo is a bounded cache, not the lists
        assert not lists.open
        return lists, deep_size(lists)

    _, at_200k = filled(200_000)
    large, at_1m = filled(1_000_000)
    counters = sum(len(t.searches.counts) + len(t.zero.counts) + len(t.outcomes.counts)
                   for buckets in large.buckets.values() for bucket in buckets.values()
                   for t in bucket.values())
    assert counters <= memory_bound(config)
    for length in config.windows:
        kept = [len(t.searches.counts) for b in large.buckets[length].values()
                for t in b.values()]
        assert sum(kept) >= 4 * config.capacity, "the summaries are full"
    print(f"query lists, one class, default size: {at_1m / 1e6:.1f} MB after 1,000,000 "
          f"distinct queries in a day ({at_200k / 1e6:.1f} MB after 200,000), "
          f"{counters} counters, {at_1m / counters:.0f} B per counter")
    assert at_1m <= at_200k * 1.1, "memory grew with the number of distinct queries"
    assert at_1m <= 20e6, "more than the documented bound per class"


def deep_size(root: object) -> int:
    """Bytes of ``root`` and everything it references (each object once)."""
    seen: set[int] = set()
    pending = [root]
    total = 0
    while pending:
        item = pending.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        pending.extend(gc.get_referents(item))
    return total


def test_each_worsened_cell_names_the_baseline_it_was_compared_with() -> None:
    """Food regresses at B and stays broken at C, compared with A (held under last_good);
    travel was fine at B, so at C it is compared with B: each list says its own baseline."""
    config = parse_config(
        '[offline]\nmeasures = ["RR"]\nmin_shared_queries = 5\nsample_quiet = "10m"\n'
        '[query_classes]\nnames = ["travel", "food"]\n'
    )
    good, bad = ["d1", "d2"], ["d2", "d3", "d1"]
    messages = []
    for s, (sample, food_ok) in enumerate((("A", True), ("B", False), ("C", False))):
        for i in range(20):
            at = s * HOUR + i
            messages.append(judgment(sample, at, f"food {i}", good if food_ok else bad,
                                     {"d1": 1}, "food"))
            travel = bad if sample == "C" and i == 0 else good  # one travel query worse at C
            messages.append(judgment(sample, at + 0.5, f"trip {i}", travel, {"d1": 1}, "travel"))
    pipeline = fed(config, *messages)
    assert pipeline.judged.verdicts[(pipeline.slices.index[("food",)], 0)].regression is True
    worsened = [e for e in query_report([pipeline], pipeline, config)["worsened"]
                if e["source"] == "sample"]
    baselines = {e["query_class"]: (e["sample_id"], e["baseline_id"]) for e in worsened}
    assert baselines["food"] == ("C", "A") and baselines["travel"] == ("C", "B")


@pytest.mark.parametrize("document", [
    {"queries": {"enabled": True, "lists": [{"list": "searches", "query_class": "all",
                                              "rows": []}]}},
    {"queries": {"enabled": True, "lists": [{"list": "searches", "query_class": "all",
                                              "window": "1h", "from": "a", "to": "b",
                                              "rows": [{"query": "x"}]}]}},
    {"queries": {"enabled": True, "worsened": [{"measure": "AP"}]}},
    {"queries": {"enabled": True, "lists": "none"}},
])
def test_top_reads_a_report_without_the_fields_of_query_lists_as_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], document: dict[str, Any],
) -> None:
    from monitor.cli.main import main

    path = tmp_path / "report.json"
    path.write_text(json.dumps(document))
    assert main(["top", "--report", str(path)]) == 2
    assert "not the query lists of searchmon" in capsys.readouterr().err
