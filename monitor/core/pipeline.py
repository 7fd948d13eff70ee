"""The one place that wires the parts: decode -> classify -> sessionize -> counters.

Sources (a file, Kafka) hand every message's bytes to ``Pipeline.feed``; the exporter reads
the state at scrape time. Nothing here does I/O or reads the clock.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, cast

from monitor.config import Config
from monitor.core.classes import ALL, NEW, OTHER, QueryClasses, normalise
from monitor.core.experiments import Experiments
from monitor.core.implicit import Implicit, ImplicitLabels
from monitor.core.judged import OVERALL, Judged
from monitor.core.online import (
    CLICK,
    CONVERSION,
    DWELL,
    IMPRESSION,
    QUERY,
    UNKNOWN,
    UNKNOWN_ZERO,
    ZERO,
    Accepted,
    OnlineCounters,
    Sessions,
)
from monitor.core.querylists import QueryLists
from monitor.core.slices import Slice, Slices
from monitor.core.snapshots import Layout, Migration, Stateful, require
from monitor.core.states import HealthState, PipelineState
from monitor.inputs.chain import DecoderChain
from monitor.inputs.events import (
    SESSION_OF_QUERY,
    ClickEvent,
    DwellEvent,
    IgnoredAction,
    ImpressionEvent,
    JudgedMessage,
    Live,
    QueryEvent,
    Reason,
    Rejection,
)
from monitor.inputs.native import cut_text, dimensions, read_names
from monitor.inputs.ubi import QUERY_EVENT

log = logging.getLogger(__name__)

FAILURES_LOGGED = 10
"""Messages a step failed on that are logged with their traceback (per pipeline)."""


SEARCHES_KEPT = 8192
"""UBI searches remembered with their results, for the records of a search that come after
its first (they come within seconds: the front end logs one search as several requests)."""


@dataclass(slots=True)
class _Search:
    """A UBI search counted: where it counted, and the results of its records so far (None:
    not logged)."""

    klass: int
    time: float
    session_id: str
    text: str
    zero: bool
    shown: set[str] | None


QUERY_IDS_KEPT = 65536
"""Query ids remembered (with their session and text) to see one reused, at most (in two
generations of half as many): a cache, in memory only (a reuse across a restart is not
seen)."""


def _health_1_to_2(document: Any) -> Any:
    """Version 1 counted no data-quality signal: they start at 0."""
    if isinstance(document, dict):
        document["reused_query_ids"] = document["impressions_without_position"] = 0
    return document


def _health_2_to_3(document: Any) -> Any:
    """Version 2 merged no query record into its search: none so far."""
    if isinstance(document, dict):
        document["merged_query_records"] = 0
    return document


def _health_3_to_4(document: Any) -> Any:
    """Version 3 had no dimension: no value folded into ``other``."""
    if isinstance(document, dict):
        document["folded_values"] = {}
    return document


def _health_4_to_5(document: Any) -> Any:
    """Version 4 did not count the queries that logged no result list: none so far."""
    if isinstance(document, dict):
        document["unlisted_queries"] = 0
    return document


class Health:
    """The daemon's own counters (``searchmon_*``), the data-quality ones among them."""

    VERSION: ClassVar[int] = 5
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {
        1: _health_1_to_2, 2: _health_2_to_3, 3: _health_3_to_4, 4: _health_4_to_5,
    }
    """A reason added since starts at 0 without one."""

    def __init__(
        self, accepted: int = 0, rejected: dict[Reason, int] | None = None,
        ignored_actions: int = 0, judged_messages: int = 0, reused_query_ids: int = 0,
        impressions_without_position: int = 0, merged_query_records: int = 0,
        folded_values: dict[str, int] | None = None, unlisted_queries: int = 0,
    ) -> None:
        self.accepted = accepted
        self.rejected = rejected if rejected is not None else dict.fromkeys(Reason, 0)
        self.ignored_actions = ignored_actions
        self.judged_messages = judged_messages
        self.reused_query_ids = reused_query_ids
        """Queries whose query_id came before with another session or text."""
        self.impressions_without_position = impressions_without_position
        self.merged_query_records = merged_query_records
        """UBI query records of a search already counted (same query id, session and
        text)."""
        self.folded_values = folded_values if folded_values is not None else {}
        """Per dimension: queries whose value counted as ``other`` (outside the closed
        set)."""
        self.unlisted_queries = unlisted_queries
        """Queries counted without their result list (``results_known`` false, a UBI query
        record without hit ids)."""

    @property
    def events_read(self) -> int:
        """Every message fed: accepted, rejected, ignored, merged or judged."""
        return self.accepted + sum(self.rejected.values()) + self.ignored_actions + (
            self.judged_messages + self.merged_query_records
        )

    def snapshot(self) -> HealthState:
        return HealthState(
            self.accepted, {reason.value: n for reason, n in self.rejected.items()},
            self.ignored_actions, self.judged_messages, self.reused_query_ids,
            self.impressions_without_position, self.merged_query_records,
            dict(self.folded_values), self.unlisted_queries,
        )

    @classmethod
    def restore(cls, layout: Layout, state: HealthState) -> Health:
        require(set(state.rejected) <= {r.value for r in Reason}, "health: an unknown reason")
        rejected = dict.fromkeys(Reason, 0)
        rejected.update({Reason(name): n for name, n in state.rejected.items()})
        return cls(state.accepted, rejected, state.ignored_actions, state.judged_messages,
                   state.reused_query_ids, state.impressions_without_position,
                   state.merged_query_records, dict(state.folded_values),
                   state.unlisted_queries)


