"""Slices: a query's class and its values of the configured dimensions, as one index.

Every part of a pipeline that keeps figures per slice (the online counters, the sessions,
the judged state, the query lists) refers to a slice by its index here; ``names[index]`` is
the slice's label values, ``query_class`` first, then each dimension of ``[slices]
dimensions`` in order. Without dimensions a slice is its query class alone, and its index is
the class's index.

A dimension's value comes from the event (``monitor.inputs.native.Dimensions``; an event
without it: ``unknown``).
Each dimension has a closed set: its configured values, or else the first ``max_values``
values in event time. A value seen after the set is full is ``other``; one whose first event
is earlier than that of the newest member not yet behind the watermark takes that member's
place, and the member's slices are relabelled ``other``. So within the allowed lateness the
set is the same whatever the order of arrival. A slice whose label values another slice
holds already (after a relabelling, or a dimension removed from the configuration) stays an
alias of it: its figures are exported under the same labels, added up.

The number of distinct slices is bounded by ``max_series``: past it, a new slice's dimension
values fold into ``other`` (logged once), so label values stay bounded whatever the input.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from monitor.config import UNKNOWN, SlicesConfig
from monitor.core.classes import JOINED, NEW, OTHER, OUT, EventTimeSet, QueryClasses
from monitor.core.snapshots import Layout, Migration, require
from monitor.core.states import SlicesState

log = logging.getLogger(__name__)

QUERY_CLASS = "query_class"
Slice = tuple[str, ...]
"""Label values of a slice: the query class, then the dimensions' values."""


def slice_key(labels: tuple[str, ...], values: Slice) -> str:
    """A slice in one string: its class without dimensions, else ``label=value`` pairs
    joined by commas (``query_class=head,platform=ios``)."""
    if len(values) == 1:
        return values[0]
    return ",".join(f"{label}={value}" for label, value in zip(labels, values, strict=True))


class Dimension(EventTimeSet):
    """One dimension's closed value set, learned in event time."""

    __slots__ = ("name",)

    def __init__(self, name: str, listed: list[str] | None, limit: int) -> None:
        super().__init__(listed, limit)
        self.name = name


def _classes_2_to_3(document: Any) -> Any:
    """Version 2 kept no first event time of a learned class: each is a member for good."""
    if isinstance(document, dict):
        def count(key: str) -> int:  # (validation refuses what is no list, after this)
            value = document.get(key)
            return len(value) if isinstance(value, list) else 0

        document.setdefault("class_first", [None] * count("classes"))
        document.setdefault("classes_out", [])
        document.setdefault("hidden", [None] * count("slices"))
        document.setdefault("pending", [[] for _ in range(count("dimensions"))])
        document.setdefault("pending_first", [[] for _ in range(count("dimensions"))])
    return document


def _classes_1_to_2(document: Any) -> Any:
    """Version 1 held the class names alone: a slice per class, no dimension."""
    if isinstance(document, list):
        return {"classes": document, "dimensions": [], "values": [], "first": [],
                "slices": [[name] for name in document], "list_dimensions": [],
                "lists": [[name] for name in document]}
    return document


