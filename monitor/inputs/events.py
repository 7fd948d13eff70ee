"""Decoding of search-log events and judged samples (docs/reference/events.md).

Native events carry ``type``. Live events are decoded by msgspec into structs first (the
per-event hot path); what it refuses is validated by the pydantic definitions (TypedDicts
with ``ReadOnly`` items), which decide and name the problem, or say that the message has no
``type`` (then ``monitor.ubi`` reads it as UBI). Nothing here raises for bad input: every
message becomes an event or a ``Rejection`` with a reason from a closed set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple, NotRequired, final
from zlib import crc32

import msgspec
from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
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
    TOO_DEEP = "too_deep"
    UNPROCESSABLE = "unprocessable"
    """A step of the pipeline failed on the message (a defect, logged with its traceback)."""


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


# Every number has a range, so that no value can overflow a sum, a float conversion or a
# checkpoint (which holds 64-bit integers and finite floats): out of range is ``schema``.
NonNegativeInt = Annotated[int, Field(ge=0, lt=2**31)]
NonNegative = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)]
Finite = Annotated[float, Field(ge=-1e15, le=1e15, allow_inf_nan=False)]
Labels = dict[str, NonNegativeInt]
Attributes = dict[str, str]
"""Values of the ``[slices]`` dimensions (and anything else: only those are read)."""
GivenAttributes = dict[str, Any]
"""``attributes`` as a message gives it: a value that is not a string is no value, and does
not make the message invalid (``attribute_values`` keeps the strings)."""


class Query(TypedDict):
    type: ReadOnly[Literal["query"]]
    event_id: ReadOnly[str]
    timestamp: ReadOnly[Timestamp]
    session_id: ReadOnly[str]
    query_id: ReadOnly[str]
    query_text: ReadOnly[str]
    result_ids: NotRequired[ReadOnly[list[str]]]
    """Required unless ``results_known`` is false (the list was not logged)."""
    result_count: NotRequired[ReadOnly[NonNegativeInt | None]]
    query_class: NotRequired[ReadOnly[str | None]]
    latency_ms: NotRequired[ReadOnly[NonNegative | None]]
    client_id: NotRequired[ReadOnly[str | None]]
    application: NotRequired[ReadOnly[str | None]]
    page: NotRequired[ReadOnly[NonNegativeInt | None]]
    results_known: NotRequired[ReadOnly[StrictBool]]
    attributes: NotRequired[ReadOnly[GivenAttributes | None]]
    user_id: NotRequired[ReadOnly[str | None]]
    result_teams: NotRequired[ReadOnly[list[str] | None]]


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
    attributes: NotRequired[ReadOnly[GivenAttributes | None]]
    agreement: NotRequired[ReadOnly[dict[str, Finite] | None]]
    """The raters' agreement over the sample (``judgments import``): ``raters``,
    ``cohen_kappa`` or ``fleiss_kappa``, ``krippendorff_alpha``."""


class Qrels(TypedDict):
    type: ReadOnly[Literal["qrels"]]
    timestamp: ReadOnly[Timestamp]
    query_text: ReadOnly[str]
    labels: ReadOnly[Labels]
    query_class: NotRequired[ReadOnly[str | None]]
    qrels_id: NotRequired[ReadOnly[str | None]]
    attributes: NotRequired[ReadOnly[GivenAttributes | None]]


class Baseline(TypedDict):
    """An intended change, accepted: ``sample_id`` (default: the newest completed sample)
    is the baseline of ``query_class`` (default: every class; ``all``: the overall figures)
    and ``measure`` (default: every measure) from then on."""

    type: ReadOnly[Literal["baseline"]]
    timestamp: ReadOnly[Timestamp]
    reason: ReadOnly[Annotated[str, StringConstraints(min_length=1, max_length=500)]]
    by: ReadOnly[Annotated[str, StringConstraints(min_length=1, max_length=200)]]
    sample_id: NotRequired[ReadOnly[str | None]]
    query_class: NotRequired[ReadOnly[str | None]]
    measure: NotRequired[ReadOnly[str | None]]


LiveEvent = Query | Click | Dwell | Conversion
Judged = Judgment | Qrels | Baseline
Event = LiveEvent | Judged


# The fast path: the live events again as msgspec structs. msgspec validates several times
# faster than pydantic, and is stricter (no coercion of "3" to 3, or of 2.0 to 2): whatever
# it accepts, the definitions above accept with the same values (tests/unit/test_events.py
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
    result_ids: list[str] = msgspec.field(default_factory=list)
    """Required unless ``results_known`` is false (``NativeDecoder`` checks)."""
    result_count: _Count | None = None
    query_class: str | None = None
    latency_ms: _Milliseconds | None = None
    client_id: str | None = None
    application: str | None = None
    page: _Count | None = None
    results_known: bool = True
    """False: the result list was not logged (not a zero-result query; no impressions)."""
    attributes: dict[str, str] | None = None
    """The query's dimension values (``[slices]``) and experiment variants."""
    user_id: str | None = None
    """The user: the randomization unit of experiments by user (UBI: ``client_id``)."""
    result_teams: list[str] | None = None
    """Interleaving: per result, the ranker that contributed it."""


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


