"""Decoding of search-log events and judged samples (README: "Events").

``decode`` turns the bytes of one message into a typed, read-only event or a ``Rejection``
with a reason from a closed set; it never raises for bad input. Events are TypedDicts with
``ReadOnly`` items (mypy rejects any mutation): pydantic validates into plain dicts about a
third faster than into model instances, and this is the per-event hot path. Native events
carry ``type``; OpenSearch UBI 1.3.0 query and event records are recognised by their fields
and mapped onto the native events.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple, NotRequired, final

import msgspec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
    ValidationError,
)
from typing_extensions import ReadOnly, TypedDict


class Reason(StrEnum):
    """Why a message was rejected; the closed set of ``searchmon_events_rejected_total``."""

    INVALID_JSON = "invalid_json"
    SCHEMA = "schema"
    UNKNOWN_TYPE = "unknown_type"
    NAIVE_TIMESTAMP = "naive_timestamp"
    TOO_LATE = "too_late"
    DUPLICATE = "duplicate"
    TOO_LARGE = "too_large"
    FUTURE_TIMESTAMP = "future_timestamp"


@final
class Rejection(NamedTuple):
    reason: Reason
    detail: str


NAIVE = Rejection(
    Reason.NAIVE_TIMESTAMP, "timestamp: expected an offset (Z or +02:00) or epoch milliseconds"
)


MAX_EPOCH_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: integer timestamps beyond are rejected (``schema``)."""

Timestamp = Annotated[StrictInt, Field(ge=0, le=MAX_EPOCH_MS)] | str
"""Epoch milliseconds, or an RFC 3339 string with an offset; see ``epoch_seconds``."""


def epoch_seconds(stamp: int | str) -> float | Rejection:
    """Epoch seconds of a timestamp, or the rejection of a naive or malformed one.

    Strings are read by ``datetime.fromisoformat``: RFC 3339 (``Z`` or ``+02:00``) and the
    other ISO 8601 forms it knows; without an offset the time is ambiguous and rejected.
    """
    if isinstance(stamp, int):
        return stamp / 1000.0
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return Rejection(Reason.SCHEMA, f"timestamp: expected RFC 3339, got {stamp[:40]!r}")
    if parsed.tzinfo is None:
        return NAIVE
    return parsed.timestamp()


# Every number has a range, so that no value can overflow a sum, a float conversion or a
# checkpoint (which holds 64-bit integers and finite floats): out of range is ``schema``.
NonNegativeInt = Annotated[int, Field(ge=0, lt=2**31)]
NonNegative = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]
Finite = Annotated[float, Field(ge=-1e15, le=1e15, allow_inf_nan=False)]
Labels = dict[str, NonNegativeInt]


class Query(TypedDict):
    type: ReadOnly[Literal["query"]]
    event_id: ReadOnly[str]
    timestamp: ReadOnly[Timestamp]
    session_id: ReadOnly[str]
    query_id: ReadOnly[str]
    query_text: ReadOnly[str]
    result_ids: ReadOnly[list[str]]
    result_count: NotRequired[ReadOnly[NonNegativeInt | None]]
    query_class: NotRequired[ReadOnly[str | None]]
    latency_ms: NotRequired[ReadOnly[NonNegative | None]]
    client_id: NotRequired[ReadOnly[str | None]]
    application: NotRequired[ReadOnly[str | None]]
    page: NotRequired[ReadOnly[NonNegativeInt | None]]


class Click(TypedDict):
    type: ReadOnly[Literal["click"]]
    event_id: ReadOnly[str]
    timestamp: ReadOnly[Timestamp]
    session_id: ReadOnly[str]
    query_id: ReadOnly[str]
    doc_id: ReadOnly[str]
    position: ReadOnly[Annotated[int, Field(ge=1, lt=2**31)]]
    dwell_ms: NotRequired[ReadOnly[NonNegative | None]]


class Dwell(TypedDict):
    type: ReadOnly[Literal["dwell"]]
    event_id: ReadOnly[str]
    timestamp: ReadOnly[Timestamp]
    session_id: ReadOnly[str]
    query_id: ReadOnly[str]
    doc_id: ReadOnly[str]
    dwell_ms: ReadOnly[NonNegative]


class Conversion(TypedDict):
    type: ReadOnly[Literal["conversion"]]
    event_id: ReadOnly[str]
    timestamp: ReadOnly[Timestamp]
    session_id: ReadOnly[str]
    query_id: NotRequired[ReadOnly[str | None]]
    doc_id: NotRequired[ReadOnly[str | None]]
    value: NotRequired[ReadOnly[Finite | None]]


