"""Every exported metric family, its help text and labels, and the collector that reads them.

The collector reads the pipeline's state at scrape time (no lock or label lookup per event).
Counters and histograms are the source of truth; ratios are left to Prometheus recording
rules. Every ``query_class`` series exists from start-up, at 0.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from monitor import __version__
from monitor.compiled import running_compiled
from monitor.config import window_label
from monitor.core.experiments import MEASURES, analyse, preference
from monitor.core.export import (
    SLICE_LABELS,
    ExperimentFigures,
    Export,
    HistogramFigures,
    MeanFigures,
    VerdictFigures,
)
from monitor.core.interleaving import delta
from monitor.core.judged import SCORE_BUCKETS
from monitor.core.online import COUNTERS, HISTOGRAMS, OnlineCounters
from monitor.inputs.events import Reason


def _version_of(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "none"


BUILD = {
    "version": __version__,
    "python": platform.python_version(),
    "kafka_python": _version_of("kafka-python"),
    "compiled": "true" if running_compiled() else "false",
}
"""The labels of ``searchmon_build_info``."""


SLICE = "<slice>"
"""In a family's labels: the labels of a slice (``query_class``, then each dimension)."""


@dataclass(frozen=True)
class Family:
    """One exported family: its name (counters without ``_total``), type, help, labels,
    unit, and how its samples are read from an ``Export``: label values and a value (a
    ``HistogramFigures`` for a histogram, a label dict for info). ``optional``: the family
    is left out while it has no sample (a time not known yet)."""

    name: str
    kind: Literal["counter", "gauge", "histogram", "info"]
    help: str
    read: Callable[[Export], Iterable[tuple[Sequence[str], Any]]]
    labels: tuple[str, ...] = ()
    unit: str = ""
    bounds: tuple[float, ...] = ()
    optional: bool = False

    def label_names(self, figures: Export | None) -> list[str]:
        slice_labels = figures.labels if figures is not None else SLICE_LABELS
        return [name for label in self.labels
                for name in (slice_labels if label == SLICE else (label,))]

    def empty(self, figures: Export | None = None) -> Metric:
        labels = self.label_names(figures)
        if self.kind == "counter":
            return CounterMetricFamily(self.name, self.help, labels=labels, unit=self.unit)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=labels, unit=self.unit)
        if self.kind == "histogram":
            return HistogramMetricFamily(self.name, self.help, labels=labels, unit=self.unit)
        return InfoMetricFamily(self.name, self.help, labels=labels)

    def metric(self, figures: Export) -> Metric | None:
        """The family with its samples (None: ``optional`` and none)."""
        metric = self.empty(figures)
        added = False
        for labels, value in self.read(figures):
            added = True
            if isinstance(metric, HistogramMetricFamily):
                _add_histogram(metric, list(labels), self.bounds, value)
            else:
                metric.add_metric(list(labels), value)  # type: ignore[attr-defined]
        return None if self.optional and not added else metric


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


def _one(value: Callable[[Export], float | None]) -> Callable[
    [Export], Iterable[tuple[Sequence[str], Any]]
]:
    """A family of one sample without labels (none while ``value`` is None)."""
    def read(figures: Export) -> Iterable[tuple[Sequence[str], Any]]:
        found = value(figures)
        return [] if found is None else [((), found)]
    return read


def _online(i: int, histogram: bool) -> Callable[[Export], Iterable[tuple[Sequence[str], Any]]]:
    def read(figures: Export) -> Iterable[tuple[Sequence[str], Any]]:
        if histogram:
            return ((part.slice, part.histograms[i]) for part in figures.slices)
        return ((part.slice, part.counts[i]) for part in figures.slices)
    return read


def _unit(name: str) -> str:
    return "seconds" if name.endswith("_seconds") else ""


def _means(pick: Callable[[MeanFigures], float]) -> Callable[
    [Export], Iterable[tuple[Sequence[str], Any]]
]:
    def read(figures: Export) -> Iterable[tuple[Sequence[str], Any]]:
        offline = figures.offline
        for entry in offline.means if offline is not None else ():
            window = (f"last_{entry.window}_samples" if isinstance(entry.window, int)
                      else window_label(entry.window))
            yield (*entry.slice, entry.measure, entry.source, window), pick(entry)
    return read


def _verdicts(
    pick: Callable[[VerdictFigures], Iterable[tuple[Sequence[str], float]]]
) -> Callable[[Export], Iterable[tuple[Sequence[str], Any]]]:
    def read(figures: Export) -> Iterable[tuple[Sequence[str], Any]]:
        offline = figures.offline
        for verdict in offline.verdicts if offline is not None else ():
            for extra, value in pick(verdict):
                yield (*verdict.slice, verdict.measure, *extra), value
    return read


