"""One exported view of several pipelines (one per Kafka partition), and the ledger that keeps
a replica's exported counters monotonic while partitions come and go.

Sessions never span partitions (producers key events by session_id), so each partition has
its own pipeline and its own watermark: a partition that is read ahead of another cannot make
the other's events late. Counters add up by class name. Offline (judged) state belongs to the
judgments topic's partition and is exported by the replica that owns it.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from monitor.checkpoint import Key
from monitor.config import Config
from monitor.judged import OVERALL, Judged
from monitor.online import OnlineCounters
from monitor.pipeline import Pipeline


def merged(
    config: Config,
    pipelines: Sequence[Pipeline],
    debited: Sequence[Pipeline] = (),
    live: Sequence[Pipeline] | None = None,
    offline: Pipeline | None = None,
) -> Pipeline:
    """A pipeline for export only: counters (the judged-score histograms too) are the sums
    of ``pipelines`` minus ``debited``; gauges (open sessions, newest event time) come from
    ``live`` (default: ``pipelines``); the offline windows and verdicts from ``offline``.

    Nothing given is modified; the view shares their offline windows (pickle it to freeze).
    """
    view = Pipeline(config)
    if offline is not None:  # first: the view's class indexes are then the offline state's
        for name in offline.classes.names:
            _index(view, name)
        view.judged = copy.copy(offline.judged)
        view.judged.histograms, view.judged.histogram_sums, view.judged.skipped = {}, {}, 0
    signed = [(p, 1) for p in pipelines] + [(p, -1) for p in debited]
    for pipeline, sign in signed:
        index = {klass: _index(view, name) for klass, name in enumerate(pipeline.classes.names)}
        _add_counters(view.counters, pipeline.counters, index, sign)
        health, other = view.health, pipeline.health
        health.accepted += sign * other.accepted
        health.ignored_actions += sign * other.ignored_actions
        health.judged_messages += sign * other.judged_messages
        for reason, count in other.rejected.items():
            health.rejected[reason] += sign * count
        view.sessions.unmatched_clicks += sign * pipeline.sessions.unmatched_clicks
        _add_scores(view.judged, pipeline.judged, index, sign)
    for pipeline in pipelines if live is None else live:
        view.sessions.newest = max(view.sessions.newest, pipeline.sessions.newest)
        view.sessions.reported_open += pipeline.sessions.open_count
    return view


def counters_of(pipeline: Pipeline) -> Pipeline:
    """A pipeline's exported figures without its sessions (small enough to keep and send)."""
    offline = pipeline if pipeline.judged.active else None
    return merged(pipeline.config, [pipeline], offline=offline)


@dataclass
class Ledger:
    """What one replica exports, so that its counters never go backwards or count twice.

    The replica exports, per partition it owns, the growth since it acquired the partition
    (``views - bases``); what partitions it no longer owns contributed stays in ``retired``.
    Another replica that acquires a partition starts from the checkpoint the previous owner
    exported last, so the sums over replicas count every event once. A partition restored from
    a checkpoint this ledger's replica wrote itself keeps its base: a restart continues.
    """

    config: Config
    replica: str = field(default_factory=lambda: uuid.uuid4().hex)
    retired: list[Pipeline] = field(default_factory=list)
    bases: dict[Key, Pipeline] = field(default_factory=dict)
    views: dict[Key, Pipeline] = field(default_factory=dict)
    """The newest durable view of each partition owned (or owned before a restart)."""

    def acquire(self, key: Key, view: Pipeline, writer: str | None) -> None:
        if key in self.bases and writer != self.replica:
            self.release(key)  # another replica counted it meanwhile: ours stays as it was
        if key not in self.bases:
            self.bases[key] = view
        self.views[key] = view

    def update(self, key: Key, view: Pipeline) -> None:
        self.views[key] = view

    def release(self, key: Key) -> None:
        view, base = self.views.pop(key, None), self.bases.pop(key, None)
        if view is not None and base is not None:
            self.retired = [merged(self.config, [*self.retired, view], [base], live=())]

    def exported(self, owned: set[Key], offline: Key | None) -> Pipeline:
        """Counters: everything this replica counted; gauges: the partitions it owns now."""
        keys = sorted(self.views)
        return merged(
            self.config,
            [*self.retired, *(self.views[k] for k in keys)],
            [self.bases[k] for k in keys],
            live=[self.views[k] for k in keys if k in owned],
            offline=self.views.get(offline) if offline is not None else None,
        )


def _index(view: Pipeline, name: str) -> int:
    found = view.classes.index.get(name)
    if found is None:
        found = view.classes._add(name)
        view.counters.add_class()
    return found


def _add_counters(
    total: OnlineCounters, part: OnlineCounters, index: dict[int, int], sign: int
) -> None:
    for name in OnlineCounters.COUNTS:
        into, values = getattr(total, name), getattr(part, name)
        for klass, value in enumerate(values):
            into[index[klass]] += sign * value
    for name, histogram in part.histograms():
        into_histogram = getattr(total, name)
        for klass, counts in enumerate(histogram.counts):
            target = into_histogram.counts[index[klass]]
            for bucket, count in enumerate(counts):
                target[bucket] += sign * count
            into_histogram.sums[index[klass]] += sign * histogram.sums[klass]


def _add_scores(total: Judged, part: Judged, index: dict[int, int], sign: int) -> None:
    """The judged-score histograms are counters too: signed like the online ones."""
    for (source, klass, measure), counts in part.histograms.items():
        key = (source, klass if klass == OVERALL else index[klass], measure)
        into = total.histograms.setdefault(key, [0] * len(counts))
        for bucket, count in enumerate(counts):
            into[bucket] += sign * count
        total.histogram_sums[key] = total.histogram_sums.get(key, 0.0) + sign * (
            part.histogram_sums[(source, klass, measure)]
        )
    total.skipped += sign * part.skipped