class Judgment(TypedDict):
    type: ReadOnly[Literal["judgment"]]
    sample_id: ReadOnly[str]
    timestamp: ReadOnly[Timestamp]
    query_id: ReadOnly[str]
    query_text: ReadOnly[str]
    ranking: ReadOnly[list[str]]
    labels: ReadOnly[Labels]
    query_class: NotRequired[ReadOnly[str | None]]
    scores: NotRequired[ReadOnly[dict[str, Finite] | None]]


class Qrels(TypedDict):
    type: ReadOnly[Literal["qrels"]]
    timestamp: ReadOnly[Timestamp]
    query_text: ReadOnly[str]
    labels: ReadOnly[Labels]
    query_class: NotRequired[ReadOnly[str | None]]
    qrels_id: NotRequired[ReadOnly[str | None]]


LiveEvent = Query | Click | Dwell | Conversion
Event = LiveEvent | Judgment | Qrels


# The fast path: the live events again as msgspec structs. msgspec validates several times
# faster than pydantic, and is stricter (no coercion of "3" to 3, or of 2.0 to 2): whatever
# it accepts, the definitions above accept with the same values (tests/test_events.py
# checks it), and whatever it refuses goes to them, which decide and name the problem.
_Count = Annotated[int, msgspec.Meta(ge=0, lt=2**31)]
_Milliseconds = Annotated[float, msgspec.Meta(ge=0, le=1e12)]
_Stamp = Annotated[int, msgspec.Meta(ge=0, le=MAX_EPOCH_MS)] | str


class QueryEvent(msgspec.Struct, tag_field="type", tag="query", frozen=True, gc=False):
    event_id: str
    timestamp: _Stamp
    session_id: str
    query_id: str
    query_text: str
    result_ids: list[str]
    result_count: _Count | None = None
    query_class: str | None = None
    latency_ms: _Milliseconds | None = None
    client_id: str | None = None
    application: str | None = None
    page: _Count | None = None


class ClickEvent(msgspec.Struct, tag_field="type", tag="click", frozen=True, gc=False):
    event_id: str
    timestamp: _Stamp
    session_id: str
    query_id: str
    doc_id: str
    position: Annotated[int, msgspec.Meta(ge=1, lt=2**31)]
    dwell_ms: _Milliseconds | None = None


class DwellEvent(msgspec.Struct, tag_field="type", tag="dwell", frozen=True, gc=False):
    event_id: str
    timestamp: _Stamp
    session_id: str
    query_id: str
    doc_id: str
    dwell_ms: _Milliseconds


class ConversionEvent(msgspec.Struct, tag_field="type", tag="conversion", frozen=True, gc=False):
    event_id: str
    timestamp: _Stamp
    session_id: str
    query_id: str | None = None
    doc_id: str | None = None
    value: Annotated[float, msgspec.Meta(ge=-1e15, le=1e15)] | None = None


Live = QueryEvent | ClickEvent | DwellEvent | ConversionEvent
"""A live event as the pipeline reads it."""

decode_live: Callable[[bytes], Live] = msgspec.json.Decoder(Live).decode
"""The fast path: a live event, or ``msgspec.MsgspecError`` (then see ``decode``)."""
FastPathError = msgspec.MsgspecError


def as_live(event: LiveEvent) -> Live:
    """A live event validated by the definitions above, as the struct the pipeline reads."""
    live: Live = msgspec.convert(event, Live)
    return live

with warnings.catch_warnings():
    # Decoded events are read-only by type (mypy); pydantic says it cannot enforce that.
    warnings.filterwarnings("ignore", message=".*ReadOnly.*", category=UserWarning)
    _NATIVE: TypeAdapter[Event] = TypeAdapter(
        Annotated[Event, Field(discriminator="type")]
    )


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


_VALIDATE_NATIVE = _NATIVE.validator.validate_json


class _UbiQuery(_Record):
    query_id: str
    user_query: str
    timestamp: Timestamp
    client_id: str
    query_response_hit_ids: list[str] | None = None
    session_id: str | None = None
    application: str | None = None


class _UbiObject(_Record):
    object_id: str | None = None


class _UbiPosition(_Record):
    ordinal: Annotated[int, Field(lt=2**31)] | None = None


class _UbiAttributes(_Record):
    object: _UbiObject | None = None
    position: _UbiPosition | None = None
    session_id: str | None = None