class ImpressionEvent(msgspec.Struct, frozen=True, gc=False):
    """A result shown (from UBI ``impression`` events; not a native type)."""

    event_id: str
    timestamp: _Stamp
    session_id: str
    query_id: str | None
    doc_id: str | None
    position: int
    """1-based; 0: not given."""


Native = QueryEvent | ClickEvent | DwellEvent | ConversionEvent
Live = Native | ImpressionEvent
"""A live event as the pipeline reads it."""

class IgnoredAction(NamedTuple):
    """A valid UBI event whose action the product does not measure (counted, then ignored)."""

    action_name: str


Key = tuple[str, int]
"""A source partition: (topic, partition)."""

SESSION_OF_QUERY = "\x01"
"""Prefix of the session id of an event that belongs to the session of its query (UBI
events carry a query id and no reliable session): resolved when the event is applied."""


def session_hash(session: str) -> int:
    """A stable 32-bit hash of a session id (Python's ``hash`` is salted per process), as
    the query lists and the click logs count distinct sessions. Two sessions that collide
    count as one: the count of distinct sessions can only be lower."""
    return crc32(session.encode())


@final
@dataclass(frozen=True, slots=True)
class JudgedMessage:
    """A judgment, qrels or baseline message, validated; ``ranking``: a judgment's, in
    ranked order."""

    time: float
    event: Judged
    ranking: list[str] | None
    attributes: Attributes | None = None
    """Its dimension values (``[slices]``), top-level fields and ``attributes`` merged."""


def attribute_values(given: GivenAttributes | None) -> Attributes | None:
    """The string values of a message's ``attributes`` (the rest are no values)."""
    if not given:
        return None
    return {name: value for name, value in given.items() if type(value) is str}


Decoded = tuple[float, "Live"]
"""A live event with its event time in epoch seconds."""


def too_large(data: bytes, max_bytes: int) -> Rejection:
    return Rejection(Reason.TOO_LARGE, f"{len(data)} bytes, limit {max_bytes}")


_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[{]|[\]}]', re.DOTALL)
"""A JSON string (read whole, so that brackets inside it do not count), or a bracket."""


def nested_deeper(data: bytes, limit: int) -> bool:
    """Whether the JSON in ``data`` nests arrays and objects more than ``limit`` deep: read
    in one linear pass before any decoder recurses into it. The decoder chain scans only a
    message with more than ``limit`` brackets in all (``monitor.inputs.brackets``): most
    have fewer."""
    depth = 0
    for token in _TOKENS.finditer(data):
        bracket = token[0]
        if bracket == b"[" or bracket == b"{":
            depth += 1
            if depth > limit:
                return True
        elif bracket == b"]" or bracket == b"}":
            depth -= 1
    return False


def too_deep(limit: int) -> Rejection:
    return Rejection(
        Reason.TOO_DEEP, f"arrays and objects nested more than {limit} deep ([input] max_depth)"
    )


class Stamped(msgspec.Struct):
    """Any message's timestamp alone: what sorting an input by event time reads of a line."""

    timestamp: int | str | None = None
    type: Any = None
    """Given (a native event or judged message): its naive times are ``[input]``'s; absent
    (a UBI record): ``[ubi]``'s."""
    source: Any = msgspec.field(default=None, name="_source")
    """A search hit's document (then its timestamp and type are the document's)."""


_ANY_JSON = msgspec.json.Decoder()
_PARSED: list[Any] = [None, None]
"""The last message ``json_value`` parsed, and its value."""


def json_value(data: bytes) -> Any:
    """``data`` as any JSON value (raises ``msgspec.DecodeError`` or ``UnicodeDecodeError``).
    The same message twice in a row is parsed once: a record without ``type`` is looked at by
    the native decoder, then read by the next format of the chain (UBI)."""
    if _PARSED[0] is data:
        return _PARSED[1]
    value = _ANY_JSON.decode(data)
    _PARSED[0], _PARSED[1] = data, value
    return value
