"""The compiled parts' snapshots as plain data: what their ``snapshot()`` returns and their
``restore()`` takes, what the state codec validates and writes (``monitor.state``), what the
query lists show beyond the process.

They are kept apart from the parts because those are compiled (``monitor.compiled``) and these
are read by their annotations (pydantic, the codec): a class compiled keeps no annotation
precise enough for that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.core.experiments import ExperimentsState
from monitor.core.judged import JudgedState
from monitor.core.snapshots import Float, Int


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


@dataclass(frozen=True)
class SessionsState:
    """``Sessions`` as plain data: one column per ``Session`` field, ``older`` flat four slots
    per query (id, class, time, flags), ``orphans`` flat four slots per event (kind, query id,
    time, position), the accepted events not applied yet as columns, times in epoch seconds
    (null: nothing seen yet)."""

    ids: list[str]
    first: list[Float]
    last: list[Float]
    klass: list[Int]
    queries: list[Int]
    flags: list[Int]
    query_id: list[str | None]
    query_class: list[Int]
    query_time: list[Float]
    older: list[list[str | Int | Float | None]]
    orphans: list[list[str | Int | Float | None]]
    waiting: WaitingState
    newest: Float | None
    seen: list[str]
    seen_before: list[str]
    ended: dict[str, Float]
    ended_before: dict[str, Float]
    generation_end: Float | None
    next_due: Float | None
    next_settle: Float | None
    unmatched_clicks: Int
    floor: Float | None
    """The wall clock the watermark followed while the partition was idle (None: never)."""
    unmatched_events: Int
    shown: dict[str, ShownState] = field(default_factory=dict)


@dataclass(frozen=True)
class ShownState:
    """A query whose result list was not logged: its text, class and time once applied, and
    the documents its impressions showed, by position."""

    text: str
    klass: Int | None
    time: Float | None
    docs: list[tuple[Int, str]]


@dataclass(frozen=True)
class WaitingState:
    """Accepted events not yet applied (``Accepted``), as columns."""

    time: list[Float]
    kind: list[Int]
    event_id: list[str]
    session_id: list[str]
    query_id: list[str | None]
    a: list[Int]
    b: list[Float | str | None]


@dataclass(frozen=True)
class SlicesState:
    """The class names (``QueryClasses``), each dimension's members with their first event
    time (null: configured), the label values of each slice index, and those of each index
    of the query lists (the class and the ``list_dimensions``)."""

    classes: list[str]
    dimensions: list[str]
    values: list[list[str]]
    first: list[list[Float | None]]
    slices: list[list[str]]
    list_dimensions: list[str]
    lists: list[list[str]]
    class_first: list[Float | None]
    """Per class name: the first event time of a learned member (None: a member for good,
    or one of ``classes_out``)."""
    classes_out: list[str]
    """Learned classes outside the set: pending, or that lost their place to earlier ones."""
    hidden: list[list[str] | None]
    """Per slice: the label values it has once its values relabelled ``other`` are back
    (None: none is)."""
    pending: list[list[str]]
    """Per dimension: the values outside its full set that may still join it."""
    pending_first: list[list[Float]]


@dataclass(frozen=True)
class SpaceSavingState:
    """A ``SpaceSaving`` (``monitor.core.heavy``): the kept keys with their counts
    (overestimates) and errors, by count descending."""

    keys: list[str]
    counts: list[Int]
    errors: list[Int]


@dataclass(frozen=True)
class HeavyQueriesState:
    """A ``HeavyQueries`` (``monitor.core.heavy``): the counts, and per kept key (in the same
    order) its hashed session ids, sorted."""

    counts: SpaceSavingState
    sessions: list[list[Int]]


@dataclass(frozen=True)
class TallyState:
    searches: HeavyQueriesState
    zero: HeavyQueriesState
    outcomes: HeavyQueriesState
    clicked: list[Int]
    """Per key of ``outcomes``, in its order: the searches counted there that got a click."""


@dataclass(frozen=True)
class BucketState:
    window: Float
    index: Int
    classes: list[Int]
    tallies: list[TallyState]


@dataclass(frozen=True)
class QueryListsState:
    """The tallies by window, bucket and class index, and the queries waiting for their
    outcome (id and key)."""

    settings: str
    buckets: list[BucketState]
    open_ids: list[str]
    open_keys: list[str]


@dataclass(frozen=True)
class PublicSummary:
    """A summary with only the queries that may be shown, and no session ids: the true count
    of a query lies in ``[count - error, count]``; one not kept occurred at most ``unseen``
    times. One kept but not shown (too few sessions) is not bounded: ``public``."""

    keys: list[str]
    counts: list[Int]
    errors: list[Int]
    unseen: Int


@dataclass(frozen=True)
class PublicTally:
    """A window's tally as it may leave the process (``/queries/state``): what the lists
    show, and what merges with other replicas'."""

    searches: PublicSummary
    zero: PublicSummary
    outcomes: PublicSummary
    clicked: list[Int]
    """Per key of ``outcomes``: the searches counted there that got a click."""


@dataclass(frozen=True)
class HealthState:
    accepted: Int
    rejected: dict[str, Int]
    ignored_actions: Int
    judged_messages: Int
    reused_query_ids: Int
    impressions_without_position: Int
    merged_query_records: Int
    folded_values: dict[str, Int]
    unlisted_queries: Int


@dataclass(frozen=True)
class PipelineState:
    """A pipeline as plain data: the slices (the other parts refer to them by index), the
    online counters, the open sessions, the daemon's own counters, the offline state."""

    classes: SlicesState
    counters: CountersState
    sessions: SessionsState
    health: HealthState
    judged: JudgedState
    queries: QueryListsState | None
    """The query lists (None: disabled when it was taken)."""
    versions: dict[str, Int]
    """The version of each part's snapshot (``Pipeline.PARTS``): the codec migrates a part
    whose version is older than its class's ``VERSION``."""
    experiments: ExperimentsState | None = None
    """The experiments (None: none configured, or a state from before they existed)."""
