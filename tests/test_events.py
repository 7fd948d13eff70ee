"""Decoding: native events, UBI 1.3.0 records, and every rejection reason."""

from __future__ import annotations

import json

import pytest

from monitor.events import IgnoredAction, Reason, Rejection, decode, epoch_seconds
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