class Slices:
    """Maps queries to slice indexes (``locate``); ``names[index]`` are its label values."""

    VERSION: ClassVar[int] = 3
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {1: _classes_1_to_2, 2: _classes_2_to_3}

    def __init__(
        self, config: SlicesConfig, classes: QueryClasses, dimensions: list[Dimension],
        lists_by: tuple[str, ...] = (),
    ) -> None:
        self.config = config
        self.classes = classes
        self.dimensions = dimensions
        self.names: list[Slice] = []
        self.index: dict[Slice, int] = {}
        """Label values -> the slice new queries with them count into: never one relabelled
        ``other`` that may get its value back (an alias's values map to another)."""
        self.shown_by: dict[Slice, list[int]] = {}
        """Label values -> every slice exported under them (its series: ``max_series``
        bounds how many there are)."""
        self.evicted: list[tuple[str, list[int], int]] = []
        """Members that lost their place (dimension, the slices relabelled, 1) or got it
        back (-1), for the caller to count their queries as folded or not."""
        self._was: dict[int, dict[int, str]] = {}
        """Per label position: the value each slice relabelled ``other`` had."""
        self._budget_logged = False
        self.lists_by = lists_by
        """The dimensions the query lists are kept by (``[query_lists] dimensions``)."""
        self.lists: list[int] = []
        """Per slice index: the index of the query lists it counts into."""
        self.list_names: list[Slice] = []
        """Per index of the query lists: its class, then its values of ``lists_by``."""
        self.list_index: dict[Slice, int] = {}
        self.lists_restarted = False
        """``restore``: the state's lists were kept by other dimensions (they start
        over)."""
        self.hidden: dict[Slice, int] = {}
        """Label values a slice would have without the values relabelled ``other`` in it (a
        pending value's, or a member's that lost its place) -> that slice."""
        self.latest_first = float("-inf")
        """At least the latest first event time of a learned class or value: a query at
        this time or later moves no first event time (``saw`` is for earlier ones)."""

    @classmethod
    def from_config(
        cls, classes: QueryClasses, config: SlicesConfig, lists_by: list[str] | None = None,
    ) -> Slices:
        slices = cls(config, classes, [
            Dimension(name, config.values.get(name), config.max_values)
            for name in config.dimensions
        ], lists_by=tuple(lists_by or ()))
        for name in classes.names:
            slices._add((name, *(UNKNOWN for _ in slices.dimensions)))
        return slices

    def _list_of(self, key: Slice) -> int:
        """The index of the query lists of the slice ``key`` (added when new)."""
        labels = self.labels
        projected = (key[0], *(key[labels.index(name)] for name in self.lists_by))
        found = self.list_index.get(projected)
        if found is None:
            found = self.list_index[projected] = len(self.list_names)
            self.list_names.append(projected)
        return found

    @property
    def plain(self) -> bool:
        """No dimension, and no alias: a slice's index is its class's."""
        return not self.dimensions and len(self.names) == len(self.classes.names)

    @property
    def labels(self) -> tuple[str, ...]:
        return (QUERY_CLASS, *(d.name for d in self.dimensions))

    def locate(
        self, query_class: str | None, text: str, given: Slice, time: float,
        watermark: float, add: bool = True,
    ) -> int:
        """The slice index of a query with this declared class, text and dimension values
        (``given``: as the query gives them, ``unknown`` where it does not) at event
        ``time``; with ``add`` False, ``NEW`` where it would change the sets.

        A class or value outside its full set that may still join it (``pending``: the set
        is not settled) has slices of its own, labelled ``other`` until it joins."""
        classes = self.classes
        klass = classes.classify(query_class, text, add, time, watermark)
        if klass == NEW:
            return NEW
        if classes.changes:  # a class joined (in the place of another)
            self._classes_changed()
        name = classes.names[klass]
        waiting = [0] if klass and name not in classes.index else []
        if not self.dimensions and not waiting:
            return klass if self.plain else self.index[(name,)]
        values = []
        for at, (dimension, raw) in enumerate(zip(self.dimensions, given, strict=True), 1):
            value = self._value(dimension, raw, time, watermark, add)
            if value is None:
                return NEW
            if value is not raw or value in dimension.first or value == UNKNOWN:
                values.append(value)
            else:  # pending
                values.append(raw)
                waiting.append(at)
        key = (name, *values)
        if waiting:
            found = self.hidden.get(key)
            if found is not None:
                return found
            return self._add_hidden(key, waiting) if add else NEW
        found = self.index.get(key)
        if found is not None:
            return found
        return self._add(key) if add else NEW

    def _value(
        self, dimension: Dimension, raw: str, time: float, watermark: float, add: bool,
    ) -> str | None:
        """The member the value ``raw`` is (``unknown``, ``other``), ``raw`` itself while it
        is pending, or None: it would join (or start pending)."""
        if not raw or raw == UNKNOWN:
            return UNKNOWN
        if raw not in dimension.first and (
            raw == OTHER or raw == "all" or len(raw) > self.config.max_value_chars
        ):
            return OTHER
        found, evicted = dimension.place(raw, time, watermark, add)
        if found == NEW:
            return None
        if found == OUT:
            return OTHER
        if found == JOINED:
            self.latest_first = max(self.latest_first, dimension.first[raw])
            at = 1 + self.dimensions.index(dimension)
            if evicted is not None:
                self._relabel(at, evicted)
            self._readmit(at, raw)
        return raw  # a member, or waiting

    def _add_hidden(self, key: Slice, waiting: list[int]) -> int:
        """A slice for ``key`` whose values at the label positions ``waiting`` are pending:
        labelled ``other`` there until they join (``_readmit``)."""
        shown = tuple(OTHER if at in waiting else value for at, value in enumerate(key))
        if shown not in self.shown_by and len(self.shown_by) >= self.config.max_series:
            return self._add(shown)
        i = self._append(shown)
        for at in waiting:
            self._was.setdefault(at, {})[i] = key[at]
        self.hidden[key] = i
        return i

    def _raw(self, i: int) -> Slice:
        """The label values slice ``i`` has once every value relabelled ``other`` is back."""
        name = list(self.names[i])
        for at, was in self._was.items():
            value = was.get(i)
            if value is not None:
                name[at] = value
        return tuple(name)

    def _classes_changed(self) -> None:
        """Classes joined the set, in the place of others: the slices of a class that lost
        its place are relabelled ``other``; a joining class gets back the slices it had, or
        a slice of no dimension value."""
        changes, self.classes.changes = self.classes.changes, []
        unknown = tuple(UNKNOWN for _ in self.dimensions)
        for name, joined in changes:
            if not joined:
                self._relabel(0, name)
                log.info("query classes: %r is no longer among the first %d classes in event "
                         "time: its figures so far count as other", name, self.classes.limit)
                continue
            self._readmit(0, name)
            self.latest_first = max(self.latest_first, self.classes.learned.first[name])
            if (name, *unknown) not in self.hidden:
                self._add((name, *unknown))

    def _relabel(self, at: int, value: str) -> None:
        """Every slice with ``value`` at label position ``at`` becomes one with ``other``
        (until an earlier event of ``value`` makes it a member again: ``_readmit``)."""
        moved = [i for i, name in enumerate(self.names) if name[at] == value]
        was = self._was.setdefault(at, {})
        for i in moved:
            self._hide(self._raw(i), i)
            was[i] = value
            self._rename(i, (*self.names[i][:at], OTHER, *self.names[i][at + 1:]))
        if at:
            dimension = self.dimensions[at - 1]
            self.evicted.append((dimension.name, moved, 1))
            log.info("slices: %s %r is no longer among the first %d values in event time: "
                     "its figures so far count as other", dimension.name, value,
                     dimension.limit)

    def _readmit(self, at: int, value: str) -> None:
        """The slices labelled ``other`` at label position ``at`` while ``value`` was out
        get it back."""
        was = self._was.get(at)
        if not was:
            return
        back = []
        for i in [i for i, old in was.items() if old == value]:
            raw = self._raw(i)
            del was[i]
            new = (*self.names[i][:at], value, *self.names[i][at + 1:])
            if at and new not in self.shown_by and len(self.shown_by) >= self.config.max_series:
                # no series left for it: what it counted stays other, and so do its queries
                self._rehide(raw)
                if not self._relabelled(i):
                    self._register(self.names[i], i)
                else:
                    self._hide(self._raw(i), i)
                continue
            back.append(i)
            self._rename(i, new)
            self._rehide(raw)  # (its values all back: another slice may hide the same)
        if back and at:
            self.evicted.append((self.dimensions[at - 1].name, back, -1))

    def saw(self, index: int, time: float) -> None:
        """A query of slice ``index`` at event ``time``, earlier than ``latest_first``, found
        its slice without ``locate``: the first event times of its class and values may be
        earlier than the sets knew."""
        name = self.names[index]
        classes = self.classes
        if not classes.learned.settled:
            classes.learned.saw(name[0], time)
        for dimension, value in zip(self.dimensions, name[1:], strict=False):
            if not dimension.settled:
                first = dimension.first.get(value)
                if first is not None and time < first:
                    dimension.first[value] = time

    def _rename(self, i: int, new: Slice) -> None:
        """Slice ``i`` takes the label values ``new``; the index of its old values moves to
        another slice holding them, if any."""
        old = self.names[i]
        self.names[i] = new
        self.lists[i] = self._list_of(new)
        holders = self.shown_by[old]
        holders.remove(i)
        if not holders:
            del self.shown_by[old]
        self.shown_by.setdefault(new, []).append(i)
        if self.index.get(old) == i:
            alias = min((j for j in holders if not self._relabelled(j)), default=None)
            if alias is None:
                del self.index[old]
            else:
                self.index[old] = alias
        if not self._relabelled(i):
            self._register(new, i)

    def _register(self, labels: Slice, i: int) -> None:
        """New queries with ``labels`` count into the first slice (the lowest index) not
        relabelled that shows them: the same live and once restored."""
        held = self.index.get(labels)
        if held is None or i < held:
            self.index[labels] = i

    def _hide(self, raw: Slice, i: int) -> None:
        """Queries of the values ``raw`` (some of them waiting or out) count into the first
        slice (the lowest index) relabelled that holds them: the same live and restored."""
        held = self.hidden.get(raw)
        if held is None or i < held:
            self.hidden[raw] = i

    def _rehide(self, raw: Slice) -> None:
        """``hidden`` for ``raw`` after a slice that held it changed: the first slice still
        relabelled that holds it, if any."""
        relabelled = {j for was in self._was.values() for j in was}
        holders = [j for j in relabelled if self._raw(j) == raw]
        if holders:
            self.hidden[raw] = min(holders)
        else:
            self.hidden.pop(raw, None)

    def _relabelled(self, i: int) -> bool:
        """Whether slice ``i`` shows ``other`` for a value it may get back."""
        return any(i in was for was in self._was.values())

    def _append(self, key: Slice) -> int:
        """A new slice labelled ``key`` (the caller registers it in ``index``)."""
        i = len(self.names)
        self.names.append(key)
        self.lists.append(self._list_of(key))
        self.shown_by.setdefault(key, []).append(i)
        return i

    def _add(self, key: Slice) -> int:
        found = self.index.get(key)
        if found is not None:
            return found
        if (key not in self.shown_by and len(self.shown_by) >= self.config.max_series
                and any(v != OTHER and v != UNKNOWN for v in key[1:])):
            if not self._budget_logged:
                self._budget_logged = True
                log.warning("slices: %d slices reached ([slices] max_series): the dimension "
                            "values of further slices count as other", self.config.max_series)
            key = (key[0], *(OTHER for _ in key[1:]))
            found = self.index.get(key)
            if found is not None:
                return found
        i = self.index[key] = self._append(key)
        return i

    def add_class(self, name: str) -> int:
        """The class ``name`` joins the set for good (the caller checks that it may), with
        its slice of no dimension value; returns the slice's index."""
        self.classes.add(name)
        return self._add((name, *(UNKNOWN for _ in self.dimensions)))

    def key(self, index: int) -> str:
        """How a report names slice ``index``: its class alone without dimensions."""
        return slice_key(self.labels, self.names[index])

    def canonical(self, index: int) -> bool:
        """Whether ``index`` holds its label values (else it is an alias of the one that
        does: its offline figures are those of before its relabelling, not shown). Labels
        that only relabelled slices show are held by the first of them."""
        name = self.names[index]
        holder = self.index.get(name)
        return (holder if holder is not None else min(self.shown_by[name])) == index

    def place(self, values: Slice, time: float) -> int:
        """The index of the slice with these label values (another pipeline's), added here
        the way a query with them would be."""
        return self.locate(values[0], "", values[1:], time, float("inf"))

    def folded(self, index: int, given: Slice) -> list[str]:
        """The dimensions whose value a query of slice ``index`` gave (``given``) that count
        as ``other``."""
        name = self.names[index]
        return [
            dimension.name for dimension, value, raw in zip(
                self.dimensions, name[1:], given, strict=True
            ) if value == OTHER and raw not in ("", OTHER, UNKNOWN)
        ]

    def of_class(self, name: str) -> list[int]:
        """The slice indexes of the query class ``name``."""
        return [i for i, values in enumerate(self.names) if values[0] == name]

    def snapshot(self) -> SlicesState:
        return SlicesState(
            self.classes.snapshot(), [d.name for d in self.dimensions],
            [list(d.first) for d in self.dimensions],
            [[None if d.fixed else t for t in d.first.values()] for d in self.dimensions],
            [list(name) for name in self.names], list(self.lists_by),
            [list(name) for name in self.list_names],
            [self.classes.learned.first.get(name, self.classes.learned.pending.get(name))
             for name in self.classes.names],
            [name for name in self.classes.names[1:] if name not in self.classes.index],
            [list(self._raw(i)) if any(i in was for was in self._was.values()) else None
             for i in range(len(self.names))],
            [list(d.pending) for d in self.dimensions],
            [list(d.pending.values()) for d in self.dimensions],
        )

    @classmethod
    def restore(cls, layout: Layout, state: SlicesState) -> Slices:
        """The slices of ``state`` under ``layout``'s configuration: a dimension added since
        reads ``unknown`` in every slice so far, one removed is dropped (slices that differed
        by it alone become aliases), and a value now outside its set reads ``other``."""
        config = layout.config
        require(len(state.slices) == layout.classes, "slices: not as many as the state's")
        classes = QueryClasses.restore(
            Layout(config, len(state.classes)), state.classes, state.class_first,
            state.classes_out,
        )
        slices = cls(config.slices, classes, [
            Dimension(name, config.slices.values.get(name), config.slices.max_values)
            for name in config.slices.dimensions
        ], lists_by=tuple(config.query_lists.dimensions))
        if tuple(state.list_dimensions) == slices.lists_by:  # the lists' indexes hold
            for values in state.lists:
                require(len(values) == 1 + len(slices.lists_by) and values[0] in classes.names,
                        "slices: query lists of an unknown class or of other dimensions")
                slices.list_index.setdefault(tuple(values), len(slices.list_names))
                slices.list_names.append(tuple(values))
        else:
            slices.lists_restarted = True
        require(len(state.values) == len(state.first) == len(state.dimensions)
                and all(len(v) == len(f) for v, f in zip(state.values, state.first,
                                                          strict=True)),
                "slices: dimension values and times of different lengths")
        was = {name: i for i, name in enumerate(state.dimensions)}
        for dimension in slices.dimensions:
            at = was.get(dimension.name)
            if at is None or dimension.fixed:
                continue
            for value, time in zip(state.values[at], state.first[at], strict=True):
                if len(dimension.first) < dimension.limit and value:
                    dimension.first[value] = float("-inf") if time is None else time
            if at < len(state.pending):
                dimension.pending = dict(zip(state.pending[at], state.pending_first[at],
                                             strict=True))
        names = set(classes.names)
        for values in state.slices:
            require(len(values) == 1 + len(state.dimensions) and values[0] in names,
                    "slices: a slice of an unknown class or of other dimensions")
            key = [values[0]]
            for dimension in slices.dimensions:
                at = was.get(dimension.name)
                value = values[1 + at] if at is not None else UNKNOWN
                if value not in (UNKNOWN, OTHER) and value not in dimension.first:
                    value = OTHER
                key.append(value)
            slices._append(tuple(key))
        require(len(state.hidden) == len(state.slices), "slices: hidden values of others")
        if state.dimensions == config.slices.dimensions:  # the relabellings hold
            for i, raw in enumerate(state.hidden):
                if raw is None:
                    continue
                require(len(raw) == len(slices.names[i]), "slices: hidden values of others")
                for at, (value, shown) in enumerate(zip(raw, slices.names[i], strict=True)):
                    if value != shown:
                        slices._was.setdefault(at, {})[i] = value
                slices.hidden.setdefault(tuple(raw), i)  # the first, as live
        for i, labels in enumerate(slices.names):
            if not slices._relabelled(i):
                slices.index.setdefault(labels, i)
        unknown = tuple(UNKNOWN for _ in slices.dimensions)
        require(all((name, *unknown) in slices.index for name in classes.index),
                "slices: a class without its slice")
        slices.latest_first = max(
            [*classes.learned.first.values(),
             *(t for d in slices.dimensions for t in d.first.values())],
            default=float("-inf"),
        )
        return slices
