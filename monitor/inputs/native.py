"""Native events (``type`` selects the kind): bytes to events, the input format searchmon
defines (docs: the events reference).

Live events are decoded by msgspec into structs first (the per-event hot path); what it
refuses is validated by the pydantic definitions of ``monitor.inputs.events`` (TypedDicts
with ``ReadOnly`` items), which decide and name the problem, or say that the message has no
``type`` (then the next decoder of the chain may read it). msgspec is stricter (no coercion of
"3" to 3, or of 2.0 to 2): whatever it accepts, the definitions accept with the same values.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable
from typing import Annotated, Any, cast

import msgspec
from pydantic import Field, TypeAdapter, ValidationError

from monitor.config import UNKNOWN, Config
from monitor.inputs.events import (
    Attributes,
    Baseline,
    ClickEvent,
    ConversionEvent,
    Decoded,
    DwellEvent,
    Event,
    JudgedMessage,
    Judgment,
    LiveEvent,
    Native,
    Qrels,
    QueryEvent,
    Reason,
    Rejection,
    attribute_values,
    json_value,
)
from monitor.inputs.timestamps import Timestamps, zone
from monitor.offline.spec import MeasureNameError, parse_measure

decode_live: Callable[[bytes], Native] = msgspec.json.Decoder(Native).decode
"""The fast path: a live event, or ``msgspec.MsgspecError`` (then see ``decode``)."""
FastPathError = msgspec.MsgspecError


def as_live(event: LiveEvent) -> Native:
    """A live event validated by the definitions above, as the struct the pipeline reads."""
    given = event.get("attributes")
    if isinstance(given, dict):  # any value validates; only strings are values
        event = cast(LiveEvent, {**event, "attributes": attribute_values(given)})
    live: Native = msgspec.convert(event, Native)
    return live


with warnings.catch_warnings():
    # Decoded events are read-only by type (mypy); pydantic says it cannot enforce that.
    warnings.filterwarnings("ignore", message=".*ReadOnly.*", category=UserWarning)
    _NATIVE: TypeAdapter[Event] = TypeAdapter(
        Annotated[Event, Field(discriminator="type")]
    )


_VALIDATE_NATIVE = _NATIVE.validator.validate_json


decode_native: Callable[[bytes], Event] = _VALIDATE_NATIVE
"""A native event validated by pydantic, or ``ValidationError`` (then ``untyped``, or
``rejection``)."""




def untyped(error: ValidationError) -> bool:
    """Whether a message failed validation for want of ``type`` (then it may be UBI)."""
    return bool(error.errors(include_url=False, include_context=False)[0]["type"]
                == "union_tag_not_found")


def rejection(error: ValidationError) -> Rejection:
    """The rejection of a message that is not a valid native event."""
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


def read_names(config: Config) -> tuple[str, ...]:
    """The attributes a query's values are read of: the ``[slices]`` dimensions, then the
    experiments' attributes that are no dimension."""
    names = list(config.slices.dimensions)
    names += [e.attribute for e in config.experiments if e.attribute not in names]
    return tuple(dict.fromkeys(names))


@functools.cache
def dimensions(names: tuple[str, ...]) -> Dimensions:
    """The one ``Dimensions`` of these names (its query struct is the decoders' and the
    pipeline's: a type each compares with)."""
    return Dimensions(list(names))


