"""OpenSearch User Behavior Insights (UBI 1.0 to 1.3) records as live events
(docs/reference/events.md).

A record without ``type`` is UBI: an event when it has ``action_name``, a query when it has
``user_query`` (or a ``_bulk`` export names its index ``*queries*``). UBI is lenient in
practice, so this is too: ids may be integers, ``client_id`` is optional, a timestamp without
an offset is read in ``[ubi] naive_timezone``, positions come in the 1.3 form
(``position.ordinal``), the 1.0-1.2 form (``position.ordinal.index``) or as ``position.index``,
and a click with only screen coordinates is a click without a rank. Actions map to clicks,
conversions and impressions by ``[ubi]``; an action with ``event_attributes.dwell_time`` is a
dwell; the rest are counted and ignored.

Sessions: a UBI query belongs to ``session_id``, else ``ubi-client:<client_id>``, else
``ubi-query:<query_id>``. An event with a ``query_id`` belongs to the session of that query
(``SESSION_OF_QUERY``: resolved when the event is applied), whatever session key it carries
itself; an event whose query is unknown falls back to its own ``session_id``, then its
``client_id``.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import msgspec

from monitor.config import Config, UbiConfig
from monitor.inputs.events import (
    SESSION_OF_QUERY,
    ClickEvent,
    ConversionEvent,
    Decoded,
    DwellEvent,
    IgnoredAction,
    ImpressionEvent,
    Live,
    QueryEvent,
    Reason,
    Rejection,
    json_value,
)
from monitor.inputs.native import read_names
from monitor.inputs.timestamps import Timestamps, zone

HIT_ID_FIELDS = ("query_response_hit_ids", "query_response_object_ids",
                 "query_response_objects_ids")
"""The served result ids of a query (the names the spec and the plugin used over time)."""


class UbiDecoder:
    """Turns UBI records into live events under ``[ubi]``."""

    def __init__(self, config: Config) -> None:
        self.read_ubi(config.ubi)
        self.dimensions = list(read_names(config))

    def read_ubi(self, config: UbiConfig) -> None:
        self.config = config
        self.clicks = frozenset(config.click_actions)
        self.conversions = frozenset(config.conversion_actions)
        self.impressions = frozenset(config.impression_actions)
        self.zone = zone(config.naive_timezone)
        self.timestamps = Timestamps(self.zone)

    def decode(
        self, data: bytes, hint: str | None = None
    ) -> Decoded | Rejection | IgnoredAction | None:
        """A UBI query or event with its event time, a rejection, an ignored action, or None
        for a message that is no UBI record."""
        try:
            record = json_value(data)  # parsed once: the native decoder looked at it first
        except (msgspec.DecodeError, UnicodeDecodeError) as error:
            return Rejection(Reason.INVALID_JSON, str(error))
        if not isinstance(record, dict):
            return Rejection(Reason.UNKNOWN_TYPE, "not a JSON object")
        try:
            event: Live | IgnoredAction
            if "action_name" in record or (hint is not None and "event" in hint):
                event = self._event(record, data)
            elif "user_query" in record or any(f in record for f in HIT_ID_FIELDS) or (
                hint is not None and "quer" in hint
            ):
                event = self._query(record, data)
            else:
                return None
        except _Invalid as problem:
            return Rejection(Reason.SCHEMA, str(problem))
        if type(event) is IgnoredAction:
            return event
        time = self.timestamps.read(event.timestamp)  # type: ignore[union-attr]
        return time if type(time) is Rejection else (time, event)  # type: ignore[return-value]

    def _query(self, record: dict[str, Any], data: bytes) -> QueryEvent | IgnoredAction:
        if _aggregation_only(record.get("query")):
            return AGGREGATION  # the facets of a search, not a search
        text = _text(record, "user_query", required=True)
        query_id = _identifier(record, "query_id")
        client = _identifier(record, "client_id")
        session = _identifier(record, "session_id")
        stamp = self._timestamp(record)
        hits = None
        for name in HIT_ID_FIELDS:
            hits = record.get(name)
            if hits is not None:
                break
        if hits is not None:
            if not isinstance(hits, list):
                raise _Invalid("query_response_hit_ids: expected a list of ids")
            results: list[str] = hits  # the parsed list itself when every id is a string
            for hit in hits:
                if type(hit) is not str:
                    results = [_id_value(h, "query_response_hit_ids") for h in hits]
                    break
            known = bool(results) or self.config.empty_hit_ids == "zero_results"
        else:
            results, known = [], False
        if query_id is None:  # no id: the record's bytes name it
            query_id = _digest("ubi", data)
        return QueryEvent(
            # the record's own id: identical bytes are one record; another record of the same
            # search (query id, session and text) is merged by the pipeline, and another text
            # under the id is a new search (a reformulation)
            event_id=f"{QUERY_EVENT}{query_id}:{_digest('record', data)}",
            timestamp=stamp,
            session_id=session or (f"ubi-client:{client}" if client is not None else None)
            or f"{ONE_QUERY_SESSION}{query_id}",
            query_id=query_id,
            query_text=text,  # type: ignore[arg-type]
            result_ids=results,
            client_id=client,
            application=_text(record, "application"),
            results_known=known,
            attributes=self._attributes(record) if self.dimensions else None,
            result_teams=_teams(record, len(results)),
        )

    def _attributes(self, record: dict[str, Any]) -> dict[str, str] | None:
        """The query's dimension values: a top-level string field of the dimension's name,
        else that key of its ``query_attributes`` (the top-level field wins)."""
        given = record.get("query_attributes")
        nested = given if isinstance(given, dict) else {}
        values = {}
        for name in self.dimensions:
            value = record.get(name)
            if not isinstance(value, str) or not value:
                value = nested.get(name)
            if isinstance(value, str) and value:
                values[name] = value
        return values or None

    def _event(self, record: dict[str, Any], data: bytes) -> Live | IgnoredAction:
        action = _text(record, "action_name", required=True)
        assert action is not None
        stamp = self._timestamp(record)
        attributes = record.get("event_attributes") or {}
        if not isinstance(attributes, dict):
            raise _Invalid("event_attributes: expected an object")
        query_id = _identifier(record, "query_id")
        own = _identifier(record, "session_id") or _identifier(attributes, "session_id")
        client = _identifier(record, "client_id")
        fallback = own or (f"ubi-client:{client}" if client is not None else None)
        if fallback is None and query_id is None:
            return IgnoredAction(action)  # valid, but tied to no query or session
        session = SESSION_OF_QUERY + (fallback or f"{ONE_QUERY_SESSION}{query_id}")
        if query_id is None:
            session = fallback or ""
        event_id = _digest("ubi-event", data)  # UBI events have no id: their bytes are it
        thing = attributes.get("object") or {}
        if not isinstance(thing, dict):
            raise _Invalid("event_attributes.object: expected an object")
        doc = thing.get("object_id")
        doc = _id_value(doc, "event_attributes.object.object_id") if doc is not None else None
        dwell = attributes.get("dwell_time")
        if dwell is not None and (
            isinstance(dwell, bool) or not isinstance(dwell, int | float)
            or not 0 <= dwell <= 1e9 or math.isnan(dwell)
        ):
            raise _Invalid("event_attributes.dwell_time: expected seconds, 0 to 10^9")
        dwell_ms = dwell * 1000.0 if dwell is not None else None
        if action in self.clicks or action in self.impressions:
            rank = self._rank(attributes.get("position"))
            if action in self.clicks:
                return ClickEvent(
                    event_id=event_id, timestamp=stamp, session_id=session,
                    # no query id: a click on no known query (its session's unmatched)
                    query_id=query_id or "", doc_id=doc or "", position=rank,
                    dwell_ms=dwell_ms,
                )
            return ImpressionEvent(
                event_id=event_id, timestamp=stamp, session_id=session, query_id=query_id,
                doc_id=doc, position=rank,
            )
        if action in self.conversions:
            return ConversionEvent(
                event_id=event_id, timestamp=stamp, session_id=session, query_id=query_id,
                doc_id=doc,
            )
        if dwell_ms is not None and query_id is not None:
            return DwellEvent(
                event_id=event_id, timestamp=stamp, session_id=session, query_id=query_id,
                doc_id=doc or "", dwell_ms=dwell_ms,
            )
        return IgnoredAction(action)

    def _rank(self, position: Any) -> int:
        """The 1-based rank of a position (0: none given, as with screen coordinates only)."""
        if position is None:
            return 0
        if not isinstance(position, dict):
            raise _Invalid("event_attributes.position: expected an object")
        ordinal = position.get("ordinal")
        where = "event_attributes.position.ordinal"
        if isinstance(ordinal, dict):  # UBI 1.0 to 1.2: {"ordinal": {"index": n}}
            ordinal, where = ordinal.get("index"), where + ".index"
        if ordinal is None:
            ordinal, where = position.get("index"), "event_attributes.position.index"
        if ordinal is None:
            return 0
        if isinstance(ordinal, bool) or not isinstance(ordinal, int):
            raise _Invalid(f"{where}: expected an integer")
        rank = ordinal - self.config.ordinal_base + 1
        if not 1 <= rank < 2**31:
            raise _Invalid(
                f"{where} = {ordinal}: out of range ([ubi] ordinal_base = "
                f"{self.config.ordinal_base})"
            )
        return rank

    def _timestamp(self, record: dict[str, Any]) -> int | str:
        """The record's timestamp as it is (read into event time by ``decode``)."""
        stamp = record.get("timestamp")
        if stamp is None:
            raise _Invalid("timestamp: required (the event time)")
        if isinstance(stamp, bool) or not isinstance(stamp, int | str):
            raise _Invalid("timestamp: expected an ISO 8601 string or epoch milliseconds")
        return stamp