def _judged(verdict: VerdictFigures, value: float) -> list[tuple[Sequence[str], float]]:
    """A sample of a verdict's family, present while the verdict has one."""
    return [((), value)] if verdict.regression is not None else []


def _flagged(verdict: VerdictFigures, value: float) -> list[tuple[Sequence[str], float]]:
    """A sample present while the verdict flags a regression."""
    return [((), value)] if verdict.regression and verdict.since_time is not None else []


def _counter(name: str, help: str, value: Callable[[Export], int]) -> Family:
    return Family(name, "counter", help, _one(value))


_preferred = functools.lru_cache(maxsize=32)(preference)
"""A pair's preference with its bootstrap interval, once per figures (a scrape's)."""


@functools.lru_cache(maxsize=16)
def _analysed(figures: ExperimentFigures) -> dict[str, Any]:
    """``analyse`` once per experiment's figures (each family reads it)."""
    return analyse(figures)


def _variants(pick: Callable[[dict[str, Any]], Any]) -> Callable[
    [Export], Iterable[tuple[Sequence[str], Any]]
]:
    def read(figures: Export) -> Iterable[tuple[Sequence[str], Any]]:
        for experiment in figures.experiments:
            for name, entry in _analysed(experiment)["variants"].items():
                for extra, value in pick(entry):
                    if value is not None:
                        yield (experiment.id, name, *extra), value
    return read


def _comparisons(pick: Callable[[dict[str, Any]], Iterable[tuple[Sequence[str], Any]]]) -> (
    Callable[[Export], Iterable[tuple[Sequence[str], Any]]]
):
    def read(figures: Export) -> Iterable[tuple[Sequence[str], Any]]:
        for experiment in figures.experiments:
            for c in _analysed(experiment)["comparisons"]:
                for extra, value in pick(c):
                    if value is not None:
                        yield (experiment.id, c["treatment"], c["metric"], *extra), value
    return read


VERDICTS = {"better": 1.0, "inconclusive": 0.0, "worse": -1.0}
EXPERIMENT_FAMILIES = (
    Family("search_experiment_units", "gauge", "Randomization units seen per variant "
           "(exact up to max_units, then estimated).",
           _variants(lambda v: [((), v["units"])]), ("experiment", "variant")),
    Family("search_experiment_value", "gauge", "A metric of a variant, pooled over its units "
           "(for example ctr: clicked queries / queries).",
           _variants(lambda v: [((m.name,), v[m.name]) for m in MEASURES]),
           ("experiment", "variant", "metric")),
    Family("search_experiment_delta", "gauge", "Treatment minus control of a metric.",
           _comparisons(lambda c: [((), c["delta"])]), ("experiment", "variant", "metric")),
    Family("search_experiment_relative_lift", "gauge",
           "Treatment minus control over control (absent when the control is 0).",
           _comparisons(lambda c: [((), c["relative"])]), ("experiment", "variant", "metric")),
    Family("search_experiment_interval", "gauge", "Bounds of the 95% interval of the delta: "
           "fixed-horizon (ci95) and always-valid confidence sequence (cs95).",
           _comparisons(lambda c: [(("ci95", "low"), c["ci95"][0]), (("ci95", "high"),
                                   c["ci95"][1]), (("cs95", "low"), c["cs95"][0]),
                                   (("cs95", "high"), c["cs95"][1])]),
           ("experiment", "variant", "metric", "kind", "bound")),
    Family("search_experiment_pvalue", "gauge", "p-value of the delta: fixed-horizon (fixed), "
           "Holm-adjusted across variants and metrics (holm), always-valid (always_valid).",
           _comparisons(lambda c: [(("fixed",), c["p"]), (("holm",), c["p_adjusted"]),
                                   (("always_valid",), c["p_always_valid"])]),
           ("experiment", "variant", "metric", "kind")),
    Family("search_experiment_verdict", "gauge", "The always-valid verdict of a treatment on a "
           "metric: 1 better, 0 inconclusive, -1 worse; absent while a sample ratio mismatch "
           "withholds it.",
           _comparisons(lambda c: [((), VERDICTS.get(c["verdict"] or ""))]),
           ("experiment", "variant", "metric")),
    Family("search_interleaving_queries", "counter", "Team-draft interleaved queries with a "
           "credited click, by outcome: won by ranker a, by ranker b, or tied (a before b in "
           "name order).",
           lambda f: (((p.a, p.b, outcome), count) for p in f.interleaving
                      for outcome, count in (("a", p.wins_a), ("b", p.wins_b),
                                             ("tie", p.ties))),
           ("a", "b", "outcome")),
    Family("search_interleaving_preference", "gauge", "Delta_AB = (wins_a + ties/2) / "
           "queries - 0.5: positive when ranker a is preferred.",
           lambda f: (((p.a, p.b), found) for p in f.interleaving
                      if (found := delta(p.wins_a, p.wins_b, p.ties)) is not None),
           ("a", "b")),
    Family("search_interleaving_interval", "gauge", "Bounds of the 95% bootstrap interval of "
           "search_interleaving_preference.",
           lambda f: (((p.a, p.b, bound), value) for p in f.interleaving
                      if (ci := _preferred(p)["ci95"]) is not None
                      for bound, value in (("low", ci[0]), ("high", ci[1]))),
           ("a", "b", "bound")),
    Family("search_experiment_srm_pvalue", "gauge", "Chi-square p-value of the units per "
           "variant against the configured split (sample ratio mismatch below 0.001).",
           lambda f: [((e.id,), _analysed(e)["srm"]["p"]) for e in f.experiments],
           ("experiment",)),
    Family("search_experiment_sample_ratio_mismatch", "gauge", "1 while the units per variant "
           "are off the configured split (p < 0.001): the verdicts are withheld.",
           lambda f: [((e.id,), 1.0 if _analysed(e)["srm"]["mismatch"] else 0.0)
                      for e in f.experiments],
           ("experiment",)),
)
"""The experiments' families (``monitor.core.experiments.analyse``)."""


