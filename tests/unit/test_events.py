"""Decoding: native events, UBI 1.3.0 records, and every rejection reason."""

from __future__ import annotations

import json
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.config import Config, InputConfig, UbiConfig
from monitor.inputs.chain import DecoderChain, Result
from monitor.inputs.events import (
    SESSION_OF_QUERY,
    ClickEvent,
    ConversionEvent,
    Decoded,
    DwellEvent,
    IgnoredAction,
    ImpressionEvent,
    JudgedMessage,
    Live,
    QueryEvent,
    Reason,
    Rejection,
)
from monitor.inputs.native import FastPathError, as_live, decode_live, decode_native
from monitor.inputs.timestamps import Timestamps
from tests.support.events import T0, click, query

LIMIT = 1 << 20


def decode(
    data: bytes, limit: int = LIMIT, ubi: UbiConfig | None = None
) -> Live | JudgedMessage | Rejection | IgnoredAction:
    """What the decoder chain of a configuration makes of ``data`` (a live event without its
    time)."""
    config = Config(input=InputConfig(max_event_bytes=limit), ubi=ubi or UbiConfig())
    result: Result = DecoderChain(config).read(data)
    if type(result) is tuple:
        return cast(Decoded, result)[1]
    return cast(JudgedMessage | Rejection | IgnoredAction, result)


def test_native_query_decodes_with_unknown_fields_ignored() -> None:
    raw = json.loads(query("e1", 0, "s1", "q1"))
    raw["future_field"] = {"nested": [1, 2]}
    event = decode(json.dumps(raw).encode(), LIMIT)
    assert isinstance(event, QueryEvent)
    assert event.result_ids[:2] == ["d0", "d1"] and not hasattr(event, "future_field")


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        (1_790_000_000_123, 1_790_000_000.123),
        ("2026-11-22T10:00:05Z", 1795341605.0),
        ("2026-11-22T10:00:05.250Z", 1795341605.25),
        ("2026-11-22T12:00:05+02:00", 1795341605.0),
        ("1790000000123", 1_790_000_000.123),  # epoch milliseconds as a string (UBI)
        ("2026-11-22t10:00:05.250z", 1795341605.25),  # RFC 3339 allows lower case
        ("2026-11-22T10:00:05z", 1795341605.0),
    ],
)
def test_timestamps(stamp: int | str, seconds: float) -> None:
    assert Timestamps().read(stamp) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json", Reason.INVALID_JSON),
        (b'{"type": "query", "event_id": ', Reason.INVALID_JSON),
        (b"[" * 5000 + b"]" * 5000, Reason.TOO_DEEP),
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
        "timestamp": "2026-11-22T10:00:00Z", "query_response_hit_ids": ["p1", 2],
        "query_attributes": {}, "object_id_field": "sku",
    }
    event = decode(json.dumps(record).encode(), LIMIT)
    assert isinstance(event, QueryEvent)
    assert event.session_id == "ubi-client:c-9" and event.query_text == "red shoes"
    assert event.result_ids == ["p1", "2"] and event.event_id.startswith("ubi-query:u-1:")
    same = decode(json.dumps(record).encode(), LIMIT)
    other = decode(json.dumps({**record, "timestamp": "2026-11-22T10:00:01Z"}).encode(), LIMIT)
    assert isinstance(same, QueryEvent) and isinstance(other, QueryEvent)
    assert other.event_id != event.event_id == same.event_id, "a record's id: its bytes"
    assert event.results_known