class _Invalid(ValueError):
    """A UBI record that cannot be read: the message names the field."""


def _text(record: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = record.get(name)
    if value is None:
        if required:
            raise _Invalid(f"{name}: required")
        return None
    if not isinstance(value, str):
        raise _Invalid(f"{name}: expected a string")
    return value


def _identifier(record: dict[str, Any], name: str) -> str | None:
    value = record.get(name)
    return None if value is None or value == "" else _id_value(value, name)


def _id_value(value: Any, name: str) -> str:
    """An id: a string, or an integer (as UBI allows for object ids) written in decimal."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63:
        return str(value)
    raise _Invalid(f"{name}: expected a string or an integer id")


QUERY_EVENT = "ubi-query:"
"""What the event id of a UBI query record begins with."""
ONE_QUERY_SESSION = "ubi-query:"
"""What the session id of a UBI query with neither ``session_id`` nor ``client_id`` begins
with: a session of that one query, which names no user (the query lists and the click
models count no session of it toward ``min_sessions``)."""

AGGREGATION = IgnoredAction("aggregation request")
"""A query record whose request asks for no hits (``"size": 0``): the facets of a search,
which the same search's hits request records too."""


def _teams(record: dict[str, Any], results: int) -> list[str] | None:
    """Team-draft interleaving: ``query_attributes.result_teams``, the ranker of each hit of
    ``query_response_hit_ids`` (UBI names query attributes for experiment identifiers)."""
    given = record.get("query_attributes")
    teams = given.get("result_teams") if isinstance(given, dict) else None
    if teams is None:
        return None
    if not isinstance(teams, list) or len(teams) != results or not all(
        isinstance(team, str) for team in teams
    ):
        raise _Invalid("query_attributes.result_teams: expected one ranker name per hit of "
                       "query_response_hit_ids")
    return teams


def _aggregation_only(request: Any) -> bool:
    """Whether a query record's logged request (``query``: the request body as a JSON string,
    or as an object) asks for no hits."""
    if isinstance(request, str):
        if '"size"' not in request:
            return False
        try:
            request = json.loads(request)
        except (ValueError, RecursionError):  # unreadable, or nested too deep: a search
            return False
    return isinstance(request, dict) and request.get("size") == 0


def _digest(prefix: str, data: bytes) -> str:
    return f"{prefix}:{hashlib.blake2b(data, digest_size=12).hexdigest()}"


DECODER = UbiDecoder