class Dimensions:
    """The values of the ``[slices]`` dimensions a message gives: its top-level string
    field of a dimension's name, else that key of its ``attributes`` object (the top-level
    field wins).

    Live events are decoded once, by a decoder whose query struct (a ``QueryEvent``) has a
    field for each dimension that is not one of its own; judged messages, and those the
    fast path refuses, are read again for their top-level fields."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        own = {field.encode_name for field in msgspec.structs.fields(QueryEvent)}
        extra = [name for name in names if name not in own]
        renamed = {f"d{i}": name for i, name in enumerate(extra)}
        self.query = msgspec.defstruct(
            "QueryEvent", [(field, Any, None) for field in renamed], bases=(QueryEvent,),
            rename=renamed, tag_field="type", tag="query", frozen=True, gc=False,
        )
        """The query struct of the fast path, with the dimensions' top-level fields."""
        self.decode_live: Callable[[bytes], Native] = msgspec.json.Decoder(
            self.query | ClickEvent | DwellEvent | ConversionEvent
        ).decode
        by_name = {name: field for field, name in renamed.items()}
        own_names = {f.encode_name: f.name for f in msgspec.structs.fields(QueryEvent)}
        tops = [by_name.get(name) or own_names[name] for name in names]
        getter: Callable[[QueryEvent], Any] = operator.attrgetter(*tops)  # one name: no tuple
        self._top: Callable[[QueryEvent], tuple[Any, ...]] = (
            getter if len(tops) > 1 else lambda event: (getter(event),)
        )
        """The top-level dimension fields of a query of ``query``, in ``names`` order."""
        self._nones = tuple(None for _ in names)
        self._unknown = tuple(UNKNOWN for _ in names)
        self._needles = [f'"{name}"'.encode() for name in names]
        fields = [(f"d{i}", Any, None) for i in range(len(names))]
        self._decode = msgspec.json.Decoder(msgspec.defstruct("Dimensions", fields, rename={
            f"d{i}": name for i, name in enumerate(names)
        })).decode

    def values(self, event: QueryEvent) -> tuple[str, ...]:
        """A query's value of each dimension, ``unknown`` where it gives none. (Per query:
        the common cases, no top-level field, read in C: ``attrgetter``, ``map``.)"""
        attributes = event.attributes
        if type(event) is self.query:
            top = self._top(event)
            if top != self._nones:  # some top-level field: it wins over attributes
                return tuple([
                    value if type(value) is str and value
                    else (attributes.get(name) if attributes else None) or UNKNOWN
                    for name, value in zip(self.names, top, strict=True)
                ])
        return self.of(attributes)

    def of(self, attributes: Attributes | None) -> tuple[str, ...]:
        """The values an ``attributes`` mapping gives, ``unknown`` where it gives none."""
        if not attributes:
            return self._unknown
        found = tuple(map(attributes.get, self.names))
        if None in found or "" in found:
            return tuple([value or UNKNOWN for value in found])
        return found  # type: ignore[return-value]  # no None in it

    def merged(self, data: bytes, attributes: Attributes | None) -> Attributes | None:
        """``attributes`` with the top-level dimension fields of the message ``data``."""
        if not any(data.find(needle) >= 0 for needle in self._needles):
            return attributes
        try:
            top = self._decode(data)
        except (msgspec.MsgspecError, UnicodeDecodeError):
            return attributes
        values = dict(attributes) if attributes else {}
        for i, name in enumerate(self.names):
            value = getattr(top, f"d{i}")
            if isinstance(value, str) and value:
                values[name] = value
        return values