@pytest.mark.parametrize(
    ("action", "kind"),
    [("click", ClickEvent), ("item_click", ClickEvent), ("purchase", ConversionEvent),
     ("add_to_cart", ConversionEvent), ("impression", ImpressionEvent)],
)
def test_ubi_events(action: str, kind: type) -> None:
    record = {
        "application": "shop", "action_name": action, "query_id": "u-1", "client_id": "c-9",
        "session_id": "sess-4", "timestamp": int(T0 * 1000), "message_type": "INFO",
        "event_attributes": {"object": {"object_id": 7, "object_id_field": "sku"},
                             "position": {"ordinal": 2}},
    }
    event = decode(json.dumps(record).encode(), LIMIT)
    assert type(event) is kind
    assert isinstance(event, ClickEvent | ConversionEvent | ImpressionEvent)
    # resolved through its query id when applied; its own session otherwise
    assert event.session_id == SESSION_OF_QUERY + "sess-4" and event.query_id == "u-1"
    assert event.doc_id == "7"
    if isinstance(event, ClickEvent | ImpressionEvent):
        assert event.position == 3, "ordinal 2 of a 0-based list is the third result"
    # identical bytes are the same event; other bytes another one
    again = decode(json.dumps(record).encode(), LIMIT)
    assert isinstance(again, ClickEvent | ConversionEvent | ImpressionEvent)
    assert again.event_id == event.event_id


@pytest.mark.parametrize(
    ("position", "rank"),
    [({"ordinal": 0}, 1), ({"ordinal": {"index": 4}}, 5), ({"index": 1}, 2),
     ({"xy": {"x": 10.5, "y": 3}}, 0), ({"x": 1, "y": 2, "page_depth": 2}, 0), (None, 0)],
)
def test_ubi_positions_of_every_form_the_schema_allows(
    position: dict[str, object] | None, rank: int
) -> None:
    record = {"action_name": "click", "query_id": "u", "timestamp": "2018-11-13T20:20:39",
              "event_attributes": {"position": position}}
    event = decode(json.dumps(record).encode(), LIMIT)
    assert isinstance(event, ClickEvent) and event.position == rank
    timed = DecoderChain(Config()).read(json.dumps(record).encode())
    assert cast(Decoded, timed)[0] == 1542140439.0, "no offset: read as UTC ([ubi])"
    one_based = decode(json.dumps(record).encode(), LIMIT, UbiConfig(ordinal_base=1))
    if position is not None and position.get("ordinal") == 0:
        assert isinstance(one_based, Rejection) and "ordinal" in one_based.detail
    else:
        assert isinstance(one_based, ClickEvent)


def test_ubi_records_the_schema_allows_and_those_it_does_not() -> None:
    minimal_query = {"user_query": "shoes", "timestamp": 1_790_000_000_000}
    event = decode(json.dumps(minimal_query).encode(), LIMIT)
    assert isinstance(event, QueryEvent) and not event.results_known, "hit ids unknown"
    empty = decode(json.dumps({**minimal_query, "query_response_hit_ids": []}).encode(), LIMIT)
    assert isinstance(empty, QueryEvent) and empty.results_known and empty.result_ids == []
    unknown = decode(json.dumps({**minimal_query, "query_response_hit_ids": []}).encode(), LIMIT,
                     UbiConfig(empty_hit_ids="unknown"))
    assert isinstance(unknown, QueryEvent) and not unknown.results_known
    hover = {"action_name": "hover", "client_id": "c", "timestamp": "2026-11-22T10:00:00Z"}
    assert decode(json.dumps(hover).encode(), LIMIT) == IgnoredAction("hover")
    dwell = {**hover, "action_name": "page_exit", "query_id": "u",
             "event_attributes": {"dwell_time": 46.5}}
    event = decode(json.dumps(dwell).encode(), LIMIT)
    assert isinstance(event, DwellEvent) and event.dwell_ms == 46500.0
    for bad, field in [
        ({"user_query": "x"}, "timestamp"),
        ({"user_query": 5, "timestamp": 1}, "user_query"),
        ({**hover, "action_name": "click", "query_id": ["u"]}, "query_id"),
        ({**hover, "action_name": "click", "event_attributes": {"position": {"ordinal": -3}}},
         "ordinal"),
    ]:
        result = decode(json.dumps(bad).encode(), LIMIT)
        assert isinstance(result, Rejection) and result.reason is Reason.SCHEMA, bad
        assert field in result.detail, (bad, result)
    # valid, but tied to no query or session: counted as ignored, not rejected
    untied = {"action_name": "click", "timestamp": 1}
    assert decode(json.dumps(untied).encode(), LIMIT) == IgnoredAction("click")
    naive = decode(json.dumps(minimal_query | {"timestamp": "2018-11-13T20:20:39"}).encode(),
                   LIMIT, UbiConfig(naive_timezone="reject"))
    assert isinstance(naive, Rejection) and naive.reason is Reason.NAIVE_TIMESTAMP
    assert "offset" in naive.detail


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
    slow = decode_native(data)
    assert isinstance(slow, dict), (document, slow)
    assert slow["type"] != "judgment" and slow["type"] != "qrels"
    assert as_live(slow) == fast