CATALOGUE: tuple[Family, ...] = (
    *(Family(family.name, "counter", family.help, _online(i, False), (SLICE,))
      for i, family in enumerate(COUNTERS)),
    *(Family(family.name, "histogram", family.help, _online(i, True), (SLICE,),
             _unit(family.name), getattr(OnlineCounters(), family.attribute).bounds)
      for i, family in enumerate(HISTOGRAMS)),
    Family("search_judged_score", "histogram", "Per-query scores of judged queries.",
           lambda figures: (((*s.slice, s.measure, s.source), s.histogram)
                            for s in figures.scores),
           (SLICE, "measure", "source"), bounds=SCORE_BUCKETS),
    Family("search_judged_score_mean", "gauge", "Rolling mean of judged-query scores (absent "
           "when the window is empty).", _means(lambda m: m.mean),
           (SLICE, "measure", "source", "window")),
    Family("search_judged_queries", "gauge", "Judged queries behind search_judged_score_mean.",
           _means(lambda m: m.queries), (SLICE, "measure", "source", "window")),
    Family("search_judged_regression", "gauge",
           "1 when the latest judged sample regressed against its baseline (drop > min_drop "
           "and randomization-test p < max_p_value), else 0; absent without a verdict.",
           _verdicts(lambda v: _judged(v, 1.0 if v.regression else 0.0)), (SLICE, "measure")),
    Family("search_judged_delta", "gauge",
           "Latest sample minus baseline: mean paired difference.",
           _verdicts(lambda v: _judged(v, v.delta)), (SLICE, "measure")),
    Family("search_judged_pvalue", "gauge", "Two-sided p-value of the paired test of the "
           "latest sample against its baseline.", _verdicts(
               lambda v: [(("permutation",), v.p_permutation), (("t",), v.p_t)]
               if v.regression is not None else []
           ), (SLICE, "measure", "test")),
    Family("search_judged_shared_queries", "gauge",
           "Queries the latest sample shares with its baseline.",
           _verdicts(lambda v: [((), v.shared)]), (SLICE, "measure")),
    Family("search_judged_regression_since_timestamp_seconds", "gauge",
           "Event time of the sample a regression still flagged was first flagged at (present "
           "while search_judged_regression is 1).",
           _verdicts(lambda v: _flagged(v, v.since_time or 0.0)), (SLICE, "measure"),
           "seconds"),
    Family("search_judged_regression_samples", "gauge",
           "Samples in a row flagged as a regression, up to the latest (present while "
           "search_judged_regression is 1).",
           _verdicts(lambda v: _flagged(v, v.flagged_samples)), (SLICE, "measure")),
    Family("search_judged_rater_agreement", "gauge",
           "The raters' agreement over the newest judged sample that carried one (statistic: "
           "raters, cohen_kappa, fleiss_kappa, krippendorff_alpha).",
           lambda f: [((name,), value) for name, value in
                      (f.offline.agreement if f.offline is not None else ())],
           ("statistic",), optional=True),
    Family("search_judged_last_sample_timestamp_seconds", "gauge",
           "Event time of the newest message of the newest completed judged sample.",
           _one(lambda f: f.offline.last_sample_time if f.offline is not None else None),
           unit="seconds", optional=True),
    *EXPERIMENT_FAMILIES,
    _counter("searchmon_judged_scores_skipped",
             "Judged-query scores left out because the measure skips queries without relevant "
             "documents (no_rel=skip).", lambda f: f.skipped_scores),
    _counter("searchmon_events_read", "Messages read from every source.",
             lambda f: f.events_read),
    Family("searchmon_events_rejected", "counter", "Messages rejected, by reason.",
           lambda f: (((reason,), count) for reason, count in f.rejected.items()), ("reason",)),
    _counter("searchmon_events_accepted", "Search-log events accepted into sessions.",
             lambda f: f.accepted),
    _counter("searchmon_late_events", "Events behind the watermark for a closed session "
             "(also rejected with reason too_late).",
             lambda f: f.rejected.get(Reason.TOO_LATE, 0)),
    _counter("searchmon_duplicate_events", "Events whose event_id was seen before "
             "(also rejected with reason duplicate).",
             lambda f: f.rejected.get(Reason.DUPLICATE, 0)),
    _counter("searchmon_ignored_actions", "Valid UBI events with an action that is not "
             "measured.", lambda f: f.ignored_actions),
    _counter("searchmon_unmatched_clicks", "Clicks whose query_id is not among their "
             "session's recent queries (counted under the session's class).",
             lambda f: f.unmatched_clicks),
    _counter("searchmon_unmatched_events", "Clicks, impressions and conversions whose query "
             "never came to their session (data quality).", lambda f: f.unmatched_events),
    _counter("searchmon_reused_query_ids", "Queries whose query_id came before with another "
             "session or text (data quality).", lambda f: f.reused_query_ids),
    _counter("searchmon_unlisted_queries", "Queries counted without their result list "
             "(data quality).", lambda f: f.unlisted_queries),
    _counter("searchmon_impressions_without_position", "Impressions that carry no position "
             "(data quality: they rebuild no served list).",
             lambda f: f.impressions_without_position),
    _counter("searchmon_merged_query_records", "UBI query records merged into a search "
             "counted already (same query_id, session and text).",
             lambda f: f.merged_query_records),
    _counter("searchmon_judged_messages", "judgment and qrels messages received.",
             lambda f: f.judged_messages),
    Family("searchmon_open_sessions", "gauge", "Sessions currently open.",
           _one(lambda f: f.open_sessions)),
    Family("searchmon_query_classes", "gauge", "Query classes in use, 'other' included.",
           _one(lambda f: len({part.slice[0] for part in f.slices}))),
    Family("searchmon_slices", "gauge", "Slices in use (label sets of the online families).",
           _one(lambda f: len(f.slices))),
    Family("searchmon_slice_values_folded", "counter", "Queries whose value of a dimension "
           "counted as other: outside its closed value set, or past [slices] max_series.",
           lambda f: (((name,), f.folded_values.get(name, 0)) for name in f.labels[1:]),
           ("dimension",)),
    Family("searchmon_last_event_timestamp_seconds", "gauge",
           "Event time of the newest accepted event.", _one(lambda f: f.newest),
           unit="seconds", optional=True),
    Family("searchmon_watermark_timestamp_seconds", "gauge",
           "Event time up to which sessions are closed (newest event time - allowed lateness).",
           _one(lambda f: f.watermark), unit="seconds", optional=True),
    Family("searchmon_build", "info",
           "Versions of the running searchmon, its Python and kafka-python; whether its hot path "
           "runs compiled.",
           lambda f: [((), BUILD)]),
)
"""Every family ``/metrics`` exports from an ``Export``, in export order: declared once,
read by the collector, its ``describe()`` and the metrics reference's test. The online
families come from the online catalogue (``monitor.core.online``), where a new counter is
one entry."""


class ExportCollector(Collector):
    """Renders an ``Export`` when Prometheus scrapes: every family of ``CATALOGUE``.

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
        return [family.empty() for family in CATALOGUE]

    def collect(self) -> Iterator[Metric]:
        figures = self._export()
        for family in CATALOGUE:
            metric = family.metric(figures)
            if metric is not None:
                yield metric
        yield from self._extra()



def served_info(scheme: str) -> InfoMetricFamily:
    """``searchmon_http_info``: the scheme this process serves its status page and
    ``/metrics`` with (``https`` once ``[http]`` has its TLS files), for the links of the
    alerts' ``status_page`` annotation (the instance is the scrape target's)."""
    return InfoMetricFamily(
        "searchmon_http", "How this process serves its status page and /metrics: scheme.",
        value={"scheme": scheme},
    )


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
