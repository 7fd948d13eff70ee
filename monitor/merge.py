"""One exported view of several pipelines (one per Kafka partition).

Sessions never span partitions (producers key events by session_id), so each partition has
its own pipeline and its own watermark: a partition that is read ahead of another cannot make
the other's events late. Counters add up by class name; the offline state is shared.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.config import Config
from monitor.online import OnlineCounters
from monitor.pipeline import Pipeline


def merged(config: Config, pipelines: Sequence[Pipeline]) -> Pipeline:
    """A pipeline whose counters are the sums of ``pipelines``' (for export only).

    The counters are copied and open sessions only counted; the offline state is the shared
    one itself (pickle the view to freeze it).
    """
    view = Pipeline(config)
    for pipeline in pipelines:
        index = {}
        for klass, name in enumerate(pipeline.classes.names):
            found = view.classes.index.get(name)
            if found is None:
                found = view.classes._add(name)
                view.counters.add_class()
            index[klass] = found
        _add_counters(view.counters, pipeline.counters, index)
        health, other = view.health, pipeline.health
        health.accepted += other.accepted
        health.ignored_actions += other.ignored_actions
        health.judged_messages += other.judged_messages
        for reason, count in other.rejected.items():
            health.rejected[reason] += count
        view.sessions.unmatched_clicks += pipeline.sessions.unmatched_clicks
        view.sessions.newest = max(view.sessions.newest, pipeline.sessions.newest)
        view.sessions.reported_open += pipeline.sessions.open_count
        view.judged = pipeline.judged  # shared by every partition's pipeline
    return view


def _add_counters(total: OnlineCounters, part: OnlineCounters, index: dict[int, int]) -> None:
    for name in OnlineCounters.COUNTS:
        into, values = getattr(total, name), getattr(part, name)
        for klass, value in enumerate(values):
            into[index[klass]] += value
    for name, histogram in part.histograms():
        into_histogram = getattr(total, name)
        for klass, counts in enumerate(histogram.counts):
            target = into_histogram.counts[index[klass]]
            for bucket, count in enumerate(counts):
                target[bucket] += count
            into_histogram.sums[index[klass]] += histogram.sums[klass]