def test_a_new_input_format_is_one_module_and_its_name_in_formats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chain finds a format as ``monitor.inputs.<name>`` and its ``DECODER``: a format
    that reads ``key=value`` lines, registered by its name alone, decodes them; the formats
    after it still read theirs."""
    import importlib.util
    import sys
    import types

    from monitor.config import parse_config
    from monitor.core.pipeline import Pipeline

    class KeyValues:
        def __init__(self, config: Config) -> None:
            self.config = config

        def decode(self, data: bytes, hint: str | None) -> Result | None:
            if not data.startswith(b"kv "):
                return None
            fields = dict(part.split("=", 1) for part in data[3:].decode().split())
            return float(fields["t"]), QueryEvent(
                event_id=fields["id"], timestamp=int(float(fields["t"]) * 1000),
                session_id=fields["s"], query_id=fields["id"], query_text=fields["q"],
                result_ids=[],
            )

    module = types.ModuleType("monitor.inputs.keyvalues")
    module.__spec__ = importlib.util.spec_from_loader(module.__name__, loader=None)
    module.DECODER = KeyValues  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    config = parse_config('[input]\nformats = ["keyvalues", "native", "ubi"]')
    pipeline = Pipeline(config)
    assert pipeline.feed(b"kv id=k1 t=1790000000 s=s1 q=shoes") is None
    assert pipeline.feed(query("n1", 1, "s2", "q2")) is None
    assert pipeline.health.accepted == 2
    with pytest.raises(Exception, match="unknown: nothing"):
        parse_config('[input]\nformats = ["nothing"]')


def test_a_query_whose_results_were_not_logged_needs_no_result_ids() -> None:
    """``results_known: false`` (a click log without its result lists): no ``result_ids``
    needed, no impressions, not a zero-result query. A list given with it contradicts it,
    and without ``results_known: false`` the list is required; both are ``schema``."""
    from monitor.config import parse_config
    from monitor.core.pipeline import Pipeline
    from monitor.serve.report import report

    unlogged = json.loads(query("u1", 0, "s1", "q1", klass="web"))
    del unlogged["result_ids"]
    unlogged["results_known"] = False
    event = decode(json.dumps(unlogged).encode())
    assert isinstance(event, QueryEvent) and event.result_ids == [] and not event.results_known
    pipeline = Pipeline(parse_config(""))
    assert pipeline.feed(json.dumps(unlogged).encode()) is None
    pipeline.close()
    web = report(pipeline)["online"]["web"]
    assert (web["queries"], web["zero_result_queries"], web["result_impressions"]) == (1, 0, 0)
    for document, problem in [
        ({**unlogged, "results_known": True}, "Field required"),
        ({k: v for k, v in unlogged.items() if k != "results_known"}, "Field required"),
        ({**unlogged, "result_ids": ["d1"]}, "given with results_known false"),
        ({**unlogged, "result_ids": ["d1"], "page": "2"}, "given with results_known false"),
    ]:
        rejected = decode(json.dumps(document).encode())
        assert isinstance(rejected, Rejection) and rejected.reason is Reason.SCHEMA, document
        assert problem in rejected.detail and "result_ids" in rejected.detail, rejected


@pytest.mark.parametrize("stamp", ["", "z", "12a", "-1790000000123", "2026-11-22x", "1.5"])
def test_malformed_timestamps_are_rejected_as_they_were_given(stamp: str) -> None:
    found = Timestamps().read(stamp)
    assert isinstance(found, Rejection) and found.reason is Reason.SCHEMA
    assert repr(stamp) in found.detail
