"""Bad input never stops the pipeline and every line is counted exactly once."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import parse_config
from monitor.events import Reason, decode
from monitor.pipeline import Pipeline
from monitor.replay import report
from tests.events import click, query

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
GOOD = query("e0", 0, "s0", "q0")


def mutations() -> st.SearchStrategy[bytes]:
    good = json.loads(GOOD)
    return st.one_of(
        st.binary(max_size=200),
        st.integers(1, len(GOOD) - 1).map(lambda n: GOOD[:n]),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.dictionaries(st.sampled_from(sorted(good)), json_values).map(
            lambda patch: json.dumps({**good, **patch}).encode()
        ),
        st.sampled_from(["query", "click", "dwell", "conversion", "judgment", "qrels", "x"]).map(
            lambda kind: json.dumps({**good, "type": kind}).encode()
        ),
        st.just(json.dumps({**good, "timestamp": "2026-11-22T10:00:00"}).encode()),
        st.just(json.dumps({**good, "query_text": "x" * 2_000_000}).encode()),
        st.integers(1, 3000).map(lambda d: b"[" * d + b"]" * d),
        st.integers(0, 50).map(lambda i: query(f"e{i}", i, f"s{i % 5}", f"q{i}")),
        st.integers(0, 50).map(lambda i: click(f"c{i}", i + 1, f"s{i % 5}", f"q{i}")),
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(mutations(), max_size=60))
def test_every_line_is_accepted_or_rejected_exactly_once(lines: list[bytes]) -> None:
    pipeline = Pipeline(parse_config("[input]\nmax_event_bytes = 1000000"))
    returned = accepted_queries = 0
    for line in lines:
        decoded = decode(line, 1_000_000)
        if pipeline.feed(line) is not None:
            returned += 1
        elif isinstance(decoded, dict) and decoded["type"] == "query":
            accepted_queries += 1
    pipeline.close()
    health = pipeline.health
    rejected = sum(health.rejected.values())
    assert health.events_read == len(lines)
    assert rejected == returned
    assert health.accepted + rejected + health.ignored_actions + health.judged_messages == len(
        lines
    )
    assert report(pipeline)["online"]["all"]["queries"] == accepted_queries
    assert set(health.rejected) == set(Reason)


EXTREMES = [10**400, -(10**400), 2**63, 2**31, -1, 1e400, -1e400, 1e308, "NaN"]
"""Numbers no field can hold; "NaN" stands for the JSON constant."""

BASE = {
    "query": {"type": "query", "event_id": "x1", "timestamp": 1_790_000_000_000,
              "session_id": "s1", "query_id": "q1", "query_text": "a b",
              "result_ids": ["d1", "d2"], "result_count": 2, "latency_ms": 12.5, "page": 1},
    "click": {"type": "click", "event_id": "x2", "timestamp": 1_790_000_001_000,
              "session_id": "s1", "query_id": "q1", "doc_id": "d1", "position": 1,
              "dwell_ms": 100.0},
    "dwell": {"type": "dwell", "event_id": "x3", "timestamp": 1_790_000_002_000,
              "session_id": "s1", "query_id": "q1", "doc_id": "d1", "dwell_ms": 100.0},
    "conversion": {"type": "conversion", "event_id": "x4", "timestamp": 1_790_000_003_000,
                   "session_id": "s1", "query_id": "q1", "value": 3.5},
    "judgment": {"type": "judgment", "sample_id": "j", "timestamp": 1_790_000_000_000,
                 "query_id": "q", "query_text": "a b", "ranking": ["d1", "d2"],
                 "labels": {"d1": 2}, "scores": {"d1": 2.0, "d2": 1.0}},
    "qrels": {"type": "qrels", "timestamp": 1_790_000_000_000, "query_text": "a b",
              "labels": {"d1": 2}},
    "ubi-click": {"action_name": "click", "timestamp": 1_790_000_001_000, "session_id": "s1",
                  "query_id": "q1", "event_attributes": {"object": {"object_id": "d1"},
                                                         "position": {"ordinal": 1}}},
}


def numeric_paths(node: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(node, dict):
        return [p for key, child in node.items() for p in numeric_paths(child, (*path, key))]
    if isinstance(node, int | float) and not isinstance(node, bool):
        return [path]
    return []


def with_value(document: dict[str, object], path: tuple[str, ...], value: object) -> bytes:
    changed = json.loads(json.dumps(document))
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@@" if value == "NaN" else value
    return json.dumps(changed).replace('"@@"', "NaN").encode()


def test_every_numeric_field_rejects_what_it_cannot_hold_and_the_state_stays_restorable() -> None:
    """Each numeric field of each event type set to each extreme value, between good lines:
    the line is rejected as ``schema`` naming the field (or accepted when the value is in
    range), nothing raises, and the state still goes through a checkpoint and back."""
    from tests.test_online import round_trip

    good = [json.dumps(document).encode() for document in BASE.values()]
    cases = 0
    for name, document in BASE.items():
        for path in numeric_paths(document):
            for value in EXTREMES:
                pipeline = Pipeline(parse_config(""))
                bad = with_value(document, path, value)
                for line in [*good[:2], bad, *good[2:]]:
                    rejection = pipeline.feed(line)
                    if line is bad and rejection is not None:
                        assert rejection.reason in (Reason.SCHEMA, Reason.DUPLICATE), rejection
                        if rejection.reason is Reason.SCHEMA:
                            assert path[-1] in rejection.detail, (name, path, rejection)
                restored = round_trip(pipeline)
                restored.close()
                report(restored)
                cases += 1
    assert cases > 100
