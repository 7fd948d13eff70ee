"""Online search metrics (CONTRACT section 3): sessions in event time and their counters.

Pure: no clock, no I/O. Time is the events' own; the watermark trails the newest event time
by the allowed lateness, and a session closes once the watermark passes its last event plus
the inactivity timeout. A session keeps counters and the few query ids it needs to attribute
clicks, never its events, so memory per open session is small and bounded.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from monitor.config import SessionsConfig

# Bits of Session.flags
CLICKED = 1
SUCCESSFUL = 2

# Bits of a remembered query's flags
QUERY_CLICKED = 1
CLICK_AFTER = 2  # some click in the session arrived after this query

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
POSITION_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 50)
FIRST_CLICK_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
QUERIES_PER_SESSION_BUCKETS = (1, 2, 3, 4, 5, 8, 13, 21)
RECIPROCAL_RANK_BUCKETS = (0.1, 0.2, 0.25, 1 / 3, 0.5, 1.0)


class Histogram:
    """Per-class bucket counts (non-cumulative; the last bucket is +Inf) and sums."""

    __slots__ = ("bounds", "counts", "sums")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts: list[list[int]] = []
        self.sums: list[float] = []

    def add_class(self) -> None:
        self.counts.append([0] * (len(self.bounds) + 1))
        self.sums.append(0.0)

    def observe(self, klass: int, value: float) -> None:
        self.counts[klass][bisect_left(self.bounds, value)] += 1
        self.sums[klass] += value


@dataclass
class OnlineCounters:
    """Counters and histograms per class index; the Prometheus collector reads these."""

    queries: list[int] = field(default_factory=list)
    zero_result_queries: list[int] = field(default_factory=list)
    clicked_queries: list[int] = field(default_factory=list)
    clicks: list[int] = field(default_factory=list)
    result_impressions: list[int] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    abandoned_sessions: list[int] = field(default_factory=list)
    successful_sessions: list[int] = field(default_factory=list)
    conversions: list[int] = field(default_factory=list)
    reformulated_queries: list[int] = field(default_factory=list)
    query_latency: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    click_position: Histogram = field(default_factory=lambda: Histogram(POSITION_BUCKETS))
    time_to_first_click: Histogram = field(default_factory=lambda: Histogram(FIRST_CLICK_BUCKETS))
    queries_per_session: Histogram = field(
        default_factory=lambda: Histogram(QUERIES_PER_SESSION_BUCKETS)
    )
    first_click_reciprocal_rank: Histogram = field(
        default_factory=lambda: Histogram(RECIPROCAL_RANK_BUCKETS)
    )

    COUNTS = (
        "queries", "zero_result_queries", "clicked_queries", "clicks", "result_impressions",
        "sessions", "abandoned_sessions", "successful_sessions", "conversions",
        "reformulated_queries",
    )
    HISTOGRAMS = (
        "query_latency", "click_position", "time_to_first_click", "queries_per_session",
        "first_click_reciprocal_rank",
    )

    def add_class(self) -> None:
        for name in self.COUNTS:
            getattr(self, name).append(0)
        for name in self.HISTOGRAMS:
            getattr(self, name).add_class()

    def histograms(self) -> Iterator[tuple[str, Histogram]]:
        for name in self.HISTOGRAMS:
            yield name, getattr(self, name)


class Session:
    """One open session: its newest event time, first query's class, flags and recent queries.

    ``recent`` is flat, four slots per query: query id, class, time, flags.
    """

    __slots__ = ("flags", "klass", "last", "queries", "recent")

    def __init__(self, last: float) -> None:
        self.last = last
        self.klass = -1
        self.queries = 0
        self.flags = 0
        self.recent: list[Any] = []


@dataclass
class Sessions:
    """The sessionizer's explicit state: open sessions, watermark, dedupe memory."""

    config: SessionsConfig
    counters: OnlineCounters
    open: OrderedDict[str, Session] = field(default_factory=OrderedDict)
    newest: float = float("-inf")
    seen_ids: set[str] = field(default_factory=set)
    seen_order: deque[tuple[float, str]] = field(default_factory=deque)
    unmatched_clicks: int = 0
    next_expiry: float = float("-inf")

    @property
    def watermark(self) -> float:
        return self.newest - self.config.allowed_lateness

    def first_sighting(self, event_id: str, time: float) -> bool:
        """False for an event id seen before (within the dedupe memory)."""
        if event_id in self.seen_ids:
            return False
        self.seen_ids.add(event_id)
        self.seen_order.append((time, event_id))
        return True

    def advance(self, time: float) -> None:
        """Move event time forward to ``time``; close what the watermark has passed."""
        if time > self.newest:
            self.newest = time
            if time >= self.next_expiry:
                self.expire()
                self.next_expiry = time + 1.0

    def expire(self) -> None:
        """Close sessions the watermark has passed and forget ids older than the memory."""
        watermark = self.watermark
        cutoff = watermark - self.config.timeout
        sessions = self.open
        while sessions:
            session_id, session = next(iter(sessions.items()))
            if session.last >= cutoff:
                break
            del sessions[session_id]
            self.close(session)
        forget = self.newest - self.config.timeout - self.config.allowed_lateness
        order, seen = self.seen_order, self.seen_ids
        while order and order[0][0] < forget:
            seen.discard(order.popleft()[1])

    def close_all(self) -> None:
        """End of input: close every open session."""
        while self.open:
            self.close(self.open.popitem(last=False)[1])
        self.seen_order.clear()
        self.seen_ids.clear()

    def session_for(self, session_id: str, time: float) -> Session | None:
        """The open session this event belongs to (opening one), or None if it is too late."""
        session = self.open.get(session_id)
        if session is not None:
            if time - session.last <= self.config.timeout:
                if time > session.last:
                    session.last = time
                    self.open.move_to_end(session_id)
                return session
            del self.open[session_id]  # inactivity gap: the old session is over
            self.close(session)
        if time < self.watermark - self.config.timeout:
            return None
        session = Session(time)
        self.open[session_id] = session
        return session

    def close(self, session: Session) -> None:
        if session.queries == 0:
            return
        c, counters = session.klass, self.counters
        counters.sessions[c] += 1
        if not session.flags & CLICKED:
            counters.abandoned_sessions[c] += 1
        if session.flags & SUCCESSFUL:
            counters.successful_sessions[c] += 1
        counters.queries_per_session.observe(c, session.queries)

    # --- events ---------------------------------------------------------------------------

    def on_query(
        self, session: Session, klass: int, query_id: str, time: float, results: int,
        zero_result: bool, latency_seconds: float | None,
    ) -> None:
        counters = self.counters
        counters.queries[klass] += 1
        counters.result_impressions[klass] += results
        if zero_result:
            counters.zero_result_queries[klass] += 1
        if latency_seconds is not None:
            counters.query_latency.observe(klass, latency_seconds)
        recent = session.recent
        # the previous query (by arrival) was reformulated if no click came after it soon
        if (
            recent
            and not recent[-1] & CLICK_AFTER
            and 0 <= time - recent[-2] <= self.config.reformulation_window
        ):
            counters.reformulated_queries[recent[-3]] += 1
        if session.queries == 0:
            session.klass = klass
        session.queries += 1
        recent += (query_id, klass, time, 0)
        if len(recent) > 4 * self.config.recent_queries:
            del recent[:4]

    def on_click(
        self, session: Session, query_id: str, time: float, position: int,
        dwell_ms: float | None,
    ) -> None:
        counters = self.counters
        recent = session.recent
        found = _find(recent, query_id)
        if found < 0:
            klass = session.klass if session.klass >= 0 else 0
            self.unmatched_clicks += 1
        else:
            klass = recent[found + 1]
            flags = recent[found + 3]
            if not flags & QUERY_CLICKED:
                recent[found + 3] = flags | QUERY_CLICKED
                counters.clicked_queries[klass] += 1
                counters.first_click_reciprocal_rank.observe(klass, 1.0 / position)
                query_time = recent[found + 2]
                if time >= query_time:
                    counters.time_to_first_click.observe(klass, time - query_time)
        if recent:
            recent[-1] |= CLICK_AFTER
        counters.clicks[klass] += 1
        counters.click_position.observe(klass, position)
        session.flags |= CLICKED
        if dwell_ms is not None and dwell_ms >= self.config.success_dwell * 1000.0:
            session.flags |= SUCCESSFUL

    def on_dwell(self, session: Session, dwell_ms: float) -> None:
        if dwell_ms >= self.config.success_dwell * 1000.0:
            session.flags |= SUCCESSFUL

    def on_conversion(self, session: Session, query_id: str | None) -> None:
        found = _find(session.recent, query_id) if query_id is not None else -1
        if found >= 0:
            klass = session.recent[found + 1]
        else:
            klass = session.klass if session.klass >= 0 else 0
        self.counters.conversions[klass] += 1
        session.flags |= SUCCESSFUL


def _find(recent: list[Any], query_id: str | None) -> int:
    """Index of ``query_id``'s four slots in a session's recent queries, newest first; -1."""
    for i in range(len(recent) - 4, -1, -4):
        if recent[i] == query_id:
            return i
    return -1