@dataclass(slots=True)
class LiveQuery:
    """A live query forwarded to the pipeline holding the offline state (by its slice's
    label values: the holder's slice indexes are its own)."""

    slice: Slice
    time: float
    text: str
    results: list[str]


Forwarded = LiveQuery | JudgedMessage | ImplicitLabels
Read = tuple[Accepted, Live] | JudgedMessage
"""A message ``Pipeline.read`` decoded and validated, for ``Pipeline.admit``."""


class Pipeline:
    """Turns messages into online counters by query class."""

    PARTS: ClassVar[tuple[tuple[str, type[Stateful[Any]]], ...]] = (
        ("classes", Slices), ("counters", OnlineCounters), ("sessions", Sessions),
        ("health", Health), ("judged", Judged), ("queries", QueryLists),
        ("experiments", Experiments),
    )
    """The stateful parts: the field of ``PipelineState`` each snapshot is kept in, and its
    class (``snapshot()``, ``restore(layout, snapshot)``, ``VERSION``, ``MIGRATIONS``). The
    slices (query classes and dimension values) come first: the others refer to them by
    index."""

    def __init__(self, config: Config, decoders: DecoderChain | None = None) -> None:
        self.config = config
        self.decoders = decoders if decoders is not None else DecoderChain(config)
        """Bytes to events: the input formats of ``[input] formats``."""
        self._max_chars = config.input.max_query_chars
        self.slices = Slices.from_config(
            QueryClasses.from_config(config.query_classes), config.slices,
            config.query_lists.dimensions,
        )
        self._dimensions = tuple(config.slices.dimensions)
        names = read_names(config)
        self._dimensions_of = dimensions(names) if names else None
        self._sliced = len(names) > len(self._dimensions)  # values beyond the slices'
        self.experiments = Experiments.from_config(config.experiments)
        """The A/B experiments, and team-draft interleaving (its sessions' hooks only while
        ``active``)."""
        self._experiment_at = [names.index(e.attribute) for e in config.experiments]
        self._read_values: tuple[object, tuple[str, ...]] = (None, ())
        """The query ``read`` last read values of, and them: ``admit`` takes them again."""
        self._values = self._dimensions_of.values if self._dimensions_of else None
        """How a query's dimension values are read (``values``) by the decoders' rule."""
        self._sliced_query = self._dimensions_of.query if self._dimensions_of else QueryEvent
        """The query struct of the native decoder's fast path (``QueryEvent`` itself, or a
        subclass with the dimensions' top-level fields)."""
        self.counters = OnlineCounters()
        for _ in self.slices.names:
            self.counters.add_class()
        self.sessions = Sessions(config.sessions, self.counters)
        self.health = Health()
        self.judged = Judged(config.offline)
        self.lists = QueryLists(config.query_lists) if config.query_lists.enabled else None
        self._query_ids: dict[str, int] = {}
        """Recent query ids: a hash of their session and text (only the hash, so that the
        memory keeps no text alive). Two generations of ``QUERY_IDS_KEPT / 2`` ids each:
        this one, and ``_query_ids_before``, which it replaces when full (the last 32,768
        to 65,536 ids are known; no id is looked up again to be forgotten)."""
        self._query_ids_before: dict[str, int] = {}
        self.implicit = Implicit(
            config.implicit, config.query_lists.min_sessions,
            self.lists.key if self.lists is not None else normalise,
        ) if config.implicit.enabled else None
        """Labels from clicks (``[implicit]``): a click model fitted every interval."""
        self._searches: OrderedDict[str, _Search] = OrderedDict()
        """Recent UBI searches (``SEARCHES_KEPT``, oldest out), for the records of a search
        that come after its first: in memory only, like ``_query_ids``."""
        self._wire()
        self.forwarding = False
        """Set by the orchestrator when another pipeline holds the offline state: judged
        messages and live queries then wait in ``forwarded`` for ``forward_to``."""
        self.forward_live = False
        """While ``forwarding``: whether live queries are forwarded too (the holder is
        joining live queries: it has seen a judgment or qrels message)."""
        self.forwarded: list[Forwarded] = []

    def feed(self, data: bytes) -> Rejection | None:
        """Account for one message; returns its rejection, if it was rejected."""
        read = self.read(data)
        if read is None or type(read) is Rejection:
            return read
        return self.admit(read)

    def feed_part(
        self, numbers: list[int], values: list[bytes | None], start: int, position: Any,
        holder: Pipeline | None,
    ) -> list[tuple[int, Rejection]]:
        """``feed`` each record of a partition's batch from index ``start`` (a value of None
        reads as an empty message), in one compiled loop: the state process's. Writes each
        record's offset to ``position[1]`` as it is taken (read by the other process when a
        batch stalls), hands what ``forwarding`` holds back to ``holder`` after each record,
        and returns the rejections with the index of their record."""
        rejected: list[tuple[int, Rejection]] = []
        for index in range(start, len(numbers)):
            position[1] = numbers[index]
            value = values[index]
            rejection = self.feed(value if value is not None else b"")
            if rejection is not None:
                rejected.append((index, rejection))
            if self.forwarded:
                self.forward_to(holder)
        return rejected

    def read(self, data: bytes, hint: str | None = None) -> Read | Rejection | None:
        """One message decoded and validated: what to ``admit``, or its rejection, or None
        for an ignored action (both counted here). ``hint``: the index a ``_bulk`` export
        says the document comes from. Never raises for a message: a step that fails on one
        (a defect) rejects it as ``unprocessable``."""
        try:
            decoded = self.decoders.read(data, hint)
            if type(decoded) is not tuple:
                if type(decoded) is Rejection:
                    self.health.rejected[decoded.reason] += 1
                    return decoded
                if type(decoded) is IgnoredAction:
                    self.health.ignored_actions += 1
                    return None
                return decoded  # type: ignore[return-value]  # a judged message
            time: float
            event: Live
            time, event = decoded  # type: ignore[assignment, misc]  # a live event and its time
            kind = type(event)
            if kind is QueryEvent or kind is self._sliced_query:
                if TYPE_CHECKING:  # a query (``cast`` is a call: not per event)
                    event = cast(QueryEvent, event)
                declared = event.query_class
                if self._plain:
                    klass = self._class_index.get(declared) if declared is not None else None
                    given: tuple[str, ...] = ()
                else:
                    given = self._values(event) if self._values is not None else ()
                    if self._sliced:  # the experiments' values too: kept for ``admit``
                        self._read_values = (event, given)
                        given = given[:len(self._dimensions)]
                    klass = None if declared is None else self._slice_index.get(
                        (declared, *given)
                    )
                if klass is None:  # NEW (joining a set) only once the query is accepted
                    klass = self.slices.locate(
                        declared, cut_text(event.query_text, self._max_chars), given, time,
                        self.sessions.watermark, add=False,
                    )
                count = event.result_count
                if count is not None:
                    zero = count == 0
                else:
                    zero = not event.result_ids and event.results_known
                if event.results_known:
                    results = ZERO if zero else None
                else:
                    results = UNKNOWN_ZERO if zero else UNKNOWN
                return (
                    time, QUERY, event.event_id, event.session_id, event.query_id, klass,
                    results,
                ), event
            if event.session_id[:1] == SESSION_OF_QUERY:  # resolved through its query (UBI)
                self.sessions.resolving = True
            if type(event) is ClickEvent:
                return (
                    time, CLICK, event.event_id, event.session_id, event.query_id, event.position,
                    event.dwell_ms,
                ), event
            if type(event) is ImpressionEvent:
                return (
                    time, IMPRESSION, event.event_id, event.session_id, event.query_id,
                    event.position, event.doc_id,
                ), event
            if type(event) is DwellEvent:
                return (
                    time, DWELL, event.event_id, event.session_id, event.query_id, 0,
                    event.dwell_ms,
                ), event
            return (
                time, CONVERSION, event.event_id, event.session_id, event.query_id, 0, None,
            ), event
        except Exception as error:  # one message never stops the pipeline
            return self._unprocessable(error, self.health.accepted)

    def admit(self, read: Read) -> Rejection | None:
        """Hand what ``read`` returned to the sessions (or the offline state); returns the
        rejection, if the sessions refuse it (or ``unprocessable``: a step failed on it)."""
        before = self.health.accepted
        try:
            if type(read) is JudgedMessage:
                if read.time > self.sessions.horizon:  # it would move the offline clock ahead
                    self.health.rejected[Reason.FUTURE_TIMESTAMP] += 1
                    return self._future(read.event["timestamp"])
                self.health.judged_messages += 1
                if self.forwarding:
                    self.forwarded.append(read)
                else:
                    self._apply(read)
                return None
            accepted, event = read
            sessions = self.sessions
            query = accepted[1] == QUERY
            checked = False  # whether ``refuses`` has looked for a duplicate already
            if query:
                if TYPE_CHECKING:  # a query (``cast`` is a call: not per event)
                    event = cast(QueryEvent, event)
                # each field read once (a struct's attribute is a lookup by name; the session
                # and event ids are in the accepted tuple)
                query_id, query_text = event.query_id, event.query_text
                # the search (session and text) and what the recent query ids hold for its id
                seen = hash((accepted[3], query_text))
                known = self._query_ids.get(query_id)
                if known is None:
                    known = self._query_ids_before.get(query_id)
                ubi = accepted[2].startswith(QUERY_EVENT)  # a UBI record: more may come
                if ubi and known == seen:
                    # another record of a UBI search counted already: merged into it
                    reason = sessions.refuses(accepted)
                    if reason is not None:
                        return self._reject(reason, event)
                    sessions.remember(accepted[2])
                    self.health.merged_query_records += 1
                    if event.result_ids:
                        self._merge_results(event)
                    return None
                if accepted[5] == NEW:
                    reason = sessions.refuses(accepted)
                    if reason is not None:
                        return self._reject(reason, event)
                    klass = self.slices.locate(
                        event.query_class, cut_text(query_text, self._max_chars),
                        self._given(event), accepted[0], sessions.watermark,
                    )
                    self.grow()
                    accepted = (accepted[0], accepted[1], accepted[2], accepted[3], accepted[4],
                                klass, accepted[6])
                    checked = True
            reason = sessions.offer(accepted, checked)
            if reason is not None:
                return self._reject(reason, event)
            self.health.accepted += 1
            if self.implicit is not None and accepted[1] <= CLICK:  # query, impression, click
                fitted = self.implicit.add(accepted[0], event)
                if fitted is not None:
                    log.info("implicit judgments: %s fitted on %d results shown: %d queries "
                             "labelled (%d events past max_searches left out, %d clicks "
                             "without their search)",
                             self.config.implicit.model, fitted.shown, len(fitted.labels),
                             fitted.left_out, fitted.unmatched)
                    self._implicit_labels(fitted)
            if query:
                if TYPE_CHECKING:  # a query (``cast`` is a call: not per event)
                    event = cast(QueryEvent, event)
                ids = self._query_ids  # unchanged since ``known`` was read above
                if known is None:
                    if len(ids) >= QUERY_IDS_KEPT // 2:
                        self._query_ids_before, ids = ids, {}
                        self._query_ids = ids
                    ids[query_id] = seen
                elif known != seen:
                    self.health.reused_query_ids += 1
                    ids[query_id] = seen
                klass = accepted[5]
                if accepted[0] < self.slices.latest_first:  # before a set member's first
                    self.slices.saw(klass, accepted[0])
                if ubi:
                    self._search(event, klass, accepted)
                counters = self.counters
                counters.queries[klass] += 1
                if self._dimensions and OTHER in self._names[klass]:
                    folded = self.health.folded_values
                    for name in self.slices.folded(klass, self._given(event)):
                        folded[name] = folded.get(name, 0) + 1
                results = event.result_ids
                counters.result_impressions[klass] += len(results)
                zero = accepted[6] in (ZERO, UNKNOWN_ZERO)  # as ``read`` found it
                if zero:
                    counters.zero_result_queries[klass] += 1
                if self.lists is not None:
                    self.lists.searched(klass, accepted[0], query_id, query_text, accepted[3], zero)
                if self._experiment_at:
                    assert self._values is not None, "experiments read attributes"
                    last, values = self._read_values
                    if last is not event:  # not the event read last (read ahead, or plain)
                        values = self._values(event)
                    self.experiments.searched(
                        [values[i] for i in self._experiment_at], query_id,
                        accepted[3], event.user_id or event.client_id, zero, accepted[0],
                    )
                teams = event.result_teams
                if teams is not None:
                    self.experiments.interleave(query_id, teams)
                    if self.sessions.clicked is None:
                        self._wire()
                latency = event.latency_ms
                if latency is not None:
                    sessions.count_latency(klass, latency / 1000.0)
                text = query_text
                if len(text) > self._max_chars:
                    text = cut_text(text, self._max_chars)
                if event.results_known:
                    if self.forward_live if self.forwarding else self.judged.active:
                        self._join_live(klass, accepted[0], text, results)
                else:  # its impressions will say what was shown
                    sessions.await_impressions(query_id, text)
                    self.health.unlisted_queries += 1
            elif type(event) is ImpressionEvent and not event.position:
                self.health.impressions_without_position += 1
            return None
        except Exception as error:  # one message never stops the pipeline
            return self._unprocessable(error, before)

    def _search(self, event: QueryEvent, klass: int, accepted: Accepted) -> None:
        """Remember a UBI search counted, for the records of it still to come."""
        searches = self._searches
        if len(searches) >= SEARCHES_KEPT:
            searches.popitem(last=False)  # (a dict emptied from its front slows down)
        searches[event.query_id] = _Search(
            klass, accepted[0], event.session_id, event.query_text, accepted[6] == ZERO,
            set(event.result_ids) if event.results_known else None,
        )

    def _merge_results(self, event: QueryEvent) -> None:
        """Another record of a search counted: its results are the union of its records',
        and it found nothing only if no record had hits (a search that found nothing
        becomes one that found something, in every count that took it as zero-result)."""
        search = self._searches.get(event.query_id)
        if search is None:
            return  # forgotten
        shown = search.shown
        if shown is None:  # the first record did not log its hits: this one does
            if not event.results_known:
                return  # nor this one: its impressions count
            shown = search.shown = set()  # (counted unlisted still: a counter never drops)
        new = [doc for doc in event.result_ids if doc not in shown]
        if not new:
            return
        shown.update(new)
        klass = search.klass
        self.counters.result_impressions[klass] += len(new)
        if search.zero:
            search.zero = False
            self.counters.zero_result_queries[klass] -= 1
            self.sessions.found_results(event.query_id, search.session_id, search.time)
            if self.lists is not None:
                self.lists.found_results(klass, search.time, search.text)
            self.experiments.found_results(event.query_id)

    def _finished(
        self, query_id: str, klass: int, time: float, session_id: str, clicked: bool
    ) -> None:
        """A query left its session's memory: to the query lists and the experiments."""
        if self.lists is not None:
            self.lists.finished(query_id, klass, time, session_id, clicked)
        self.experiments.finished(query_id, clicked)

    def _given(self, event: QueryEvent) -> tuple[str, ...]:
        """A query's values of the ``[slices]`` dimensions (none without dimensions)."""
        if self._values is None:
            return ()
        given = self._values(event)
        return given[:len(self._dimensions)] if self._sliced else given

    def _unprocessable(self, error: Exception, accepted: int) -> Rejection:
        """A message some step failed on: counted once, as rejected (not also as accepted,
        whatever the step had done before failing), with the failure logged in full for
        the first ``FAILURES_LOGGED``."""
        health = self.health
        health.accepted = accepted
        health.rejected[Reason.UNPROCESSABLE] += 1
        if health.rejected[Reason.UNPROCESSABLE] <= FAILURES_LOGGED:
            log.error("a message made the pipeline fail; rejected as unprocessable",
                      exc_info=error)
        return Rejection(Reason.UNPROCESSABLE, f"{type(error).__name__}: {error}"[:300])

    def _implicit_labels(self, fitted: ImplicitLabels) -> None:
        """A click model's labels, to the judged state here or where it is held; live
        queries are joined from then on."""
        if self.forwarding:
            self.forwarded.append(fitted)
        else:
            self._store_implicit(fitted)

    def _store_implicit(self, fitted: ImplicitLabels) -> None:
        self.judged.store_implicit(fitted.labels)
        if fitted.labels:
            self.judged.active = True
            self.judged.advance(fitted.time)

    def _join_live(self, klass: int, time: float, text: str, results: list[str]) -> None:
        """A live query's served list, for the qrels join (here or where it is held)."""
        if not self.forwarding:
            judged = self.judged
            if judged.active:
                judged.live_query(time, klass, text, results)
        elif self.forward_live:
            self.forwarded.append(LiveQuery(self.slices.names[klass], time, text, results))

    def _wire(self) -> None:
        """Connect the parts: the sessions count into the counters and hand served lists to
        the qrels join and finished queries to the lists; judged texts are redacted as the
        lists' keys."""
        slices = self.slices
        self._class_index = slices.classes.index
        self._slice_index = slices.index
        self._names = slices.names
        self._plain = slices.plain
        self.sessions.counters = self.counters
        self.sessions.served = self._join_live
        if self.lists is not None:
            self.lists.of = slices.lists  # slice index -> index of its lists
            self.sessions.finished = self.lists.finished
            self.judged.show = self.lists.key  # judged keys are normalised: this redacts
        experiments = self.experiments
        if experiments.active:
            self.sessions.finished = self._finished
            self.sessions.first_click = experiments.first_click
            self.sessions.closed = experiments.closed
            self.sessions.converted = experiments.converted
            self.sessions.clicked = experiments.clicked

    def snapshot(self) -> PipelineState:
        return PipelineState(
            self.slices.snapshot(), self.counters.snapshot(), self.sessions.snapshot(),
            self.health.snapshot(), self.judged.snapshot(),
            self.lists.snapshot() if self.lists is not None else None,
            {name: part.VERSION for name, part in self.PARTS},
            self.experiments.snapshot(),
        )

    @classmethod
    def restore(cls, config: Config, state: PipelineState) -> Pipeline:
        """The pipeline ``state`` describes, under ``config`` (the one it was taken with):
        each part restored from its snapshot (``PARTS``); raises ``StateError`` when the
        parts do not fit together."""
        require(state.versions == {name: part.VERSION for name, part in cls.PARTS},
                "pipeline state: parts of other versions (not migrated)")
        layout = Layout(config, len(state.classes.slices))
        pipeline = cls(config)
        pipeline.slices = Slices.restore(layout, state.classes)
        pipeline.counters = OnlineCounters.restore(layout, state.counters)
        pipeline.sessions = Sessions.restore(layout, state.sessions)
        pipeline.health = Health.restore(layout, state.health)
        pipeline.judged = Judged.restore(layout, state.judged)
        if pipeline.lists is not None and state.queries is not None:
            if pipeline.slices.lists_restarted:
                log.warning("the query lists were kept by other dimensions ([query_lists] "
                            "dimensions): they start over")
            else:
                pipeline.lists = QueryLists.restore(
                    Layout(config, len(pipeline.slices.list_names)), state.queries
                )
        pipeline.experiments = Experiments.restore(layout, state.experiments)
        pipeline._wire()
        return pipeline

    def idle(self, now: float) -> bool:
        """The partition is read to its end and quiet: its watermark follows the wall clock
        ``now`` (``Sessions.idle``). Returns whether anything was applied or closed."""
        return self.sessions.idle(now)

    def close(self) -> None:
        """End of input: every open session closes and is counted; every sample completes."""
        self.sessions.close_all()
        self.judged.close()

    def forward_to(self, holder: Pipeline | None) -> None:
        """Hand what waits in ``forwarded`` to the pipeline holding the offline state (None:
        none is owned here; judged messages then stay with this pipeline)."""
        waiting, self.forwarded = self.forwarded, []
        for item in waiting:
            if isinstance(item, LiveQuery):
                if holder is not None:
                    klass = holder.slices.place(item.slice, item.time)
                    holder.grow()
                    holder.judged.live_query(item.time, klass, item.text, item.results)
            elif isinstance(item, ImplicitLabels):
                (holder if holder is not None else self)._store_implicit(item)
            else:
                (holder if holder is not None else self)._apply(item)
        self.forward_live = holder is not None and holder.judged.active

    def offline_tick(self, newest: float, judgments_caught_up: bool) -> None:
        """After each batch of input (a Kafka batch; a file in replay): the offline clock
        moves to ``newest``, the newest event time of every pipeline feeding this one, and
        when no judgment waits to be read, samples quiet for long enough complete. The
        queries waiting to be scored are scored then, whether a batch of them is full or not."""
        judged = self.judged
        judged.advance(newest)
        judged.score_waiting()
        if judgments_caught_up:
            judged.settle(newest)

    def _apply(self, message: JudgedMessage) -> None:
        judged, event = self.judged, message.event
        if event["type"] == "baseline":
            name, measure = event.get("query_class"), event.get("measure")
            # a class it names is one the classes know (never one it would add)
            klasses = [OVERALL] if name == ALL else (
                self.slices.of_class(name) or None
            ) if name else None
            accepted = judged.accept(
                message.time, event.get("sample_id"), name, klasses,
                judged.config.measures.index(measure) if measure is not None else None,
                event["reason"], event["by"],
            )
            if accepted.applied:
                log.warning("baseline accepted by %s: sample %s for %s, %s (%s)", accepted.by,
                            accepted.sample_id, name or "every class", measure or "every "
                            "measure", accepted.reason)
            else:
                log.warning("baseline acceptance by %s names sample %r and class %r: not a "
                            "kept completed sample, or a class not known: nothing changed",
                            accepted.by, event.get("sample_id"), name)
            judged.advance(message.time)
            return
        if event["type"] == "qrels":
            judged.store_qrels(event["query_text"], dict(event["labels"]))
        else:
            assert message.ranking is not None, "a judgment's ranking is checked on arrival"
            given = (self._dimensions_of.of(message.attributes)[:len(self._dimensions)]
                     if self._dimensions_of else ())  # not the experiments' attributes
            klass = self.slices.locate(
                event.get("query_class"), event["query_text"], given, message.time,
                self.sessions.watermark,
            )
            self.grow()
            judged.judgment(
                event["sample_id"], message.time, klass, event["query_text"], message.ranking,
                dict(event["labels"]), event.get("agreement"),
            )
        judged.active = True
        judged.advance(message.time)

    def grow(self) -> None:
        """Counters for every slice known (placing judged or joined queries may add some);
        the figures of slices relabelled ``other`` count as folded."""
        slices = self.slices
        while len(self.counters.queries) < len(slices.names):
            self.counters.add_class()
        if slices.evicted:
            folded, queries = self.health.folded_values, self.counters.queries
            for name, moved, sign in slices.evicted:
                folded[name] = folded.get(name, 0) + sign * sum(queries[i] for i in moved)
            slices.evicted.clear()
        if self._plain and not slices.plain:
            self._plain = False

    def _future(self, stamp: int | str) -> Rejection:
        ahead = self.config.sessions.max_future
        return Rejection(Reason.FUTURE_TIMESTAMP, (
            f"timestamp {str(stamp)[:40]} is more than {ahead:g} s ahead of "
            f"{_utc(self.sessions.horizon - ahead)}"
        ))

    def _reject(self, reason: Reason, event: Live) -> Rejection:
        self.health.rejected[reason] += 1
        if reason is Reason.DUPLICATE:
            return Rejection(reason, f"event_id {event.event_id!r} seen before")
        if reason is Reason.FUTURE_TIMESTAMP:
            return self._future(event.timestamp)
        return Rejection(
            reason, f"event time {event.timestamp} is behind the watermark of its session"
        )


class RejectionLog:
    """Logs each rejected message once with its position, up to a limit per reason; with
    ``deferred``, keeps what it would log until ``flush_into`` (a replay that may start
    again from the beginning logs only once)."""

    def __init__(self, limit: int, deferred: bool = False) -> None:
        self.limit = limit
        self.logged: dict[Reason, int] = dict.fromkeys(Reason, 0)
        self.kept: list[tuple[Rejection, str]] | None = [] if deferred else None

    def record(self, rejection: Rejection, position: str) -> None:
        count = self.logged[rejection.reason]
        if count < self.limit:
            if self.kept is not None:
                self.kept.append((rejection, position))
            else:
                log.warning("rejected %s (%s): %s", position, rejection.reason,
                            rejection.detail)
                if count + 1 == self.limit:
                    log.warning(
                        "further %s rejections are counted, not logged", rejection.reason.value
                    )
        self.logged[rejection.reason] = count + 1

    def flush_into(self, other: RejectionLog) -> None:
        for refused, position in self.kept or []:
            other.record(refused, position)
        self.kept = []


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
