"""The ledger that keeps a replica's exported counters monotonic while partitions come and go.

Sessions never span partitions (producers key events by session_id), so each partition has
its own pipeline and its own watermark: a partition that is read ahead of another cannot make
the other's events late. What a replica exports is arithmetic over the partitions' export
snapshots (``monitor.core.export.combine``). Offline (judged) state belongs to the judgments
topic's partition and is exported by the replica that owns it. The ledger also keeps the
history of what the replica exported (``monitor.core.history``: the status page's last hour),
so that a restart keeps it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from monitor.core.classes import OTHER
from monitor.core.export import Export, check, combine, fold_classes, padded
from monitor.core.history import History, HistoryState
from monitor.core.snapshots import Int, require
from monitor.inputs.events import Key


@dataclass(frozen=True)
class PartitionExport:
    topic: str
    partition: int
    export: Export


@dataclass(frozen=True)
class LedgerState:
    replica: str
    retired: Export
    bases: list[PartitionExport]
    views: list[PartitionExport]
    dead_lettered: Int = 0
    """Copies the dead-letter topic acknowledged, over every run of this replica."""
    classes: list[str] = field(default_factory=list)
    """The query classes this replica exports as label values, in the order admitted."""
    history: HistoryState | None = None
    """The recent past of the exported online counters (the status page's last hour). None in
    a ledger written before it was kept: ``Ledger.restore`` starts it empty."""
    released: list[PartitionExport] = field(default_factory=list)
    """The last view of each partition given up (what ``retired`` holds of it)."""


@dataclass
class Ledger:
    """What one replica exports, so that its counters never go backwards or count twice.

    The replica exports, per partition it owns, the growth since it acquired the partition
    (``views - bases``); what partitions it no longer owns contributed stays in ``retired``.
    Another replica that acquires a partition starts from the checkpoint the previous owner
    exported last, so the sums over replicas count every event once. A partition restored from
    a checkpoint this ledger's replica wrote itself keeps its base: a restart continues. One
    it gave up and restores from its own checkpoint counts from the view it gave up at (what
    ``retired`` holds of it): the checkpoint may be newer than the last view this ledger
    took (written in the background, or just before a crash), and what it adds is counted.
    """

    replica: str = field(default_factory=lambda: uuid.uuid4().hex)
    retired: Export = field(default_factory=Export)
    bases: dict[Key, Export] = field(default_factory=dict)
    views: dict[Key, Export] = field(default_factory=dict)
    """The newest durable view of each partition owned (or owned before a restart)."""
    dead_lettered: int = 0
    """Copies the dead-letter topic acknowledged, as of the last save."""
    classes: list[str] = field(default_factory=list)
    """The query classes exported as label values (``exported``'s ``limit``)."""
    history: History = field(default_factory=History)
    """Samples of what this replica exported, by event time (``monitor.core.history``)."""
    released: dict[Key, Export] = field(default_factory=dict)
    """The view each partition given up was given up at (until it is acquired again)."""

    def acquire(self, key: Key, view: Export, writer: str | None) -> None:
        if key in self.bases and writer != self.replica:
            self.release(key)  # another replica counted it meanwhile: ours stays as it was
        given_up = self.released.pop(key, None)
        if key not in self.bases:
            # given up and restored from its own checkpoint: it counts from where it left
            ours = writer == self.replica
            self.bases[key] = given_up if given_up is not None and ours else view
        self.views[key] = view

    def update(self, key: Key, view: Export) -> None:
        self.views[key] = view

    def release(self, key: Key) -> None:
        view, base = self.views.pop(key, None), self.bases.pop(key, None)
        if view is not None and base is not None:
            self.retired = combine([(self.retired, 1), (view, 1), (base, -1)])
            self.released[key] = view

    def exported(
        self, owned: Iterable[Key], offline: Key | None, limit: int | None = None
    ) -> Export:
        """Counters: everything this replica counted; gauges: the partitions it owns now;
        offline gauges: those of ``offline``, kept through restarts and rebalances until
        another replica takes that partition. With ``limit`` (classes learned from the
        data), at most that many query classes are label values: each partition learns its
        own first ones, so the replica admits classes as they first show, up to ``limit``,
        and adds the counters of any other to ``other`` (for good: counters stay
        monotonic)."""
        keys = sorted(self.views)
        live = set(owned)
        figures = combine(
            [(self.retired, 1), *((self.views[k], 1) for k in keys),
             *((self.bases[k], -1) for k in keys)],
            live=[self.views[k] for k in keys if k in live],
            offline=self.views.get(offline) if offline is not None else None,
        )
        if limit is None:
            return figures
        admitted = set(self.classes)
        for name in sorted({part.slice[0] for part in figures.slices} - admitted - {OTHER}):
            if len(self.classes) >= limit:
                break
            self.classes.append(name)
            admitted.add(name)
        return fold_classes(figures, admitted)

    def snapshot(self) -> LedgerState:
        return LedgerState(
            self.replica, self.retired,
            [PartitionExport(*key, export) for key, export in sorted(self.bases.items())],
            [PartitionExport(*key, export) for key, export in sorted(self.views.items())],
            self.dead_lettered, list(self.classes), self.history.snapshot(),
            [PartitionExport(*key, export) for key, export in sorted(self.released.items())],
        )

    @staticmethod
    def restore(state: LedgerState) -> Ledger:
        bases = {(p.topic, p.partition): p.export for p in state.bases}
        views = {(p.topic, p.partition): p.export for p in state.views}
        require(bases.keys() == views.keys(), "ledger: partitions without a base or a view")
        released = {(p.topic, p.partition): p.export for p in state.released}
        for figures in (state.retired, *bases.values(), *views.values(), *released.values()):
            check(figures)
        require(state.dead_lettered >= 0, "ledger: a negative dead-letter count")
        return Ledger(
            state.replica, padded(state.retired), {k: padded(v) for k, v in bases.items()},
            {k: padded(v) for k, v in views.items()}, state.dead_lettered, list(state.classes),
            History.restore(state.history) if state.history is not None else History(),
            {k: padded(v) for k, v in released.items()},
        )
