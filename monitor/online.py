"""Online search metrics (README: "Online metrics"): sessions in event time and their counters.

Pure: no clock, no I/O. Time is the events' own; the watermark trails the newest event time
by the allowed lateness, and a session closes once the watermark passes its last event plus
the inactivity timeout. A session keeps counters and the few query ids it needs to attribute
clicks, never its events, so memory per open session is small and bounded.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from monitor.config import SessionsConfig
from monitor.events import Reason
from monitor.snapshots import (
    Float,
    Int,
    finite_or_none,
    or_minus_infinity,
    require,
    same_lengths,
)

# Bits of Session.flags: the session's own, then those of its latest query; an older
# query keeps its query bits in its own slot.
CLICKED = 1
SUCCESSFUL = 2
QUERY_CLICKED = 4
CLICK_AFTER = 8  # some click in the session arrived after this query
QUERY_BITS = QUERY_CLICKED | CLICK_AFTER

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

    def snapshot(self) -> HistogramState:
        return HistogramState([list(c) for c in self.counts], list(self.sums))

    def restore(self, state: HistogramState, classes: int, name: str) -> None:
        require(
            len(state.counts) == classes == len(state.sums)
            and all(len(c) == len(self.bounds) + 1 for c in state.counts),
            f"histogram {name}: not {classes} classes of {len(self.bounds) + 1} buckets",
        )
        self.counts = [list(c) for c in state.counts]
        self.sums = list(state.sums)


@dataclass(frozen=True)
class HistogramState:
    """Per class: non-cumulative bucket counts (the last is +Inf) and the sum."""

    counts: list[list[Int]]
    sums: list[Float]


@dataclass(frozen=True)
class CountersState:
    """``OnlineCounters`` by name (``COUNTS``, ``HISTOGRAMS``), each a list by class index."""

    counts: dict[str, list[Int]]
    histograms: dict[str, HistogramState]


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

    def snapshot(self) -> CountersState:
        return CountersState(
            {name: list(getattr(self, name)) for name in self.COUNTS},
            {name: histogram.snapshot() for name, histogram in self.histograms()},
        )

    def restore(self, state: CountersState, classes: int) -> None:
        require(
            set(state.counts) == set(self.COUNTS)
            and set(state.histograms) == set(self.HISTOGRAMS),
            "online counters: not the counters of this version",
        )
        for name in self.COUNTS:
            values = state.counts[name]
            require(len(values) == classes, f"counter {name}: not {classes} classes")
            setattr(self, name, list(values))
        for name, histogram in self.histograms():
            histogram.restore(state.histograms[name], classes, name)


class Session:
    """One open session: newest event time, first query's class, flags, and recent queries.

    The latest query is kept inline (most clicks are on it); ``older`` holds earlier ones,
    flat, four slots per query (id, class, time, flags), or is None.
    """

    __slots__ = (
        "flags", "klass", "last", "older", "queries", "query_class", "query_id",
        "query_time",
    )

    def __init__(self, last: float) -> None:
        self.last = last
        self.klass = 0
        self.queries = 0
        self.flags = 0
        self.query_id: str | None = None
        self.query_class = 0
        self.query_time = last
        self.older: list[Any] | None = None


@dataclass(frozen=True)
class SessionsState:
    """``Sessions`` as plain data: one column per ``Session`` field, ``older`` flat four slots
    per query (id, class, time, flags), times in epoch seconds (null: nothing seen yet)."""

    ids: list[str]
    last: list[Float]
    klass: list[Int]
    queries: list[Int]
    flags: list[Int]
    query_id: list[str | None]
    query_class: list[Int]
    query_time: list[Float]
    older: list[list[str | Int | Float | None]]
    newest: Float | None
    seen: list[str]
    seen_before: list[str]
    generation_end: Float | None
    next_due: Float | None
    unmatched_clicks: Int


def _restore_session(
    last: float, klass: int, queries: int, flags: int, query_id: str | None, query_class: int,
    query_time: float, older: list[Any] | None,
) -> Session:
    session = Session(last)
    session.klass, session.queries, session.flags = klass, queries, flags
    session.query_id, session.query_class, session.query_time = query_id, query_class, query_time
    session.older = older
    return session


@dataclass
class Sessions:
    """The sessionizer's explicit state: open sessions, watermark, dedupe memory.

    A session closes once the watermark passes its last event plus the timeout. Closing is
    checked for an event's own session on arrival, and for the others through ``due``: each
    session id waits in the bucket of the time it would close; each time the watermark enters
    a new bucket, every session waiting in a bucket up to the watermark's closes if the
    watermark has passed its end, or moves to the bucket of its new end. The buckets decide
    only how much is looked at, never what is counted or when.
    Event ids are remembered in two generations of ``timeout + allowed_lateness`` of event
    time each: an id is known for at least that long and at most twice that long.
    """

    config: SessionsConfig
    counters: OnlineCounters
    open: dict[str, Session] = field(default_factory=dict)
    newest: float = float("-inf")
    seen: set[str] = field(default_factory=set)
    seen_before: set[str] = field(default_factory=set)
    generation_end: float = float("-inf")
    due: dict[int, list[str]] = field(default_factory=dict)
    next_due: float = float("-inf")
    unmatched_clicks: int = 0

    def snapshot(self) -> SessionsState:
        """The open sessions as columns (encoded several times faster than as objects),
        the watermark's newest event time and the dedupe memory. The closing schedule
        (``due``) is a cache: rebuilt from the sessions on restore."""
        sessions = list(self.open.values())
        return SessionsState(
            ids=list(self.open), last=[s.last for s in sessions],
            klass=[s.klass for s in sessions], queries=[s.queries for s in sessions],
            flags=[s.flags for s in sessions], query_id=[s.query_id for s in sessions],
            query_class=[s.query_class for s in sessions],
            query_time=[s.query_time for s in sessions],
            older=[s.older or [] for s in sessions],
            newest=finite_or_none(self.newest), seen=list(self.seen),
            seen_before=list(self.seen_before),
            generation_end=finite_or_none(self.generation_end),
            next_due=finite_or_none(self.next_due), unmatched_clicks=self.unmatched_clicks,
        )

    def restore(self, state: SessionsState, classes: int) -> None:
        same_lengths(
            "open sessions", state.ids, state.last, state.klass, state.queries, state.flags,
            state.query_id, state.query_class, state.query_time, state.older,
        )
        require(len(set(state.ids)) == len(state.ids), "open sessions: an id twice")
        require(
            all(0 <= k < classes for k in (*state.klass, *state.query_class)),
            "open sessions: a class index out of range",
        )
        for older in state.older:
            require(
                len(older) % 4 == 0 and len(older) <= self._older_slots
                and all(
                    isinstance(older[i + 1], int) and 0 <= older[i + 1] < classes  # type: ignore[operator]
                    and isinstance(older[i + 2], float | int)
                    and isinstance(older[i + 3], int)
                    for i in range(0, len(older), 4)
                ),
                "open sessions: a malformed list of older queries",
            )
        self.open = dict(zip(state.ids, map(
            _restore_session, state.last, state.klass, state.queries, state.flags,
            state.query_id, state.query_class, state.query_time,
            [older or None for older in state.older],
        ), strict=True))
        self.newest = or_minus_infinity(state.newest)
        self.seen, self.seen_before = set(state.seen), set(state.seen_before)
        self.generation_end = or_minus_infinity(state.generation_end)
        self.next_due = or_minus_infinity(state.next_due)
        self.unmatched_clicks = state.unmatched_clicks
        self.due = {}
        for session_id, session in self.open.items():
            self._schedule(session_id, session.last + self._timeout)

    @property
    def open_count(self) -> int:
        return len(self.open)

    def __post_init__(self) -> None:
        self.bucket_seconds = max(1.0, self.config.timeout / 30)
        self._timeout = self.config.timeout
        self._lateness = self.config.allowed_lateness
        self._success_dwell_ms = self.config.success_dwell * 1000.0
        self._reformulation_window = self.config.reformulation_window
        self._older_slots = 4 * self.config.recent_queries

    @property
    def watermark(self) -> float:
        return self.newest - self.config.allowed_lateness

    def admit(self, event_id: str, session_id: str, time: float) -> Session | Reason:
        """The open session an event joins (opening one), or why the event is rejected."""
        seen = self.seen
        if event_id in seen or event_id in self.seen_before:
            return Reason.DUPLICATE
        lateness, timeout = self._lateness, self._timeout
        if time > self.newest:
            self.newest = time
            if time - lateness >= self.next_due:
                self._close_due()
        watermark = self.newest - lateness
        sessions = self.open
        session = sessions.get(session_id)
        if session is not None:
            end = session.last + timeout
            if end < watermark:  # due: the watermark has passed it
                del sessions[session_id]
                self.close(session)
                if time <= end:
                    return Reason.TOO_LATE
            elif time > end:  # an inactivity gap: a new session begins
                del sessions[session_id]
                self.close(session)
            else:
                if time > session.last:
                    session.last = time
                seen.add(event_id)
                return session
        if time + timeout < watermark:
            return Reason.TOO_LATE
        session = sessions[session_id] = Session(time)
        bucket = int((time + timeout) // self.bucket_seconds)
        waiting = self.due.get(bucket)
        if waiting is None:
            self.due[bucket] = [session_id]
        else:
            waiting.append(session_id)
        seen.add(event_id)
        return session

    def _schedule(self, session_id: str, end: float) -> None:
        bucket = int(end // self.bucket_seconds)
        waiting = self.due.get(bucket)
        if waiting is None:
            self.due[bucket] = [session_id]
        else:
            waiting.append(session_id)

    def _close_due(self) -> None:
        """Close the sessions the watermark has passed; rotate the dedupe memory."""
        config = self.config
        watermark = self.newest - config.allowed_lateness
        if self.newest >= self.generation_end:
            self.seen_before, self.seen = self.seen, set()
            self.generation_end = self.newest + config.timeout + config.allowed_lateness
        width = self.bucket_seconds
        passed = int(watermark // width)  # buckets below this have ended
        sessions, timeout, close = self.open, config.timeout, self.close
        # The watermark's own bucket too: every session whose end the watermark has passed
        # closes now, whichever bucket it waited in, so that what is closed is a function
        # of the open sessions and the watermark (a restored state closes the same ones).
        for bucket in sorted(b for b in self.due if b <= passed):
            for session_id in self.due.pop(bucket):
                session = sessions.pop(session_id, None)
                if session is None:
                    continue  # closed already
                end = session.last + timeout
                if end < watermark:
                    close(session)
                else:  # active since it was scheduled: not due yet
                    sessions[session_id] = session
                    self._schedule(session_id, end)
        self.next_due = (passed + 1) * self.bucket_seconds

    def close_all(self) -> None:
        """End of input: close every open session and forget every id."""
        for session in self.open.values():
            self.close(session)
        self.open.clear()
        self.due.clear()
        self.seen.clear()
        self.seen_before.clear()

    def close(self, session: Session) -> None:
        if session.queries == 0:
            return  # a session counts only if it has a query
        c, counters = session.klass, self.counters
        counters.sessions[c] += 1
        if not session.flags & CLICKED:
            counters.abandoned_sessions[c] += 1
        if session.flags & SUCCESSFUL:
            counters.successful_sessions[c] += 1
        per_session = counters.queries_per_session
        per_session.counts[c][bisect_left(per_session.bounds, session.queries)] += 1
        per_session.sums[c] += session.queries

    # --- events of an admitted session -----------------------------------------------------

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
            latency = counters.query_latency
            latency.counts[klass][bisect_left(latency.bounds, latency_seconds)] += 1
            latency.sums[klass] += latency_seconds
        if session.queries == 0:
            session.klass = klass
        else:
            # the previous query (by arrival) was reformulated: no click after it, soon followed
            if (
                not session.flags & CLICK_AFTER
                and 0 <= time - session.query_time <= self._reformulation_window
            ):
                counters.reformulated_queries[session.query_class] += 1
            older = session.older
            if older is None:
                older = session.older = []
            older += (session.query_id, session.query_class, session.query_time,
                      session.flags & QUERY_BITS)
            if len(older) >= self._older_slots:
                del older[:4]
        session.queries += 1
        session.query_id = query_id
        session.query_class = klass
        session.query_time = time
        session.flags &= ~QUERY_BITS

    def on_click(
        self, session: Session, query_id: str, time: float, position: int,
        dwell_ms: float | None,
    ) -> None:
        counters = self.counters
        bits = CLICKED | CLICK_AFTER
        if session.query_id == query_id:
            klass = session.query_class
            first = not session.flags & QUERY_CLICKED
            bits |= QUERY_CLICKED
            if first:
                delay = time - session.query_time
        else:
            older = session.older
            found = _find(older, query_id)
            if found < 0 or older is None:
                klass = session.klass
                first = False
                self.unmatched_clicks += 1
            else:
                klass = older[found + 1]
                first = not older[found + 3] & QUERY_CLICKED
                if first:
                    older[found + 3] |= QUERY_CLICKED
                    delay = time - older[found + 2]
        if first:
            counters.clicked_queries[klass] += 1
            rr = counters.first_click_reciprocal_rank
            rr.counts[klass][bisect_left(rr.bounds, 1.0 / position)] += 1
            rr.sums[klass] += 1.0 / position
            if delay >= 0:
                ttfc = counters.time_to_first_click
                ttfc.counts[klass][bisect_left(ttfc.bounds, delay)] += 1
                ttfc.sums[klass] += delay
        counters.clicks[klass] += 1
        positions = counters.click_position
        positions.counts[klass][bisect_left(positions.bounds, position)] += 1
        positions.sums[klass] += position
        session.flags |= bits
        if dwell_ms is not None and dwell_ms >= self._success_dwell_ms:
            session.flags |= SUCCESSFUL

    def on_dwell(self, session: Session, dwell_ms: float) -> None:
        if dwell_ms >= self._success_dwell_ms:
            session.flags |= SUCCESSFUL

    def on_conversion(self, session: Session, query_id: str | None) -> None:
        if query_id is not None and query_id == session.query_id:
            klass = session.query_class
        else:
            found = _find(session.older, query_id) if query_id is not None else -1
            klass = session.older[found + 1] if found >= 0 and session.older else session.klass
        self.counters.conversions[klass] += 1
        session.flags |= SUCCESSFUL


def _find(older: list[Any] | None, query_id: str | None) -> int:
    """Index of ``query_id``'s four slots among a session's older queries, newest first; -1."""
    if older:
        for i in range(len(older) - 4, -1, -4):
            if older[i] == query_id:
                return i
    return -1