class NativeDecoder:
    """Native events and judged messages, under the ``[input]`` timestamp policy and the
    ``[offline] max_labels`` bound."""

    def __init__(self, config: Config) -> None:
        self.timestamps = Timestamps(zone(config.input.naive_timezone))
        self.max_labels = config.offline.max_labels
        self.max_chars = config.input.max_query_chars
        self.measures = config.offline.measures
        names = read_names(config)
        self.dimensions = dimensions(names) if names else None
        self._decode_live = (
            self.dimensions.decode_live if self.dimensions is not None else decode_live
        )

    def decode(
        self, data: bytes, hint: str | None = None
    ) -> Decoded | JudgedMessage | Rejection | None:
        """A live event with its time, a judged message, a rejection, or None for a JSON
        object without ``type`` (another format's)."""
        # ``find``, not ``in``: a bytes ``in`` tries its operand as an int first (an
        # exception raised and cleared on every message)
        if data.find(b'"type"') < 0 and data.find(b"\\") < 0:
            return self._validated(data)  # no ``type`` (not even escaped): not a live event
        try:
            event: Native = self._decode_live(data)
        except (msgspec.MsgspecError, UnicodeDecodeError):
            return self._validated(data)
        # a query (of a subclass with [slices] dimensions) without a logged list
        if isinstance(event, QueryEvent):
            if not event.result_ids or not event.results_known:
                contradiction = _unlisted(event, data)
                if contradiction is not None:
                    return contradiction
            if event.result_teams is not None and len(event.result_teams) != len(
                event.result_ids
            ):
                return UNMATCHED_TEAMS
        stamp = event.timestamp
        if type(stamp) is int:  # in range: msgspec checked it
            return stamp / 1000.0, event
        time = self.timestamps.read(stamp)
        return time if type(time) is Rejection else (time, event)

    def _validated(self, data: bytes) -> Decoded | JudgedMessage | Rejection | None:
        try:  # a JSON object without ``type`` is another format's: no validation to say so
            value = json_value(data)
            if type(value) is dict and "type" not in value:
                return None
        except (msgspec.MsgspecError, UnicodeDecodeError):
            pass  # malformed: validation names the problem (as it does for a non-object)
        try:
            decoded = decode_native(data)
        except ValidationError as error:
            return None if untyped(error) else rejection(error)
        if decoded["type"] == "baseline":
            return self._baseline(decoded)
        if decoded["type"] == "judgment" or decoded["type"] == "qrels":
            judged = self._judged(decoded)
            if self.dimensions is not None and type(judged) is JudgedMessage:
                judged = JudgedMessage(judged.time, judged.event, judged.ranking,
                                       self.dimensions.merged(
                                           data, attribute_values(decoded.get("attributes"))))
            return judged
        live = as_live(decoded)
        if type(live) is QueryEvent:
            contradiction = _unlisted(live, data)
            if contradiction is not None:
                return contradiction
            if live.result_teams is not None and len(live.result_teams) != len(live.result_ids):
                return UNMATCHED_TEAMS
            if self.dimensions is not None:  # its top-level fields, in attributes
                live = self._with_dimensions(live, data)
        time = self.timestamps.read(live.timestamp)
        return time if type(time) is Rejection else (time, live)

    def _with_dimensions(self, event: QueryEvent, data: bytes) -> QueryEvent:
        assert self.dimensions is not None
        merged = self.dimensions.merged(data, event.attributes)
        if merged is event.attributes:
            return event
        return msgspec.structs.replace(event, attributes=merged)

    def _judged(self, event: Judgment | Qrels) -> JudgedMessage | Rejection:
        time = self.timestamps.read(event["timestamp"])
        if type(time) is Rejection:
            return time
        labels, most = len(event["labels"]), self.max_labels
        if labels > most:
            return Rejection(
                Reason.SCHEMA, f"labels: {labels} labels, limit {most} ([offline] max_labels)"
            )
        if len(event["query_text"]) > self.max_chars:
            event = cast(Judgment | Qrels, {
                **event, "query_text": cut_text(event["query_text"], self.max_chars)
            })
        if event["type"] == "qrels":
            return JudgedMessage(time, event, None)
        ranking = ranked(event["ranking"], event.get("scores"))
        if len(set(ranking)) != len(ranking):
            return Rejection(Reason.SCHEMA, "ranking names a document twice")
        return JudgedMessage(time, event, ranking)


    def _baseline(self, event: Baseline) -> JudgedMessage | Rejection:
        time = self.timestamps.read(event["timestamp"])
        if type(time) is Rejection:
            return time
        measure = event.get("measure")
        if measure is not None:
            try:
                canonical = str(parse_measure(measure))
            except MeasureNameError as error:
                return Rejection(Reason.SCHEMA, f"measure: {error}")
            if canonical not in self.measures:
                return Rejection(Reason.SCHEMA, f"measure: {measure} is not one of "
                                 "[offline] measures")
            event = cast(Baseline, {**event, "measure": canonical})
        return JudgedMessage(time, event, None)


UNMATCHED_TEAMS = Rejection(
    Reason.SCHEMA, "query.result_teams: not one team per result of result_ids"
)


def _unlisted(event: QueryEvent, data: bytes) -> Rejection | None:
    """A query's result ids against ``results_known``: only a query whose list was not
    logged may leave them out, and it may not give them."""
    if event.results_known:
        if not event.result_ids and data.find(b'"result_ids"') < 0:
            return Rejection(Reason.SCHEMA, "query.result_ids: Field required (leave it out "
                             "only with results_known false)")
    elif event.result_ids:
        return Rejection(Reason.SCHEMA, "query.result_ids: given with results_known false "
                         "(the list was not logged: leave it out)")
    return None


def ranked(ranking: list[str], scores: dict[str, float] | None) -> list[str]:
    """Served order, or with scores: score descending, then doc id descending (trec_eval)."""
    if not scores:
        return list(ranking)
    by_id = sorted(ranking, reverse=True)
    return sorted(by_id, key=lambda doc: -scores.get(doc, float("-inf")))


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (``[input] max_query_chars``), so that no
    later step reads more. A cut inside a word drops that word's part (a part of an address
    or a number could otherwise escape redaction)."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    if not text[limit].isspace() and not head[-1].isspace():
        words = head.rsplit(None, 1)
        head = words[0] if len(words) == 2 else ""
    return head


DECODER = NativeDecoder
