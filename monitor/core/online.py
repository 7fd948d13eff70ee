"""Online search metrics (docs/concepts/event-time-and-sessions.md): sessions in event time
and their counters.

Pure: no clock, no I/O. Time is the events' own; the watermark trails the newest event time
by the allowed lateness, and a session closes once the watermark passes its last event plus
the inactivity timeout. A session keeps counters and the few query ids it needs to attribute
clicks, never its events, so memory per open session is small and bounded.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Final, NamedTuple

from monitor.config import SessionsConfig
from monitor.core.snapshots import (
    Layout,
    Migration,
    finite_or_none,
    or_minus_infinity,
    require,
    same_lengths,
)
from monitor.core.states import (
    CountersState,
    HistogramState,
    SessionsState,
    ShownState,
    WaitingState,
)
from monitor.inputs.events import SESSION_OF_QUERY, Reason

# Bits of Session.flags: the session's own, then those of its latest query; an older
# query keeps its query bits in its own slot.
CLICKED: Final = 1
SUCCESSFUL: Final = 2
QUERY_CLICKED: Final = 4
CLICK_AFTER: Final = 8  # some click in the session arrived after this query
RESULTS_UNKNOWN: Final = 16  # its result list was not logged: impression events count them
ZERO_RESULTS: Final = 32  # counted as a zero-result query
QUERY_BITS: Final = QUERY_CLICKED | CLICK_AFTER | RESULTS_UNKNOWN | ZERO_RESULTS

# The last slot of an accepted query (``Accepted``): whether its result list was logged and
# whether it counted as zero-result (None, the common case: logged, with results).
UNKNOWN: Final = 0.0
ZERO: Final = 1.0
UNKNOWN_ZERO: Final = 2.0

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
POSITION_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 50)
FIRST_CLICK_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
QUERIES_PER_SESSION_BUCKETS = (1, 2, 3, 4, 5, 8, 13, 21)
RECIPROCAL_RANK_BUCKETS = (0.1, 0.2, 0.25, 1 / 3, 0.5, 1.0)


class Histogram:
    """Per-class bucket counts (non-cumulative; the last bucket is +Inf) and sums."""

    __slots__ = ("at", "bounds", "counts", "sums")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts: list[list[int]] = []
        self.sums: list[float] = []
        whole = all(bound == int(bound) for bound in bounds)
        self.at = [bisect_left(bounds, n) for n in range(int(bounds[-1]) + 1)] if whole else []
        """Where every bound is a whole number: the bucket of each whole number up to the
        last bound (``observe_count`` reads it from a list rather than searching per count)."""

    def observe(self, klass: int, value: float) -> None:
        self.counts[klass][bisect_left(self.bounds, value)] += 1
        self.sums[klass] += value

    def observe_count(self, klass: int, n: int) -> None:
        """``observe`` of a whole number (a click's position, a session's queries)."""
        at = self.at
        self.counts[klass][at[n] if 0 <= n < len(at) else bisect_left(self.bounds, n)] += 1
        self.sums[klass] += n

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


class Family(NamedTuple):
    """An exported family of the online metrics: the ``OnlineCounters`` attribute it reads,
    its Prometheus name (counters without ``_total``) and its help text."""

    attribute: str
    name: str
    help: str


COUNTERS = (
    Family("queries", "search_queries", "Queries, by query class."),
    Family("zero_result_queries", "search_zero_result_queries",
           "Queries with result_count 0 (or, without result_count, an empty result list)."),
    Family("clicked_queries", "search_clicked_queries",
           "Queries with at least one click carrying their query_id."),
    Family("clicks", "search_clicks", "Clicks, by the query class of the clicked query."),
    Family("result_impressions", "search_result_impressions",
           "Results shown (length of result_ids of each query)."),
    Family("sessions", "search_sessions",
           "Closed sessions with at least one query, by their first query's class."),
    Family("abandoned_sessions", "search_abandoned_sessions",
           "Closed sessions with at least one query and no click."),
    Family("successful_sessions", "search_successful_sessions",
           "Closed sessions with a click of dwell >= success_dwell or a conversion."),
    Family("conversions", "search_conversions", "Conversions, by query class."),
    Family("reformulated_queries", "search_reformulated_queries",
           "Queries followed in their session by another query within the reformulation "
           "window, with no click between."),
    Family("clicked_zero_result_queries", "search_clicked_zero_result_queries",
           "Zero-result queries that got a click: a data-quality signal (a search logged "
           "twice, once without its hits)."),
)
"""The catalogue of online counters, in export order. A new counter is one entry here (at
the end: exports and checkpoints written before it read as 0 for it, no migration), one
field of ``OnlineCounters``, and the line that counts it."""


class Ratio(NamedTuple):
    """A ratio of two online counters, 0..1: what the report, the status page and the demo
    show; Prometheus users compute it from the counters (the recording rules)."""

    name: str
    numerator: str
    denominator: str


RATIOS = (
    Ratio("ctr", "clicked_queries", "queries"),
    Ratio("zero_result_rate", "zero_result_queries", "queries"),
    Ratio("abandonment_rate", "abandoned_sessions", "sessions"),
    Ratio("session_success_rate", "successful_sessions", "sessions"),
)
"""The ratios, by name: each is defined here once."""


def ratio(name: str, counts: Callable[[str], int | None]) -> float | None:
    """The ratio ``name`` of ``RATIOS`` over the counters ``counts`` gives by name; None when
    its denominator is 0 or either counter is unknown (None)."""
    found = next(r for r in RATIOS if r.name == name)
    numerator, denominator = counts(found.numerator), counts(found.denominator)
    if numerator is None or not denominator:
        return None
    return numerator / denominator

HISTOGRAMS = (
    Family("query_latency", "search_query_latency_seconds", "Query latency (latency_ms)."),
    Family("click_position", "search_click_position", "1-based position of each click."),
    Family("time_to_first_click", "search_time_to_first_click_seconds",
           "Time from a query to its first click."),
    Family("queries_per_session", "search_queries_per_session", "Queries per closed session."),
    Family("first_click_reciprocal_rank", "search_first_click_reciprocal_rank",
           "1 / position of each clicked query's first click."),
)
"""The catalogue of online histograms, in export order (their buckets: ``OnlineCounters``)."""


class OnlineCounters:
    """Counters and histograms per class index; the Prometheus collector reads these."""

    COUNTS: ClassVar[tuple[str, ...]] = tuple(family.attribute for family in COUNTERS)
    HISTOGRAMS: ClassVar[tuple[str, ...]] = tuple(family.attribute for family in HISTOGRAMS)
    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {}
    """None: a counter or histogram added to the catalogue starts at 0 (``restore``)."""

    def __init__(self) -> None:
        self.queries: list[int] = []
        self.zero_result_queries: list[int] = []
        self.clicked_queries: list[int] = []
        self.clicks: list[int] = []
        self.result_impressions: list[int] = []
        self.sessions: list[int] = []
        self.abandoned_sessions: list[int] = []
        self.successful_sessions: list[int] = []
        self.conversions: list[int] = []
        self.reformulated_queries: list[int] = []
        self.clicked_zero_result_queries: list[int] = []
        self.query_latency = Histogram(LATENCY_BUCKETS)
        self.click_position = Histogram(POSITION_BUCKETS)
        self.time_to_first_click = Histogram(FIRST_CLICK_BUCKETS)
        self.queries_per_session = Histogram(QUERIES_PER_SESSION_BUCKETS)
        self.first_click_reciprocal_rank = Histogram(RECIPROCAL_RANK_BUCKETS)

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

    @classmethod
    def restore(cls, layout: Layout, state: CountersState) -> OnlineCounters:
        """The counters of ``state``; one it does not have (added to the catalogue since it
        was taken) starts at 0. One this version does not know is refused."""
        self, classes = cls(), layout.classes
        require(
            set(state.counts) <= set(self.COUNTS)
            and set(state.histograms) <= set(self.HISTOGRAMS),
            "online counters: counters this version does not know",
        )
        for name in self.COUNTS:
            values = state.counts.get(name, [0] * classes)
            require(len(values) == classes, f"counter {name}: not {classes} classes")
            setattr(self, name, list(values))
        for name, histogram in self.histograms():
            if name in state.histograms:
                histogram.restore(state.histograms[name], classes, name)
            else:
                histogram.counts, histogram.sums = [], []
                for _ in range(classes):
                    histogram.add_class()
        return self


SESSION_FIELDS = (
    "first", "flags", "klass", "last", "older", "orphans", "queries", "query_class", "query_id",
    "query_time",
)
"""The attributes of a ``Session`` (its slots, where it is not compiled)."""


class Session:
    """One open session: first and newest event time, first query's class, flags, the
    recent queries, and the clicks and conversions still waiting for their query.

    The latest query is kept inline (most clicks are on it); ``older`` holds earlier ones,
    flat, four slots per query (id, class, time, flags), or is None. ``orphans``: flat, four
    slots per event (kind, query id, time, position) whose query the session has not seen
    (yet), or None.
    """

    __slots__ = SESSION_FIELDS

    def __init__(self, time: float) -> None:
        self.first = time
        self.last = time
        self.klass = 0
        self.queries = 0
        self.flags = 0
        self.query_id: str | None = None
        self.query_class = 0
        self.query_time = time
        self.older: list[Any] | None = None
        self.orphans: list[Any] | None = None


# Kinds of accepted events, in the order the events of one instant are applied.
QUERY: Final = 0
IMPRESSION: Final = 1
CLICK: Final = 2
DWELL: Final = 3
CONVERSION: Final = 4

Accepted = tuple[float, int, str, str, str | None, int, float | str | None]
"""An accepted event as the sessionizer keeps it until it applies it: ``(time, kind,
event_id, session_id, query_id, a, b)``; ``a``: the class index of a query, the 1-based
position of a click or impression (0: not given), else 0; ``b``: the dwell in milliseconds
of a click or dwell event, 0.0 for a query whose results were not logged, the document of
an impression, else None.
Events sort by time, then kind, then id: the order they are applied in, whatever their order
of arrival (ids are unique: duplicates are rejected before)."""


def restored_session(
    first: float, last: float, klass: int, queries: int, flags: int, query_id: str | None,
    query_class: int, query_time: float, older: list[Any] | None, orphans: list[Any] | None,
) -> Session:
    """A session from its columns in a snapshot (``SessionsState``)."""
    session = Session(last)
    session.first = first
    session.klass, session.queries, session.flags = klass, queries, flags
    session.query_id, session.query_class, session.query_time = query_id, query_class, query_time
    session.older, session.orphans = older, orphans
    return session


def _slots_ok(flat: list[Any], limit: int, second_is_class: int | None) -> bool:
    """Whether ``flat`` is four-slot records (id or kind, class or id, time, int)."""
    if len(flat) % 4 or len(flat) > limit:
        return False
    for i in range(0, len(flat), 4):
        second, time, last = flat[i + 1], flat[i + 2], flat[i + 3]
        if not isinstance(time, float | int) or not isinstance(last, int):
            return False
        if second_is_class is not None:
            if not isinstance(second, int) or not 0 <= second < second_is_class:
                return False
        elif flat[i] not in (IMPRESSION, CLICK, CONVERSION) or not isinstance(
            second, str | None
        ):
            return False
    return True


def _sessions_1_to_2(document: Any) -> Any:
    """Version 1 applied events on arrival: nothing waits, no session waits for its query,
    no closed session is remembered, and a session's first event time is the earliest it
    kept (its latest query's, or its last event's)."""
    if not isinstance(document, dict):
        return document  # malformed: validation says so
    last, query_time = document.get("last"), document.get("query_time")
    if isinstance(last, list) and isinstance(query_time, list):
        document["first"] = [
            min(a, b) if isinstance(a, float | int) and isinstance(b, float | int) else a
            for a, b in zip(last, query_time, strict=False)
        ]
        document["orphans"] = [[] for _ in last]
    document["waiting"] = {
        "time": [], "kind": [], "event_id": [], "session_id": [], "query_id": [], "a": [],
        "b": [],
    }
    document["next_settle"] = None
    document["ended"], document["ended_before"] = {}, {}
    return document


def _sessions_2_to_3(document: Any) -> Any:
    """Version 2 had no idle watermark: the watermark followed event time alone."""
    if isinstance(document, dict):
        document["floor"] = None
    return document


def _sessions_3_to_4(document: Any) -> Any:
    """Version 3 counted the clicks whose query never came, not the other events: they
    start from the clicks."""
    if isinstance(document, dict):
        document["unmatched_events"] = document.get("unmatched_clicks")
    return document


class Sessions:
    """The sessionizer's explicit state: open sessions, accepted events waiting for the
    watermark, watermark, dedupe memory.

    Event time decides, not arrival order. An accepted event at or after the watermark waits
    in ``waiting``; once the watermark passes it, the events it passed are applied in event
    time order (time, then kind: query, click, dwell, conversion; then id). So within the
    allowed lateness every order of arrival gives the same sessions and counts. An event
    behind the watermark is applied at once if it falls inside an open session (at or after
    its first event), else rejected as ``too_late``: the session it belongs to may have
    closed. Query-level counts (queries, zero results, impressions, latency) are taken on
    arrival; what depends on the session (clicks and their query, reformulations, the
    session's class) when the event is applied.

    A session closes once the watermark passes its last event plus the timeout. Closing is
    checked for the others through ``due``: each session id waits in the bucket of the time it
    would close; each time the watermark enters a new bucket, every session waiting in a
    bucket up to the watermark's closes if the watermark has passed its end, or moves to the
    bucket of its new end. The buckets decide only how much is looked at, never what is
    counted or when.
    Event ids are remembered in two generations of ``timeout + allowed_lateness`` of event
    time each: an id is known for at least that long and at most twice that long.
    """

    VERSION: ClassVar[int] = 4
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {
        1: _sessions_1_to_2, 2: _sessions_2_to_3, 3: _sessions_3_to_4,
    }

    def __init__(self, config: SessionsConfig, counters: OnlineCounters) -> None:
        self.config = config
        self.counters = counters
        self.open: dict[str, Session] = {}
        self.waiting: dict[int, list[Accepted]] = {}
        """Accepted events the watermark has not passed, by ``time // settle_step``."""
        self.newest = float("-inf")
        """The newest event time accepted."""
        self.clock = float("-inf")
        """What the watermark trails by the allowed lateness: the newest event time, or the
        wall clock of an idle partition (``idle``) when that is later."""
        self.floor = float("-inf")
        """The wall clock the watermark last followed while idle."""
        self.seen: set[str] = set()
        self.seen_before: set[str] = set()
        self.ended: dict[str, float] = {}
        """The last event time of each session closed in this generation of the dedupe
        memory (and ``ended_before``: the previous one): a late event within the timeout of
        one belongs to it, and is ``too_late``."""
        self.ended_before: dict[str, float] = {}
        self.generation_end = float("-inf")
        self.due: dict[int, list[str]] = {}
        self.next_due = float("-inf")
        self.next_settle = float("-inf")
        self.unmatched_clicks = 0
        self.unmatched_events = 0
        """Clicks, impressions and conversions whose query never came to their session."""
        self.horizon = float("inf")
        """Events later than this are rejected (``future_timestamp``); set by the source."""
        self.behind = 0
        """Events that arrived behind the watermark since this process started (not
        state)."""
        self.shown: dict[str, list[Any]] = {}
        """Queries whose result list was not logged, by id: ``[text, class, time, {position:
        doc}]``, the class and time once the query is applied; their impressions rebuild the
        served list, handed to ``served`` when the query leaves its session's memory."""
        self.served: Callable[[int, float, str, list[str]], None] | None = None
        """Where a rebuilt served list goes (the qrels join); set by the pipeline."""
        self.finished: Callable[[str, int, float, str, bool], None] | None = None
        """Told each query that leaves its session's memory (id, class, time, session,
        whether it got a click): the query lists; set by the pipeline."""
        self.first_click: Callable[[str, float], None] | None = None
        """Told each query's first click (query id, seconds after it): the experiments."""
        self.clicked: Callable[[str, int], None] | None = None
        """Told each click credited to its query (query id, position): interleaving."""
        self.closed: Callable[[str, bool, bool, bool], None] | None = None
        """Told each closed session (id, clicked, successful, whether it had a query): the
        experiments."""
        self.converted: Callable[[str], None] | None = None
        """Told each conversion applied, with its session (resolved): the experiments."""
        self.resolving = False
        """Some event came whose session is that of its query (``SESSION_OF_QUERY``): set by
        the pipeline (UBI events), so that other events pay nothing for it."""
        self.query_sessions: dict[str, str] | None = None
        """The open session of each query id the open sessions remember: built when the
        first event to resolve through its query id (``SESSION_OF_QUERY``) comes, kept from
        then on (a cache: rebuilt from the sessions after a restore)."""
        self.bucket_seconds = max(1.0, config.timeout / 30)
        self._timeout = config.timeout
        self._lateness = config.allowed_lateness
        self.settle_step = max(self._lateness / 8, 0.001)
        """Waiting events wait in buckets of this much event time; those of a bucket are
        sorted and applied together, once the watermark has passed the bucket."""
        self._success_dwell_ms = config.success_dwell * 1000.0
        self._reformulation_window = config.reformulation_window
        self._older_slots = 4 * config.recent_queries
        self._orphan_slots = 4 * config.recent_queries

    def snapshot(self) -> SessionsState:
        """The open sessions as columns (encoded several times faster than as objects), the
        waiting events, the watermark's newest event time and the dedupe memory. The
        closing schedule (``due``) is a cache: rebuilt from the sessions on restore."""
        sessions = list(self.open.values())
        waiting = self.waiting_events()
        return SessionsState(
            ids=list(self.open), first=[s.first for s in sessions],
            last=[s.last for s in sessions],
            klass=[s.klass for s in sessions], queries=[s.queries for s in sessions],
            flags=[s.flags for s in sessions], query_id=[s.query_id for s in sessions],
            query_class=[s.query_class for s in sessions],
            query_time=[s.query_time for s in sessions],
            older=[s.older or [] for s in sessions],
            orphans=[s.orphans or [] for s in sessions],
            waiting=WaitingState(*(list(column) for column in zip(*waiting, strict=True)))
            if waiting else WaitingState([], [], [], [], [], [], []),
            newest=finite_or_none(self.newest), seen=list(self.seen),
            seen_before=list(self.seen_before), ended=dict(self.ended),
            ended_before=dict(self.ended_before),
            generation_end=finite_or_none(self.generation_end),
            next_due=finite_or_none(self.next_due),
            next_settle=finite_or_none(self.next_settle),
            unmatched_clicks=self.unmatched_clicks, floor=finite_or_none(self.floor),
            unmatched_events=self.unmatched_events,
            shown={
                query_id: ShownState(text, klass, time, sorted(docs.items()))
                for query_id, (text, klass, time, docs) in self.shown.items()
            },
        )

    @classmethod
    def restore(cls, layout: Layout, state: SessionsState) -> Sessions:
        """The sessions of ``state``, counting into fresh counters until the pipeline hands
        them its own (``counters``)."""
        self, classes = cls(layout.config.sessions, OnlineCounters()), layout.classes
        same_lengths(
            "open sessions", state.ids, state.first, state.last, state.klass, state.queries,
            state.flags, state.query_id, state.query_class, state.query_time, state.older,
            state.orphans,
        )
        require(len(set(state.ids)) == len(state.ids), "open sessions: an id twice")
        require(
            all(0 <= k < classes for k in (*state.klass, *state.query_class)),
            "open sessions: a class index out of range",
        )
        require(
            all(_slots_ok(older, self._older_slots, classes) for older in state.older),
            "open sessions: a malformed list of older queries",
        )
        require(
            all(_slots_ok(orphans, self._orphan_slots, None) for orphans in state.orphans),
            "open sessions: a malformed list of waiting clicks and conversions",
        )
        w = state.waiting
        same_lengths(
            "waiting events", w.time, w.kind, w.event_id, w.session_id, w.query_id, w.a, w.b
        )
        require(
            all(QUERY <= kind <= CONVERSION for kind in w.kind)
            and len(set(w.event_id)) == len(w.event_id)
            and all(
                0 <= a < classes for kind, a in zip(w.kind, w.a, strict=True) if kind == QUERY
            ),
            "waiting events: a kind, id or class out of range",
        )
        self.open = dict(zip(state.ids, map(
            restored_session, state.first, state.last, state.klass, state.queries, state.flags,
            state.query_id, state.query_class, state.query_time,
            [older or None for older in state.older],
            [orphans or None for orphans in state.orphans],
        ), strict=True))
        self.waiting = {}
        for event in zip(
            w.time, w.kind, w.event_id, w.session_id, w.query_id, w.a, w.b, strict=True
        ):
            self.waiting.setdefault(int(event[0] // self.settle_step), []).append(event)
        self.newest = or_minus_infinity(state.newest)
        self.floor = or_minus_infinity(state.floor)
        self.clock = max(self.newest, self.floor)
        self.seen, self.seen_before = set(state.seen), set(state.seen_before)
        self.ended, self.ended_before = dict(state.ended), dict(state.ended_before)
        self.generation_end = or_minus_infinity(state.generation_end)
        self.next_due = or_minus_infinity(state.next_due)
        self.next_settle = or_minus_infinity(state.next_settle)
        self.unmatched_clicks = state.unmatched_clicks
        self.unmatched_events = state.unmatched_events
        self.due = {}
        self.query_sessions = None
        self.resolving = any(i.startswith(SESSION_OF_QUERY) for i in w.session_id)
        require(
            all(e.klass is None or 0 <= e.klass < classes for e in state.shown.values()),
            "shown results: a class index out of range",
        )
        self.shown = {
            query_id: [e.text, e.klass, e.time, dict(e.docs)]
            for query_id, e in state.shown.items()
        }
        for session_id, session in self.open.items():
            self._schedule(session_id, session.last + self._timeout)
        return self

    @property
    def open_count(self) -> int:
        return len(self.open)

    def waiting_events(self) -> list[Accepted]:
        """The accepted events the watermark has not passed, in the order they will apply."""
        return sorted(event for bucket in self.waiting.values() for event in bucket)

    @property
    def watermark(self) -> float:
        return self.clock - self.config.allowed_lateness

    def idle(self, now: float) -> bool:
        """No event came for a while to a partition read to its end: the watermark follows
        the wall clock ``now`` (less the allowed lateness), as it would behind an event at
        ``now``. The events it passes are applied and the sessions it passes close; a late
        event after that is placed or rejected by the usual rules. Returns whether anything
        was applied or closed."""
        if now <= self.clock:
            return False
        before = (self.open_count, sum(len(bucket) for bucket in self.waiting.values()))
        self.floor = self.clock = now
        self._advance()
        return (self.open_count, sum(len(b) for b in self.waiting.values())) != before

    def offer(self, event: Accepted, checked: bool = False) -> Reason | None:
        """Accept an event (it is applied once the watermark passes it), or say why not;
        ``checked``: ``refuses`` has just found no reason to refuse it for sure."""
        time, event_id = event[0], event[2]
        seen = self.seen
        if not checked:
            if time > self.horizon:
                duplicate = event_id in seen or event_id in self.seen_before
                return Reason.DUPLICATE if duplicate else Reason.FUTURE_TIMESTAMP
            # taken into the dedupe memory at once (one lookup, not two): ``_late`` gives
            # back the id of an event it refuses
            size = len(seen)
            seen.add(event_id)
            if len(seen) == size:
                return Reason.DUPLICATE
            if event_id in self.seen_before:
                seen.discard(event_id)
                return Reason.DUPLICATE
        if time > self.newest:
            self.newest = time
            if time > self.clock:
                self.clock = time
                if time - self._lateness >= self.next_settle:
                    self._advance()
        watermark = self.clock - self._lateness
        if time >= watermark:
            if checked:
                seen.add(event_id)
            number = int(time // self.settle_step)
            bucket = self.waiting.get(number)
            if bucket is None:
                self.waiting[number] = [event]
            else:
                bucket.append(event)
            return None
        reason = self._late(event, watermark)
        if reason is not None and not checked:
            seen.discard(event_id)  # (taken above: a copy of a refused event is no duplicate)
        return reason

    def remember(self, event_id: str) -> None:
        """An event taken in without being applied (a record merged into its search): a
        copy of it is a duplicate."""
        self.seen.add(event_id)

    def refuses(self, event: Accepted) -> Reason | None:
        """Why ``offer`` would refuse the event for sure (a duplicate, or a time beyond the
        horizon), without changing anything; None: it may accept it."""
        if event[2] in self.seen or event[2] in self.seen_before:
            return Reason.DUPLICATE
        return Reason.FUTURE_TIMESTAMP if event[0] > self.horizon else None

    def _late(self, event: Accepted, watermark: float) -> Reason | None:
        """An event behind the watermark: applied to the session it belongs to in event time
        if that is open (or, when none of its id is, opens one if it would not be over by
        now); ``too_late`` if it belongs to a session that has closed."""
        self.behind += 1
        self._advance()  # what the watermark has passed is applied first
        time, session_id, timeout = event[0], event[3], self._timeout
        if time <= self.generation_end - 2 * (timeout + self._lateness):
            # older than the dedupe memory surely reaches (two generations, the older one
            # begun before the newest event at the last rotation): a copy could not be told
            return Reason.TOO_LATE
        if session_id.startswith(SESSION_OF_QUERY):
            session_id = self._resolve(session_id, event[4])
        session = self.open.get(session_id)
        if session is not None and session.last + timeout < watermark:  # due
            del self.open[session_id]
            self.close(session_id, session)
            session = None
        ended = self.ended.get(session_id)
        if ended is None:
            ended = self.ended_before.get(session_id, float("-inf"))
        if time <= ended + timeout:
            return Reason.TOO_LATE  # within the timeout of a closed session: it was its
        if session is None:
            if time + timeout < watermark:
                return Reason.TOO_LATE  # a session of its own would have closed by now
            session = self.open[session_id] = Session(time)
            self._schedule(session_id, time + timeout)
        elif time < session.first:
            if session.first - time > timeout:
                return Reason.TOO_LATE  # a session of its own, which would have closed
            session.first = time
        elif time > session.last:
            session.last = time
        self.seen.add(event[2])
        self._apply(session, event, session_id)
        return None

    def _advance(self) -> None:
        """Apply the waiting events the watermark has passed, in event time order; close
        the sessions it has passed."""
        watermark = self.clock - self._lateness
        step, waiting = self.settle_step, self.waiting
        current = int(watermark // step)  # the bucket the watermark is in
        ready: list[Accepted] = []
        for number in sorted(b for b in waiting if b <= current):
            bucket = waiting.pop(number)
            bucket.sort()
            if number == current:  # only its events up to the watermark
                cut = bisect_right(bucket, (watermark, CONVERSION + 1))
                if cut < len(bucket):
                    waiting[number] = bucket[cut:]
                    del bucket[cut:]
            ready += bucket
        if ready:
            self._settle(ready)
        if watermark >= self.next_due:
            self._close_due()
        self.next_settle = (current + 1) * step

    def _settle(self, ready: list[Accepted]) -> None:
        """Apply waiting events the watermark has passed, in the (time) order given."""
        sessions, timeout, resolving = self.open, self._timeout, self.resolving
        for event in ready:
            time, session_id = event[0], event[3]
            if resolving and session_id.startswith(SESSION_OF_QUERY):
                session_id = self._resolve(session_id, event[4])
            session = sessions.get(session_id)
            if session is not None:
                if time > session.last + timeout:  # an inactivity gap: a new session
                    del sessions[session_id]
                    self.close(session_id, session)
                    session = None
                elif time > session.last:
                    session.last = time
            if session is None:
                session = sessions[session_id] = Session(time)
                self._schedule(session_id, time + timeout)
            self._apply(session, event, session_id)

    def _resolve(self, marked: str, query_id: str | None) -> str:
        """The session of a ``SESSION_OF_QUERY`` event: its query's, if open, else its own."""
        index = self.query_sessions
        if index is None:
            index = self.query_sessions = {}
            for session_id, session in self.open.items():
                for known in _query_ids(session):
                    index[known] = session_id
        found = index.get(query_id) if query_id is not None else None
        return found if found is not None and found in self.open else marked[1:]

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
        watermark = self.clock - config.allowed_lateness
        if self.newest >= self.generation_end:
            self.seen_before, self.seen = self.seen, set()
            self.ended_before, self.ended = self.ended, {}
            self.generation_end = self.newest + config.timeout + config.allowed_lateness
        width = self.bucket_seconds
        passed = int(watermark // width)  # buckets below this have ended
        sessions, timeout, close, due = self.open, config.timeout, self.close, self.due
        # The watermark's own bucket too: every session whose end the watermark has passed
        # closes now, whichever bucket it waited in, so that what is closed is a function
        # of the open sessions and the watermark (a restored state closes the same ones).
        for bucket in sorted(b for b in due if b <= passed):
            for session_id in due.pop(bucket):
                session = sessions.get(session_id)
                if session is None:
                    continue  # closed already
                end = session.last + timeout
                if end < watermark:
                    del sessions[session_id]
                    close(session_id, session)
                else:  # active since it was scheduled: not due yet
                    self._schedule(session_id, end)
        self.next_due = (passed + 1) * self.bucket_seconds

    def close_all(self) -> None:
        """End of input: apply every waiting event, close every session, forget every id."""
        self._settle(self.waiting_events())
        self.waiting.clear()
        for session_id, session in self.open.items():
            self._end(session_id, session)  # what ``close`` keeps of it is forgotten below
        # new tables, not the old ones cleared: a caller that holds the old ones until the
        # process ends (a replay) spares freeing them one object at a time
        self.open = {}
        if self.query_sessions is not None:
            self.query_sessions = None  # no session open: a cache of nothing
        self.due.clear()
        self.seen = set()
        self.seen_before = set()
        self.ended = {}
        self.ended_before = {}

    def close(self, session_id: str, session: Session) -> None:
        self.ended[session_id] = session.last
        index = self.query_sessions
        if index is not None:
            for known in _query_ids(session):
                if index.get(known) == session_id:
                    del index[known]
        self._end(session_id, session)

    def _end(self, session_id: str, session: Session) -> None:
        """``close`` but for what it keeps to place later events (the session's end, its
        queries' session), which ``close_all`` forgets anyway."""
        if self.finished is not None:
            self._finish(session_id, session)
        if self.shown:
            for known in _query_ids(session):
                self._served(known)
        orphans = session.orphans
        if orphans:  # their query never came: counted under the session's class
            for i in range(0, len(orphans), 4):
                self._unmatched(session, orphans[i], orphans[i + 3])
        if session.queries == 0:
            if self.closed is not None:
                self.closed(session_id, False, False, False)
            return  # a session counts only if it has a query
        if self.closed is not None:
            self.closed(session_id, bool(session.flags & CLICKED),
                        bool(session.flags & SUCCESSFUL), True)
        c, counters = session.klass, self.counters
        counters.sessions[c] += 1
        if not session.flags & CLICKED:
            counters.abandoned_sessions[c] += 1
        if session.flags & SUCCESSFUL:
            counters.successful_sessions[c] += 1
        counters.queries_per_session.observe_count(c, session.queries)

    def _finish(self, session_id: str, session: Session) -> None:
        finished = self.finished
        assert finished is not None
        older = session.older
        if older:
            for i in range(0, len(older), 4):
                finished(older[i], older[i + 1], older[i + 2], session_id,
                         bool(older[i + 3] & QUERY_CLICKED))
        if session.query_id is not None:
            finished(session.query_id, session.query_class, session.query_time, session_id,
                     bool(session.flags & QUERY_CLICKED))

    # --- the counts taken on arrival (the pipeline counts queries, impressions, zero results)

    def await_impressions(self, query_id: str, text: str) -> None:
        """A query whose result list was not logged: its impressions will rebuild it."""
        self.shown[query_id] = [text, None, None, {}]

    def _served(self, query_id: str) -> None:
        """A query leaves its session's memory: its rebuilt served list (if its results were
        not logged and impressions showed some) goes to the qrels join."""
        entry = self.shown.pop(query_id, None)
        if entry is None:
            return
        text, klass, time, docs = entry
        if klass is not None and docs and self.served is not None:
            self.served(klass, time, text, [doc for _, doc in sorted(docs.items())])

    def found_results(self, query_id: str, session_id: str, time: float) -> None:
        """A query counted as zero-result had results after all (another record of its
        search had hits): it is no longer one, waiting or applied (a click on it is then no
        click on a zero-result query)."""
        bucket = self.waiting.get(int(time // self.settle_step))
        for i, event in enumerate(bucket or ()):
            if event[1] == QUERY and event[4] == query_id and event[6] == ZERO:
                bucket[i] = (*event[:6], None)  # type: ignore[index]
                return
        session = self.open.get(session_id)
        if session is None:
            return  # closed: what the flag decided is counted
        if session.query_id == query_id:
            session.flags &= ~ZERO_RESULTS
            return
        older = session.older
        found = _find(older, query_id)
        if found >= 0 and older is not None:
            older[found + 3] &= ~ZERO_RESULTS

    def count_latency(self, klass: int, seconds: float) -> None:
        self.counters.query_latency.observe(klass, seconds)

    # --- events applied to their session, in event time order ------------------------------

    def _apply(self, session: Session, event: Accepted, session_id: str) -> None:
        time, kind, _, _, query_id, a, b = event
        if kind == QUERY:
            assert query_id is not None, "a query has an id"
            if b is None:  # results logged, not zero: the common case
                self._query(session, a, query_id, time, False, session_id)
            else:  # UNKNOWN, ZERO or UNKNOWN_ZERO
                self._query(session, a, query_id, time, b != ZERO, session_id, b != UNKNOWN)
        elif kind == CLICK:
            session.flags |= CLICKED | CLICK_AFTER
            if b is not None and b >= self._success_dwell_ms:  # type: ignore[operator]
                session.flags |= SUCCESSFUL
            if query_id is None or not self._credit_click(session, query_id, time, a):
                self._orphan(session, CLICK, query_id, time, a)
        elif kind == IMPRESSION:
            if not self._credit_impression(session, query_id):
                self._orphan(session, IMPRESSION, query_id, time, a)
            elif a and type(b) is str and query_id in self.shown:
                self.shown[query_id][3].setdefault(a, b)
        elif kind == DWELL:
            if b is not None and b >= self._success_dwell_ms:  # type: ignore[operator]
                session.flags |= SUCCESSFUL
        else:
            session.flags |= SUCCESSFUL
            klass = self._query_class(session, query_id)
            if klass is None:
                self._orphan(session, CONVERSION, query_id, time, 0)
            else:
                self.counters.conversions[klass] += 1
            if self.converted is not None:
                self.converted(session_id)

    def _query(
        self, session: Session, klass: int, query_id: str, time: float, unknown: bool,
        session_id: str, zero: bool = False,
    ) -> None:
        if session.queries == 0:
            session.klass = klass
        else:
            # the previous query was reformulated: no click after it, soon followed
            if (
                not session.flags & CLICK_AFTER
                and 0 <= time - session.query_time <= self._reformulation_window
            ):
                self.counters.reformulated_queries[session.query_class] += 1
            older = session.older
            if older is None:
                older = session.older = []
            older += (session.query_id, session.query_class, session.query_time,
                      session.flags & QUERY_BITS)
            if len(older) >= self._older_slots:
                forgotten = older[0]
                if self.finished is not None:
                    self.finished(forgotten, older[1], older[2], session_id,
                                  bool(older[3] & QUERY_CLICKED))
                del older[:4]
                if self.shown and forgotten not in _query_ids(session):
                    self._served(forgotten)
                index = self.query_sessions
                if index is not None and index.get(forgotten) == session_id and (
                    forgotten not in _query_ids(session) and forgotten != query_id
                ):
                    del index[forgotten]
        session.queries += 1
        session.query_id = query_id
        session.query_class = klass
        session.query_time = time
        session.flags &= ~QUERY_BITS
        if zero:
            session.flags |= ZERO_RESULTS
        if unknown:
            session.flags |= RESULTS_UNKNOWN
            entry = self.shown.get(query_id)
            if entry is not None:
                entry[1], entry[2] = klass, time
        if self.query_sessions is not None:
            self.query_sessions[query_id] = session_id
        if session.orphans:
            self._adopt(session, query_id)

    def _query_class(self, session: Session, query_id: str | None) -> int | None:
        """The class a conversion counts under: its query's, or without a query id the
        session's; None while that is unknown."""
        if query_id is None:
            return session.klass if session.queries else None
        if query_id == session.query_id:
            return session.query_class
        found = _find(session.older, query_id)
        return session.older[found + 1] if found >= 0 and session.older else None

    def _credit_impression(self, session: Session, query_id: str | None) -> bool:
        """Count a shown result under its query when the query's results were not logged
        (else its list counted them); False when the session does not know the query."""
        if query_id is None:
            return False
        if session.query_id == query_id:
            klass, flags = session.query_class, session.flags
        else:
            older = session.older
            found = _find(older, query_id)
            if found < 0 or older is None:
                return False
            klass, flags = older[found + 1], older[found + 3]
        if flags & RESULTS_UNKNOWN:
            self.counters.result_impressions[klass] += 1
        return True

    def _credit_click(
        self, session: Session, query_id: str | None, time: float, position: int
    ) -> bool:
        """Count a click under its query; False when the session does not know the query."""
        if session.query_id == query_id:
            klass = session.query_class
            flags = session.flags
            session.flags |= QUERY_CLICKED
            delay = time - session.query_time
        else:
            older = session.older
            found = _find(older, query_id)
            if found < 0 or older is None:
                return False
            klass = older[found + 1]
            flags = older[found + 3]
            older[found + 3] |= QUERY_CLICKED
            delay = time - older[found + 2]
        first = not flags & QUERY_CLICKED
        if first and flags & ZERO_RESULTS:
            self.counters.clicked_zero_result_queries[klass] += 1
        if self.clicked is not None and query_id is not None:
            self.clicked(query_id, position)
        if first and self.first_click is not None and delay >= 0 and query_id is not None:
            self.first_click(query_id, delay)
        self._count_click(klass, position, first, delay)
        return True

    def _count_click(self, klass: int, position: int, first: bool, delay: float) -> None:
        counters = self.counters
        if first:
            counters.clicked_queries[klass] += 1
            if position:  # 0: a click without a rank (UBI: screen coordinates only)
                counters.first_click_reciprocal_rank.observe(klass, 1.0 / position)
            if delay >= 0:
                counters.time_to_first_click.observe(klass, delay)
        counters.clicks[klass] += 1
        if position:
            counters.click_position.observe_count(klass, position)

    def _orphan(
        self, session: Session, kind: int, query_id: str | None, time: float, position: int
    ) -> None:
        """A click or conversion whose query the session has not seen: it waits for it
        (a query stamped a little after its click, by another clock) until the session
        closes; beyond ``recent_queries`` waiting, the oldest counts as unmatched now."""
        orphans = session.orphans
        if orphans is None:
            orphans = session.orphans = []
        orphans += (kind, query_id, time, position)
        if len(orphans) > self._orphan_slots:
            kind, _, _, position = orphans[:4]
            del orphans[:4]
            self._unmatched(session, kind, position)

    def _adopt(self, session: Session, query_id: str) -> None:
        """The clicks and conversions that waited for this query count under it now."""
        orphans = session.orphans
        assert orphans is not None
        rest: list[Any] = []
        for i in range(0, len(orphans), 4):
            kind, waited_for, time, position = orphans[i:i + 4]
            if waited_for != query_id:
                rest += (kind, waited_for, time, position)
            elif kind == CLICK:
                self._credit_click(session, query_id, time, position)
            elif kind == IMPRESSION:
                self._credit_impression(session, query_id)
            else:
                self.counters.conversions[session.query_class] += 1
        session.orphans = rest or None

    def _unmatched(self, session: Session, kind: int, position: int) -> None:
        self.unmatched_events += 1
        if kind == CLICK:
            self.unmatched_clicks += 1
            self._count_click(session.klass, position, False, -1.0)
        elif kind == IMPRESSION:  # shown, for a query never seen: counted as shown
            self.counters.result_impressions[session.klass] += 1
        else:
            self.counters.conversions[session.klass] += 1


def _query_ids(session: Session) -> list[str]:
    """The ids of the queries a session remembers (one list, sliced in C)."""
    ids = session.older[::4] if session.older else []
    if session.query_id is not None:
        ids.append(session.query_id)
    return ids


def _find(older: list[Any] | None, query_id: str | None) -> int:
    """Index of ``query_id``'s four slots among a session's older queries, newest first; -1."""
    if older:
        for i in range(len(older) - 4, -1, -4):
            if older[i] == query_id:
                return i
    return -1

