"""Decoding of search-log events and judged samples (CONTRACT section 2).

``decode`` turns the bytes of one message into a typed, immutable event or a ``Rejection``
with a reason from a closed set; it never raises for bad input. Native events carry ``type``;
OpenSearch UBI 1.3.0 query and event records are recognised by their fields and mapped onto
the native events.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    TypeAdapter,
    ValidationError,
)


class Reason(StrEnum):
    """Why a message was rejected; the closed set of ``searchmon_events_rejected_total``."""

    INVALID_JSON = "invalid_json"
    SCHEMA = "schema"
    UNKNOWN_TYPE = "unknown_type"
    NAIVE_TIMESTAMP = "naive_timestamp"
    TOO_LATE = "too_late"
    DUPLICATE = "duplicate"
    TOO_LARGE = "too_large"


class Rejection(NamedTuple):
    reason: Reason
    detail: str


Timestamp = StrictInt | AwareDatetime
"""Epoch milliseconds, or RFC 3339 with an offset; a naive timestamp is rejected."""


def seconds(timestamp: int | datetime) -> float:
    """Epoch seconds of a decoded timestamp."""
    return timestamp / 1000.0 if isinstance(timestamp, int) else timestamp.timestamp()


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Query(_Event):
    type: Literal["query"] = "query"
    event_id: str
    timestamp: Timestamp
    session_id: str
    query_id: str
    query_text: str
    result_ids: list[str]
    result_count: int | None = Field(default=None, ge=0)
    query_class: str | None = None
    latency_ms: float | None = Field(default=None, ge=0)
    client_id: str | None = None
    application: str | None = None
    page: int | None = None


class Click(_Event):
    type: Literal["click"] = "click"
    event_id: str
    timestamp: Timestamp
    session_id: str
    query_id: str
    doc_id: str
    position: int = Field(ge=1)
    dwell_ms: float | None = Field(default=None, ge=0)


class Dwell(_Event):
    type: Literal["dwell"] = "dwell"
    event_id: str
    timestamp: Timestamp
    session_id: str
    query_id: str
    doc_id: str
    dwell_ms: float = Field(ge=0)


class Conversion(_Event):
    type: Literal["conversion"] = "conversion"
    event_id: str
    timestamp: Timestamp
    session_id: str
    query_id: str | None = None
    doc_id: str | None = None
    value: float | None = None


class Judgment(_Event):
    type: Literal["judgment"] = "judgment"
    sample_id: str
    timestamp: Timestamp
    query_id: str
    query_text: str
    ranking: list[str]
    labels: dict[str, Annotated[int, Field(ge=0)]]
    query_class: str | None = None
    scores: dict[str, float] | None = None


class Qrels(_Event):
    type: Literal["qrels"] = "qrels"
    timestamp: Timestamp
    query_text: str
    labels: dict[str, Annotated[int, Field(ge=0)]]
    query_class: str | None = None
    qrels_id: str | None = None


Event = Query | Click | Dwell | Conversion | Judgment | Qrels

_NATIVE: TypeAdapter[Event] = TypeAdapter(
    Annotated[Event, Field(discriminator="type")]
)


class _UbiQuery(_Event):
    query_id: str
    user_query: str
    timestamp: Timestamp
    client_id: str
    query_response_hit_ids: list[str] | None = None
    session_id: str | None = None
    application: str | None = None


class _UbiObject(_Event):
    object_id: str | None = None


class _UbiPosition(_Event):
    ordinal: int | None = None


class _UbiAttributes(_Event):
    object: _UbiObject | None = None
    position: _UbiPosition | None = None
    session_id: str | None = None


class _UbiEvent(_Event):
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
        return Rejection(Reason.TOO_LARGE, f"{len(data)} bytes, limit {max_bytes}")
    try:
        return _NATIVE.validate_json(data)
    except ValidationError as error:
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
    if "timezone_aware" in kinds:
        return Rejection(
            Reason.NAIVE_TIMESTAMP,
            "timestamp: expected an offset (Z or +02:00) or integer epoch milliseconds",
        )
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
    return Query(
        event_id=f"ubi-query:{record.query_id}",
        timestamp=record.timestamp,
        session_id=record.session_id or f"ubi-client:{record.client_id}",
        query_id=record.query_id,
        query_text=record.user_query,
        result_ids=record.query_response_hit_ids or [],
        client_id=record.client_id,
        application=record.application,
    )


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
        return Click(
            event_id=event_id, timestamp=record.timestamp, session_id=session,
            query_id=record.query_id, doc_id=doc, position=position,
        )
    if record.action_name in ("purchase", "add_to_cart"):
        return Conversion(
            event_id=event_id, timestamp=record.timestamp, session_id=session,
            query_id=record.query_id, doc_id=doc,
        )
    return IgnoredAction(record.action_name)
