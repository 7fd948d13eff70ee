"""The one place that wires the parts: decode -> classify -> sessionize -> counters.

Sources (a file, Kafka) hand every message's bytes to ``Pipeline.feed``; the exporter reads
the state at scrape time. Nothing here does I/O or reads the clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from monitor.classes import QueryClasses
from monitor.config import Config
from monitor.events import (
    Click,
    Conversion,
    Dwell,
    IgnoredAction,
    Judgment,
    Qrels,
    Query,
    Reason,
    Rejection,
    decode,
    seconds,
)
from monitor.online import OnlineCounters, Sessions

log = logging.getLogger(__name__)


@dataclass
class Health:
    """The daemon's own counters (``searchmon_*``)."""

    events_read: int = 0
    rejected: dict[Reason, int] = field(default_factory=lambda: dict.fromkeys(Reason, 0))
    ignored_actions: int = 0
    judged_messages: int = 0
    last_event_time: float | None = None

    @property
    def rejected_late(self) -> int:
        return self.rejected[Reason.TOO_LATE]

    @property
    def rejected_duplicate(self) -> int:
        return self.rejected[Reason.DUPLICATE]


class Pipeline:
    """Turns messages into online counters by query class."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.classes = QueryClasses.from_config(config.query_classes)
        self.counters = OnlineCounters()
        for _ in self.classes.names:
            self.counters.add_class()
        self.sessions = Sessions(config.sessions, self.counters)
        self.health = Health()
        self._max_bytes = config.input.max_event_bytes

    def feed(self, data: bytes) -> Rejection | None:
        """Account for one message; returns its rejection, if it was rejected."""
        health = self.health
        health.events_read += 1
        event = decode(data, self._max_bytes)
        if isinstance(event, Rejection):
            health.rejected[event.reason] += 1
            return event
        if isinstance(event, IgnoredAction):
            health.ignored_actions += 1
            return None
        if isinstance(event, Judgment | Qrels):
            health.judged_messages += 1
            return None
        time = seconds(event.timestamp)
        sessions = self.sessions
        if not sessions.first_sighting(event.event_id, time):
            return self._reject(Reason.DUPLICATE, f"event_id {event.event_id!r} seen before")
        sessions.advance(time)
        session = sessions.session_for(event.session_id, time)
        if session is None:
            return self._reject(
                Reason.TOO_LATE, f"event time {time:.3f} is behind the watermark, session closed"
            )
        if health.last_event_time is None or time > health.last_event_time:
            health.last_event_time = time
        if isinstance(event, Query):
            klass = self._classify(event)
            results = len(event.result_ids)
            zero = event.result_count == 0 if event.result_count is not None else results == 0
            latency = event.latency_ms / 1000.0 if event.latency_ms is not None else None
            sessions.on_query(session, klass, event.query_id, time, results, zero, latency)
        elif isinstance(event, Click):
            sessions.on_click(session, event.query_id, time, event.position, event.dwell_ms)
        elif isinstance(event, Dwell):
            sessions.on_dwell(session, event.dwell_ms)
        elif isinstance(event, Conversion):
            sessions.on_conversion(session, event.query_id)
        return None

    def close(self) -> None:
        """End of input: every open session closes and is counted."""
        self.sessions.close_all()

    def _classify(self, event: Query) -> int:
        before = len(self.classes.names)
        klass = self.classes.classify(event.query_class, event.query_text)
        for _ in range(len(self.classes.names) - before):
            self.counters.add_class()
        return klass

    def _reject(self, reason: Reason, detail: str) -> Rejection:
        self.health.rejected[reason] += 1
        return Rejection(reason, detail)


class RejectionLog:
    """Logs each rejected message once with its position, up to a limit per reason."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.logged: dict[Reason, int] = dict.fromkeys(Reason, 0)

    def record(self, rejection: Rejection, position: str) -> None:
        count = self.logged[rejection.reason]
        if count < self.limit:
            log.warning("rejected %s (%s): %s", position, rejection.reason, rejection.detail)
            if count + 1 == self.limit:
                log.warning(
                    "further %s rejections are counted, not logged", rejection.reason.value
                )
        self.logged[rejection.reason] = count + 1
