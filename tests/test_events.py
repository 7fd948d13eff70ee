"""Decoding: native events, UBI 1.3.0 records, and every rejection reason."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.events import (
    FastPathError,
    IgnoredAction,
    Reason,
    Rejection,
    as_live,
    decode,
    decode_live,
    epoch_seconds,
)
from tests.events import T0, click, query

LIMIT = 1 << 20


def test_native_query_decodes_with_unknown_fields_ignored() -> None:
    raw = json.loads(query("e1", 0, "s1", "q1"))
    raw["future_field"] = {"nested": [1, 2]}
    event = decode(json.dumps(raw).encode(), LIMIT)
    assert isinstance(event, dict) and event["type"] == "query"
    assert event["result_ids"][:2] == ["d0", "d1"] and "future_field" not in event


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        (1_790_000_000_123, 1_790_000_000.123),
        ("2026-11-22T10:00:05Z", 1795341605.0),
        ("2026-11-22T10:00:05.250Z", 1795341605.25),
        ("2026-11-22T12:00:05+02:00", 1795341605.0),
    ],
)
def test_timestamps(stamp: int | str, seconds: float) -> None:
    assert epoch_seconds(stamp) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json", Reason.INVALID_JSON),
        (b'{"type": "query", "event_id": ', Reason.INVALID_JSON),
        (b"[" * 5000 + b"]" * 5000, Reason.INVALID_JSON),
        (b"[1, 2]", Reason.SCHEMA),
        (b'"a string"', Reason.SCHEMA),
        (b'{"type": "query", "event_id": "e1"}', Reason.SCHEMA),
        (json.dumps({**json.loads(click("e1", 0, "s", "q")), "position": 0}).encode(),
         Reason.SCHEMA),
        (json.dumps({**json.loads(click("e1", 0, "s", "q")), "position": "x"}).encode(),
         Reason.SCHEMA),
        (json.dumps({**json.loads(query("e1", 0, "s", "q")), "event_id": 7}).encode(),
         Reason.SCHEMA),
        (b'{"type": "impression", "event_id": "e1"}', Reason.UNKNOWN_TYPE),
        (b'{"hello": "world"}', Reason.UNKNOWN_TYPE),
        (b"x" * (LIMIT + 1), Reason.TOO_LARGE),
    ],
)
def test_rejections(data: bytes, reason: Reason) -> None:
    result = decode(data, LIMIT)
    assert isinstance(result, Rejection)
    assert result.reason is reason, result.detail


def test_ubi_query_record_is_a_query_sessionized_by_client() -> None:
    record = {
        "application": "shop", "query_id": "u-1", "client_id": "c-9", "user_query": "red shoes",
        "timestamp": "2026-11-22T10:00:00Z", "query_response_hit_ids": ["p1", "p2"],
        "query_attributes": {}, "object_id_field": "sku",
    }
    event = decode(json.dumps(record).encode(), LIMIT)
    assert isinstance(event, dict) and event["type"] == "query"
    assert event["session_id"] == "ubi-client:c-9" and event["query_text"] == "red shoes"
    assert event["result_ids"] == ["p1", "p2"] and event["event_id"] == "ubi-query:u-1"


@pytest.mark.parametrize(
    ("action", "kind"),
    [("click", "click"), ("purchase", "conversion"), ("add_to_cart", "conversion")],
)
def test_ubi_events(action: str, kind: str) -> None:
    record = {
        "application": "shop", "action_name": action, "query_id": "u-1", "client_id": "c-9",
        "session_id": "sess-4", "timestamp": int(T0 * 1000), "message_type": "INFO",
        "event_attributes": {"object": {"object_id": "p2", "object_id_field": "sku"},
                             "position": {"ordinal": 2}},
    }
    event = decode(json.dumps(record).encode(), LIMIT)
    assert isinstance(event, dict) and event["type"] == kind
    assert event["session_id"] == "sess-4" and event.get("query_id") == "u-1"
    if kind == "click":
        assert event["type"] == "click" and event["position"] == 2 and event["doc_id"] == "p2"
    # identical bytes are the same event; other bytes another one
    again = decode(json.dumps(record).encode(), LIMIT)
    assert isinstance(again, dict) and again["event_id"] == event["event_id"]


def test_other_ubi_actions_are_ignored_and_a_click_without_position_rejected() -> None:
    hover = {"action_name": "hover", "client_id": "c", "timestamp": "2026-11-22T10:00:00Z"}
    assert decode(json.dumps(hover).encode(), LIMIT) == IgnoredAction("hover")
    bad = {**hover, "action_name": "click", "query_id": "u"}
    result = decode(json.dumps(bad).encode(), LIMIT)
    assert isinstance(result, Rejection) and result.reason is Reason.SCHEMA


ODD_VALUES = [
    None, True, False, 0, 1, -1, 2, 2.0, 2.5, "2", "", "x", 2**31 - 1, 2**31, 2**63, 10**400,
    1e12, 1e12 + 1, 1e15, 1e16, -1e15, 1e400, [], ["d1"], [1], {}, {"a": 1},
    1_790_000_000_000, 253_402_300_799_999, 253_402_300_800_000, "2026-11-22T10:00:05Z",
]
TEMPLATES = {
    "query": json.loads(query("e1", 0, "s1", "q1", result_count=3, latency_ms=4.5, page=1)),
    "click": json.loads(click("e2", 1, "s1", "q1", dwell_ms=30.0)),
    "dwell": {"type": "dwell", "event_id": "e3", "timestamp": 1_790_000_000_000,
              "session_id": "s1", "query_id": "q1", "doc_id": "d1", "dwell_ms": 5.0},
    "conversion": {"type": "conversion", "event_id": "e4", "timestamp": 1_790_000_000_000,
                   "session_id": "s1", "query_id": "q1", "doc_id": "d1", "value": 2.0},
}


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(sorted(TEMPLATES)),
    changes=st.dictionaries(
        st.sampled_from(sorted({k for t in TEMPLATES.values() for k in t} - {"type"})),
        st.sampled_from(ODD_VALUES) | st.just("@drop"), max_size=3,
    ),
)
def test_the_fast_path_accepts_only_what_the_full_validation_accepts_alike(
    kind: str, changes: dict[str, object]
) -> None:
    """msgspec decodes live events first; whatever it accepts, pydantic's definitions accept
    with the same values, so the fast path never lets through what the documented rules
    refuse (and what it refuses, they decide)."""
    document = dict(TEMPLATES[kind])
    for key, value in changes.items():
        if value == "@drop":
            document.pop(key, None)
        else:
            document[key] = value
    data = json.dumps(document).encode()
    try:
        fast = decode_live(data)
    except FastPathError:
        return
    slow = decode(data, LIMIT)
    assert isinstance(slow, dict), (document, slow)
    assert slow["type"] != "judgment" and slow["type"] != "qrels"
    assert as_live(slow) == fast
