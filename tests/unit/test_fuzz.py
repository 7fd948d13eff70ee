"""Bad input never stops the pipeline and every line is counted exactly once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.cli.replay import replay
from monitor.config import parse_config
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.inputs.chain import DecoderChain
from monitor.inputs.events import Decoded, QueryEvent, Reason
from monitor.serve.report import report
from tests.support.events import click, conversion, query

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
    config = parse_config("[input]\nmax_event_bytes = 1000000")
    pipeline, chain = Pipeline(config), DecoderChain(config)
    returned = accepted_queries = 0
    for line in lines:
        decoded = chain.read(line)
        if pipeline.feed(line) is not None:
            returned += 1
        elif type(decoded) is tuple and type(cast(Decoded, decoded)[1]) is QueryEvent:
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


FAR = [
    0, 1, 253_402_300_799_999, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z",
    "2100-01-01T00:00:00+00:00", "1970-01-01T00:00:00Z",
]
"""Timestamps far in the past or the future (and other values for every field)."""
FUTURE = [253_402_300_799_999, "9999-12-31T23:59:59.999Z", "2100-01-01T00:00:00+00:00"]
ODD = [None, "", "x" * 5000, [], {}, True, [1, None], {"a": 10**400}, "\u0000"]

MUST_REJECT = [10**400, -(10**400), 2**63, 1e400, -1e400, 1e308, "NaN"]
"""No numeric field holds these."""


def leaf_paths(node: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field of a document, nested ones included (and the objects holding them)."""
    if isinstance(node, dict):
        below = [p for key, child in node.items() for p in leaf_paths(child, (*path, key))]
        return [path, *below] if path else below
    return [path]


def with_value(document: dict[str, object], path: tuple[str, ...], value: object) -> bytes:
    changed = json.loads(json.dumps(document))
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@@" if value == "NaN" else value
    return json.dumps(changed).replace('"@@"', "NaN").encode()


def context() -> list[bytes]:
    """Good traffic around the bad line: 40 sessions over 20 minutes, clicks, a conversion."""
    lines = []
    for i in range(40):
        lines.append(query(f"ce{i}", 30.0 * i, f"c{i % 7}", f"cq{i}", klass="news"))
        if i % 3:
            lines.append(click(f"cc{i}", 30.0 * i + 4, f"c{i % 7}", f"cq{i}", position=1 + i % 4))
    lines.append(conversion("cv", 30.0 * 40, "c0", "cq35"))
    return lines


def replayed(lines: list[bytes], path: Path) -> tuple[Pipeline, dict[str, Any]]:
    from tests.support.checkpoints import round_trip

    path.write_bytes(b"\n".join(lines) + b"\n")
    pipeline = Pipeline(parse_config(""))
    replay(pipeline, path, RejectionLog(0))
    restored = round_trip(pipeline)  # whatever was accepted goes through a checkpoint
    restored.close()
    return restored, report(restored)


@pytest.mark.slow
def test_every_field_of_every_event_with_extreme_values_is_rejected_or_harmless(
    tmp_path: Path,
) -> None:
    """Each field of each event type (nested ones too) set to each extreme value, in the
    middle of good traffic, replayed: nothing raises; out-of-range numbers, far past and far
    future times are rejected with a reason (``schema`` naming the field, ``too_late``,
    ``future_timestamp``); and whenever the line is rejected, the good lines around it count
    exactly as without it."""
    good = context()
    middle = len(good) // 2
    _, without = replayed(good, tmp_path / "good.jsonl")
    cases = rejected = 0
    for name, document in BASE.items():
        for path in leaf_paths(document):
            for value in [*EXTREMES, *FAR, *ODD]:
                bad = with_value(document, path, value)
                _, got = replayed(
                    [*good[:middle], bad, *good[middle:]], tmp_path / "bad.jsonl"
                )
                cases += 1
                reasons = got.pop("rejected")
                must = value in MUST_REJECT or (
                    path[-1] == "timestamp" and value in FAR
                    and (name not in ("judgment", "qrels") or value in FUTURE)
                )
                if must:
                    assert reasons, (name, path, value)
                if not reasons:
                    continue
                rejected += 1
                assert sum(reasons.values()) == 1, (name, path, value, reasons)
                assert got == {k: v for k, v in without.items() if k != "rejected"}, (
                    name, path, value, reasons,
                )
                if "schema" in reasons and value in MUST_REJECT:
                    single = Pipeline(parse_config("")).feed(bad)
                    assert single is not None and path[-1] in single.detail, (path, single)
    print(f"{cases} cases, {rejected} rejected")
    assert cases > 1000 and rejected > 500