class _UbiEvent(_Record):
    action_name: str
    timestamp: Timestamp
    client_id: str | None = None
    session_id: str | None = None
    query_id: str | None = None
    event_attributes: _UbiAttributes | None = None


_UBI_QUERY = TypeAdapter(_UbiQuery)
_UBI_EVENT = TypeAdapter(_UbiEvent)


class IgnoredAction(NamedTuple):
    """A valid UBI event whose action the product does not measure (counted, then ignored)."""

    action_name: str


def decode(data: bytes, max_bytes: int) -> Event | Rejection | IgnoredAction:
    """One message's bytes as an event, a rejection, or an ignored UBI action."""
    if len(data) > max_bytes:
        return too_large(data, max_bytes)
    try:
        return decode_native(data)
    except ValidationError as error:
        return decode_other(data, error)


decode_native: Callable[[bytes], Event] = _VALIDATE_NATIVE
"""The fast path: a native event, or ``ValidationError`` (then see ``decode_other``)."""


def too_large(data: bytes, max_bytes: int) -> Rejection:
    return Rejection(Reason.TOO_LARGE, f"{len(data)} bytes, limit {max_bytes}")


def decode_other(data: bytes, error: ValidationError) -> Event | Rejection | IgnoredAction:
    """What a message that is not a valid native event is: UBI, ignored, or rejected."""
    first = error.errors(include_url=False, include_context=False)[0]
    if first["type"] == "union_tag_not_found":
        return _decode_ubi(data)
    return _rejection(error)


def _rejection(error: ValidationError) -> Rejection:
    problems = error.errors(include_url=False, include_context=False)
    kinds = {p["type"] for p in problems}
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"])
    detail = f"{where}: {first['msg']}" if where else str(first["msg"])
    if "json_invalid" in kinds:
        return Rejection(Reason.INVALID_JSON, str(first["msg"]))
    if "union_tag_invalid" in kinds:
        return Rejection(Reason.UNKNOWN_TYPE, detail)
    return Rejection(Reason.SCHEMA, detail)


def _decode_ubi(data: bytes) -> Event | Rejection | IgnoredAction:
    try:
        raw: Any = _UBI_FIELDS.validate_json(data)
    except ValidationError as error:
        return _rejection(error)
    if "action_name" in raw:
        try:
            return _from_ubi_event(_UBI_EVENT.validate_python(raw), data)
        except ValidationError as error:
            return _rejection(error)
    if "user_query" in raw or "query_response_hit_ids" in raw:
        try:
            return _from_ubi_query(_UBI_QUERY.validate_python(raw))
        except ValidationError as error:
            return _rejection(error)
    return Rejection(Reason.UNKNOWN_TYPE, "neither 'type' nor a UBI query or event record")


_UBI_FIELDS: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


def _from_ubi_query(record: _UbiQuery) -> Query:
    return {
        "type": "query",
        "event_id": f"ubi-query:{record.query_id}",
        "timestamp": record.timestamp,
        "session_id": record.session_id or f"ubi-client:{record.client_id}",
        "query_id": record.query_id,
        "query_text": record.user_query,
        "result_ids": record.query_response_hit_ids or [],
        "client_id": record.client_id,
        "application": record.application,
    }


def _from_ubi_event(record: _UbiEvent, data: bytes) -> Event | Rejection | IgnoredAction:
    attributes = record.event_attributes or _UbiAttributes()
    session = record.session_id or attributes.session_id
    if session is None:
        if record.client_id is None:
            return Rejection(Reason.SCHEMA, "UBI event without session_id or client_id")
        session = f"ubi-client:{record.client_id}"
    # UBI events carry no id of their own: identical bytes are the same event.
    event_id = "ubi-event:" + hashlib.blake2b(data, digest_size=12).hexdigest()
    doc = attributes.object.object_id if attributes.object else None
    if record.action_name == "click":
        position = attributes.position.ordinal if attributes.position else None
        if record.query_id is None or doc is None or position is None or position < 1:
            return Rejection(
                Reason.SCHEMA,
                "UBI click needs query_id, event_attributes.object.object_id and "
                "event_attributes.position.ordinal >= 1",
            )
        return {
            "type": "click", "event_id": event_id, "timestamp": record.timestamp,
            "session_id": session, "query_id": record.query_id, "doc_id": doc,
            "position": position,
        }
    if record.action_name in ("purchase", "add_to_cart"):
        return {
            "type": "conversion", "event_id": event_id, "timestamp": record.timestamp,
            "session_id": session, "query_id": record.query_id, "doc_id": doc,
        }
    return IgnoredAction(record.action_name)
