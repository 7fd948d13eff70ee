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
