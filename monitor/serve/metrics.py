"""Every exported metric family, its help text and labels, and the collector that reads them.

The collector reads the pipeline's state at scrape time (no lock or label lookup per event).
Counters and histograms are the source of truth; ratios are left to Prometheus recording
rules. Every ``query_class`` series exists from start-up, at 0.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator, Sequence
from importlib import metadata

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from monitor import __version__
from monitor.core.export import Export, HistogramFigures
from monitor.core.judged import SCORE_BUCKETS
from monitor.core.online import COUNTERS, HISTOGRAMS, OnlineCounters
from monitor.inputs.events import Reason


class ExportCollector(Collector):
    """Renders an ``Export`` when Prometheus scrapes.

    ``export`` returns the snapshot to expose: a live pipeline's (replay), or (the daemon) the
    state as of the newest durable checkpoints. ``extra`` yields further families of the caller.
    """

    def __init__(
        self,
        export: Callable[[], Export],
        extra: Callable[[], Iterable[Metric]] = lambda: (),
    ) -> None:
        self._export = export
        self._extra = extra

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        figures = self._export()
        labels = list(figures.labels)
        for i, family in enumerate(COUNTERS):
            metric = CounterMetricFamily(family.name, family.help, labels=labels)
            for figure in figures.slices:
                metric.add_metric(list(figure.slice), figure.counts[i])
            yield metric
        for i, family in enumerate(HISTOGRAMS):
            histogram = HistogramMetricFamily(family.name, family.help, labels=labels)
            bounds = BOUNDS[family.attribute]
            for figure in figures.slices:
                _add_histogram(histogram, list(figure.slice), bounds, figure.histograms[i])
            yield histogram
        yield from _offline(figures)
        yield from _health(figures)
        yield from self._extra()


BOUNDS = {name: histogram.bounds for name, histogram in OnlineCounters().histograms()}


def _add_histogram(
    metric: HistogramMetricFamily, labels: list[str], bounds: Sequence[float],
    histogram: HistogramFigures,
) -> None:
    cumulative, buckets = 0, []
    for bound, count in zip([*(_le(b) for b in bounds), "+Inf"], histogram.counts, strict=True):
        cumulative += count
        buckets.append((bound, float(cumulative)))
    metric.add_metric(labels, buckets, histogram.sum)


def _le(bound: float) -> str:
    return repr(float(bound))


def window_label(seconds: float) -> str:
    """``3600`` -> ``1h``, ``86400`` -> ``24h``, ``604800`` -> ``7d``: as people write them."""
    whole = int(seconds)
    if whole == seconds:
        if whole % 86400 == 0 and whole > 86400:
            return f"{whole // 86400}d"
        for unit, size in (("h", 3600), ("m", 60)):
            if whole % size == 0:
                return f"{whole // size}{unit}"
    return f"{seconds:g}s"


def _offline(figures: Export) -> Iterator[Metric]:
    slice_labels = list(figures.labels)
    offline_labels = [*slice_labels, "measure", "source"]
    score = HistogramMetricFamily(
        "search_judged_score", "Per-query scores of judged queries.", labels=offline_labels
    )
    for scores in figures.scores:
        _add_histogram(score, [*scores.slice, scores.measure, scores.source], SCORE_BUCKETS,
                       scores.histogram)
    yield score
    window_labels = [*offline_labels, "window"]
    mean = GaugeMetricFamily(
        "search_judged_score_mean", "Rolling mean of judged-query scores (absent when the "
        "window is empty).", labels=window_labels,
    )
    queries = GaugeMetricFamily(
        "search_judged_queries", "Judged queries behind search_judged_score_mean.",
        labels=window_labels,
    )
    regression = GaugeMetricFamily(
        "search_judged_regression",
        "1 when the latest judged sample regressed against its baseline (drop > min_drop "
        "and randomization-test p < max_p_value), else 0; absent without a verdict.",
        labels=[*slice_labels, "measure"],
    )
    delta = GaugeMetricFamily(
        "search_judged_delta", "Latest sample minus baseline: mean paired difference.",
        labels=[*slice_labels, "measure"],
    )
    pvalue = GaugeMetricFamily(
        "search_judged_pvalue", "Two-sided p-value of the paired test of the latest sample "
        "against its baseline.", labels=[*slice_labels, "measure", "test"],
    )
    shared = GaugeMetricFamily(
        "search_judged_shared_queries", "Queries the latest sample shares with its baseline.",
        labels=[*slice_labels, "measure"],
    )
    since = GaugeMetricFamily(
        "search_judged_regression_since_timestamp_seconds",
        "Event time of the sample a regression still flagged was first flagged at (present "
        "while search_judged_regression is 1).", labels=[*slice_labels, "measure"],
    )
    samples = GaugeMetricFamily(
        "search_judged_regression_samples",
        "Samples in a row flagged as a regression, up to the latest (present while "
        "search_judged_regression is 1).", labels=[*slice_labels, "measure"],
    )
    offline = figures.offline
    if offline is not None:
        for entry in offline.means:
            window = (
                f"last_{entry.window}_samples" if isinstance(entry.window, int)
                else window_label(entry.window)
            )
            labels = [*entry.slice, entry.measure, entry.source, window]
            mean.add_metric(labels, entry.mean)
            queries.add_metric(labels, entry.queries)
        for verdict in offline.verdicts:
            labels = [*verdict.slice, verdict.measure]
            shared.add_metric(labels, verdict.shared)
            if verdict.regression is not None:
                regression.add_metric(labels, 1.0 if verdict.regression else 0.0)
                delta.add_metric(labels, verdict.delta)
                pvalue.add_metric([*labels, "permutation"], verdict.p_permutation)
                pvalue.add_metric([*labels, "t"], verdict.p_t)
            if verdict.regression and verdict.since_time is not None:
                since.add_metric(labels, verdict.since_time)
                samples.add_metric(labels, verdict.flagged_samples)
    yield from (mean, queries, regression, delta, pvalue, shared, since, samples)
    if offline is not None and offline.last_sample_time is not None:
        yield GaugeMetricFamily(
            "search_judged_last_sample_timestamp_seconds",
            "Event time of the newest message of the newest completed judged sample.",
            value=offline.last_sample_time,
        )
    yield CounterMetricFamily(
        "searchmon_judged_scores_skipped",
        "Judged-query scores left out because the measure skips queries without relevant "
        "documents (no_rel=skip).", value=figures.skipped_scores,
    )


def _health(figures: Export) -> Iterator[Metric]:
    yield CounterMetricFamily(
        "searchmon_events_read", "Messages read from every source.", value=figures.events_read
    )
    rejected = CounterMetricFamily(
        "searchmon_events_rejected", "Messages rejected, by reason.", labels=["reason"]
    )
    for reason, count in figures.rejected.items():
        rejected.add_metric([reason], count)
    yield rejected
    simple = [
        ("searchmon_events_accepted", "Search-log events accepted into sessions.",
         figures.accepted),
        ("searchmon_late_events", "Events behind the watermark for a closed session "
         "(also rejected with reason too_late).", figures.rejected.get(Reason.TOO_LATE, 0)),
        ("searchmon_duplicate_events", "Events whose event_id was seen before "
         "(also rejected with reason duplicate).", figures.rejected.get(Reason.DUPLICATE, 0)),
        ("searchmon_ignored_actions", "Valid UBI events with an action that is not measured.",
         figures.ignored_actions),
        ("searchmon_unmatched_clicks", "Clicks whose query_id is not among their session's "
         "recent queries (counted under the session's class).", figures.unmatched_clicks),
        ("searchmon_unmatched_events", "Clicks, impressions and conversions whose query never "
         "came to their session (data quality).", figures.unmatched_events),
        ("searchmon_reused_query_ids", "Queries whose query_id came before with another "
         "session or text (data quality).", figures.reused_query_ids),
        ("searchmon_impressions_without_position", "Impressions that carry no position "
         "(data quality: they rebuild no served list).", figures.impressions_without_position),
        ("searchmon_merged_query_records", "UBI query records merged into a search counted "
         "already (same query_id, session and text).", figures.merged_query_records),
        ("searchmon_judged_messages", "judgment and qrels messages received.",
         figures.judged_messages),
    ]
    for name, text, value in simple:
        yield CounterMetricFamily(name, text, value=value)
    yield GaugeMetricFamily(
        "searchmon_open_sessions", "Sessions currently open.", value=figures.open_sessions
    )
    yield GaugeMetricFamily(
        "searchmon_query_classes", "Query classes in use, 'other' included.",
        value=len({part.slice[0] for part in figures.slices}),
    )
    yield GaugeMetricFamily(
        "searchmon_slices", "Slices in use (label sets of the online families).",
        value=len(figures.slices),
    )
    folded = CounterMetricFamily(
        "searchmon_slice_values_folded", "Queries whose value of a dimension counted as "
        "other: outside its closed value set, or past [slices] max_series.",
        labels=["dimension"],
    )
    for name in figures.labels[1:]:
        folded.add_metric([name], figures.folded_values.get(name, 0))
    yield folded
    if figures.newest is not None:
        yield GaugeMetricFamily(
            "searchmon_last_event_timestamp_seconds", "Event time of the newest accepted event.",
            value=figures.newest,
        )
    if figures.watermark is not None:
        yield GaugeMetricFamily(
            "searchmon_watermark_timestamp_seconds",
            "Event time up to which sessions are closed (newest event time - allowed lateness).",
            value=figures.watermark,
        )
    info = InfoMetricFamily(
        "searchmon_build", "Versions of the running searchmon, its Python and kafka-python."
    )
    info.add_metric([], BUILD)
    yield info


def _version_of(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "none"


BUILD = {
    "version": __version__,
    "python": platform.python_version(),
    "kafka_python": _version_of("kafka-python"),
}
"""The labels of ``searchmon_build_info``."""


def consumer_metrics(
    lag: dict[tuple[str, int], int], connected: bool, checkpoint_time: float | None,
    dead_lettered: int, checkpoint_failures: int = 0, dead_letters_truncated: int = 0,
    dead_letters_pending: int = 0, clock_jumps: int = 0,
) -> Iterator[Metric]:
    """The families only `searchmon run` has: Kafka consumer and checkpoint health."""
    families = GaugeMetricFamily(
        "searchmon_consumer_lag", "Messages behind the partition's fetch highwater mark.",
        labels=["topic", "partition"],
    )
    for (topic, number), value in sorted(lag.items()):
        families.add_metric([topic, str(number)], value)
    yield families
    yield GaugeMetricFamily(
        "searchmon_broker_connected", "1 while the consumer is connected to Kafka.",
        value=1.0 if connected else 0.0,
    )
    if checkpoint_time is not None:
        yield GaugeMetricFamily(
            "searchmon_checkpoint_timestamp_seconds",
            "Wall-clock time of the newest durable checkpoint (what /metrics shows); the "
            "process start until the first one.",
            value=checkpoint_time,
        )
    yield CounterMetricFamily(
        "searchmon_checkpoint_failures",
        "Checkpoints that failed (state or ledger not written); each is retried.",
        value=checkpoint_failures,
    )
    yield CounterMetricFamily(
        "searchmon_dead_lettered",
        "Rejected messages copied to the dead-letter topic (acknowledged by it).",
        value=dead_lettered,
    )
    yield CounterMetricFamily(
        "searchmon_dead_letters_truncated",
        "Dead-letter copies cut to fit the producer's or the broker's size limit.",
        value=dead_letters_truncated,
    )
    yield GaugeMetricFamily(
        "searchmon_dead_letters_pending",
        "Dead-letter copies held until the dead-letter topic acknowledges them (bounded: "
        "consumption pauses at the most).",
        value=dead_letters_pending,
    )
    yield CounterMetricFamily(
        "searchmon_clock_jumps",
        "Steps back of the wall clock (future timestamps are judged against the clock "
        "before the step).",
        value=clock_jumps,
    )
