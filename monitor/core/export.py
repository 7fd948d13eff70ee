"""What ``/metrics`` shows: an immutable snapshot of a pipeline's figures, and the arithmetic
that combines the snapshots of several partitions and replicas.

An ``Export`` is plain data keyed by names (slice label values, measure names, reasons), never
by a pipeline's class indexes, so snapshots of pipelines that learned their classes in another
order add up. Counters (and histograms, which are counters too) are added with a sign; gauges
(open sessions, the newest event time) come from the partitions owned now; the offline gauges
(window means, verdicts) from the one pipeline that holds the offline state.

A slice is the tuple of label values (``Export.labels``: ``query_class``, then each dimension
of ``[slices]``) that a series carries; a new dimension is a new label in the tuple, not a new
code path.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

from monitor.core.classes import ALL, OTHER
from monitor.core.judged import OVERALL, SCORE_BUCKETS, SOURCES
from monitor.core.online import OnlineCounters
from monitor.core.pipeline import Pipeline
from monitor.core.slices import QUERY_CLASS
from monitor.core.slices import Slice as Slice
from monitor.core.snapshots import Float, Int, finite_or_none, require
from monitor.inputs.events import Reason

SLICE_LABELS: tuple[str, ...] = (QUERY_CLASS,)
"""The labels of a slice without dimensions."""


@dataclass(frozen=True)
class HistogramFigures:
    counts: tuple[Int, ...]
    """Non-cumulative bucket counts; the last bucket is +Inf."""
    sum: Float


@dataclass(frozen=True)
class SliceFigures:
    """The online counters of one slice: ``OnlineCounters.COUNTS`` and ``HISTOGRAMS`` order."""

    slice: Slice
    counts: tuple[Int, ...]
    histograms: tuple[HistogramFigures, ...]

    def count(self, name: str) -> int:
        """The counter ``name`` of ``OnlineCounters.COUNTS``."""
        return self.counts[OnlineCounters.COUNTS.index(name)]


@dataclass(frozen=True)
class ScoreFigures:
    """The judged-score histogram of one source, slice (``all``: overall) and measure."""

    source: str
    slice: Slice
    measure: str
    histogram: HistogramFigures


@dataclass(frozen=True)
class MeanFigures:
    slice: Slice
    measure: str
    source: str
    window: Float | Int
    """Seconds of a time window (float), or a number of samples (int)."""
    mean: Float
    queries: Int


@dataclass(frozen=True)
class VerdictFigures:
    slice: Slice
    measure: str
    shared: Int
    regression: bool | None
    delta: Float
    p_permutation: Float
    p_t: Float
    sample_id: str = ""
    baseline_id: str = ""
    since_sample: str | None = None
    """A regression: the sample it was first flagged at (None: not flagged)."""
    since_time: Float | None = None
    """That sample's event time (its last judgment)."""
    flagged_samples: Int = 0
    """Samples in a row flagged, that one included."""


@dataclass(frozen=True)
class AcceptanceFigures:
    """A baseline accepted by a ``baseline`` message: ``query_class`` and ``measure`` None
    mean every one."""

    time: Float
    sample_id: str
    query_class: str | None
    measure: str | None
    reason: str
    by: str
    applied: bool


@dataclass(frozen=True)
class TrendFigures:
    """The mean of one class (``all``: overall) and measure in each completed sample the
    offline state keeps (the last ``max(last_samples)``), oldest first."""

    slice: Slice
    measure: str
    means: tuple[Float, ...]


@dataclass(frozen=True)
class CurveFigures:
    """The mean interpolated precision at the eleven recall levels (0.0, 0.1, ..., 1.0) of
    one class (``all``: overall) in the newest completed sample and in its baseline (empty:
    none), with the number of queries of each mean."""

    slice: Slice
    sample_id: str
    precision: tuple[Float, ...]
    queries: Int
    baseline_id: str | None = None
    baseline: tuple[Float, ...] = ()
    baseline_queries: Int = 0


@dataclass(frozen=True)
class OfflineFigures:
    """Gauges of the offline state: they come from its one owner, never added up."""

    means: tuple[MeanFigures, ...] = ()
    verdicts: tuple[VerdictFigures, ...] = ()
    last_sample_time: Float | None = None
    acceptances: tuple[AcceptanceFigures, ...] = ()
    trends: tuple[TrendFigures, ...] = ()
    curves: tuple[CurveFigures, ...] = ()
    agreement: tuple[tuple[str, Float], ...] = ()
    """The raters' agreement of the newest sample that gave one (statistic, value)."""
    agreement_sample: str | None = None


@dataclass(frozen=True)
class VariantFigures:
    """One variant of an experiment: its units and its sums per bucket (counters)."""

    name: str
    share: Float
    """Its intended share of the units."""
    units: Int
    approximate: bool
    """Whether ``units`` is an estimate (past ``max_units``)."""
    sums: tuple[tuple[Float, ...], ...]
    """Per metric of ``monitor.core.experiments.METRICS``, per bucket."""


@dataclass(frozen=True)
class ExperimentFigures:
    id: str
    unit: str
    variants: tuple[VariantFigures, ...]
    """The control first."""


@dataclass(frozen=True)
class InterleavingFigures:
    """Team-draft interleaving of rankers ``a`` and ``b`` (in name order): queries won by
    each and tied (counters)."""

    a: str
    b: str
    wins_a: Int
    wins_b: Int
    ties: Int


@dataclass(frozen=True)
class Export:
    slices: tuple[SliceFigures, ...] = ()
    labels: tuple[str, ...] = SLICE_LABELS
    """The label of each value of a slice: ``query_class``, then the dimensions."""
    accepted: Int = 0
    rejected: dict[str, Int] = field(
        default_factory=lambda: dict.fromkeys((r.value for r in Reason), 0)
    )
    ignored_actions: Int = 0
    judged_messages: Int = 0
    unmatched_clicks: Int = 0
    unmatched_events: Int = 0
    """Clicks, impressions and conversions whose query never came (data quality)."""
    reused_query_ids: Int = 0
    impressions_without_position: Int = 0
    unlisted_queries: Int = 0
    """Queries counted without their result list (data quality)."""
    merged_query_records: Int = 0
    folded_values: dict[str, Int] = field(default_factory=dict)
    """Per dimension: queries whose value counted as ``other``."""
    scores: tuple[ScoreFigures, ...] = ()
    skipped_scores: Int = 0
    open_sessions: Int = 0
    newest: Float | None = None
    """Event time of the newest accepted event (None: none yet)."""
    watermark: Float | None = None
    offline: OfflineFigures | None = None
    experiments: tuple[ExperimentFigures, ...] = ()
    interleaving: tuple[InterleavingFigures, ...] = ()

    @property
    def events_read(self) -> int:
        """Every message fed: accepted, rejected, ignored, merged or judged."""
        return (
            self.accepted + sum(self.rejected.values()) + self.ignored_actions
            + self.judged_messages + self.merged_query_records
        )

    def slice(self, values: Slice) -> SliceFigures | None:
        return next((s for s in self.slices if s.slice == values), None)


_HISTOGRAM_SIZES = tuple(len(h.bounds) + 1 for _, h in OnlineCounters().histograms())


def check(figures: Export) -> None:
    """``StateError`` unless ``figures`` has the shape this version exports (an export read
    back from a ledger is data: it is checked before anything adds it up)."""
    slices = [figures.slice for figures in figures.slices]
    require(len(set(slices)) == len(slices), "export: a slice twice")
    width = len(figures.labels)
    require(width >= 1 and figures.labels[0] == QUERY_CLASS
            and len(set(figures.labels)) == width, "export: labels not of a slice")
    for part in figures.slices:
        sizes = tuple(len(h.counts) for h in part.histograms)
        require(
            len(part.slice) == width
            and len(part.counts) <= len(OnlineCounters.COUNTS)
            and sizes == _HISTOGRAM_SIZES[:len(sizes)],
            "export: online counters not of this version",
        )
    for score in figures.scores:
        require(
            score.source in SOURCES and len(score.slice) == width
            and len(score.histogram.counts) == len(SCORE_BUCKETS) + 1,
            "export: judged scores not of this version",
        )
    require(set(figures.rejected) <= {r.value for r in Reason}, "export: an unknown reason")


def padded(figures: Export) -> Export:
    """``figures`` with the online counters and histograms added to the catalogue since it
    was taken (they come last) at 0: what a ledger written by an earlier version exported."""
    counts, sizes = len(OnlineCounters.COUNTS), _HISTOGRAM_SIZES
    if all(len(p.counts) == counts and len(p.histograms) == len(sizes) for p in figures.slices):
        return figures
    return replace(figures, slices=tuple(
        replace(
            part,
            counts=(*part.counts, *([0] * (counts - len(part.counts)))),
            histograms=(*part.histograms, *(
                HistogramFigures((0,) * size, 0.0) for size in sizes[len(part.histograms):]
            )),
        )
        for part in figures.slices
    ))


def export(pipeline: Pipeline) -> Export:
    """The figures of one pipeline: every slice it knows (configured classes from the start);
    an alias's online figures added to those of the slice it shares its labels with."""
    slices_of = pipeline.slices
    names, canonical = slices_of.names, slices_of.canonical
    counters, health, judged = pipeline.counters, pipeline.health, pipeline.judged
    columns = [getattr(counters, name) for name in OnlineCounters.COUNTS]
    histograms = [histogram for _, histogram in counters.histograms()]
    slices = tuple(
        SliceFigures(
            names[klass], tuple(column[klass] for column in columns),
            tuple(HistogramFigures(tuple(h.counts[klass]), h.sums[klass]) for h in histograms),
        )
        for klass in range(len(names))
    )
    measures = [str(spec) for spec in judged.specs]
    plain = not slices_of.dimensions
    # the sources of judged scores: labels from clicks only with [implicit] enabled
    sources = SOURCES if pipeline.config.implicit.enabled else SOURCES[:2]
    # the overall offline figures: query_class "all", no dimension value (never "all" there)
    overall = (ALL, *("" for _ in slices_of.dimensions))
    classes = [*((k, names[k]) for k in range(len(names)) if canonical(k)), (OVERALL, overall)]
    empty = (0,) * (len(SCORE_BUCKETS) + 1)
    scores = tuple(
        ScoreFigures(
            source, name, measure,
            HistogramFigures(
                tuple(judged.histograms.get((source, klass, m), empty)),
                judged.histogram_sums.get((source, klass, m), 0.0),
            ),
        )
        for source in sources for klass, name in classes for m, measure in enumerate(measures)
        # every class's series from start-up; with dimensions, the slices judged so far
        if plain or klass == OVERALL or (source, klass, m) in judged.histograms
    )
    offline = None
    if judged.active:
        means = []
        for klass, name in classes:
            for m, measure in enumerate(measures):
                for source in SOURCES:
                    for length in judged.config.windows:
                        found = judged.time_mean(source, length, klass, m)
                        if found is not None:
                            means.append(MeanFigures(name, measure, source, float(length),
                                                     *found))
                for last in judged.config.last_samples:
                    found = judged.samples_mean(last, klass, m)
                    if found is not None:
                        means.append(MeanFigures(name, measure, "sample", int(last), *found))
        verdicts = []
        for (klass, m), v in sorted(judged.verdicts.items()):
            if klass != OVERALL and not canonical(klass):
                continue
            since = judged.flagged.get((klass, m)) if v.regression else None
            verdicts.append(VerdictFigures(
                overall if klass == OVERALL else names[klass], measures[m],
                v.comparison.shared, v.regression, v.comparison.delta,
                v.comparison.p_permutation, v.comparison.p_t, v.sample_id, v.baseline_id,
                since.sample_id if since is not None else None,
                since.time if since is not None else None,
                since.samples if since is not None else 0,
            ))
        acceptances = tuple(
            AcceptanceFigures(
                a.time, a.sample_id, a.query_class,
                None if a.measure is None else measures[a.measure], a.reason, a.by, a.applied,
            )
            for a in judged.acceptances
        )
        trends: dict[tuple[Slice, str], list[float]] = {}
        for summary in judged.completed:
            for (klass, m), (total, count) in sorted(summary.cells.items()):
                if count and (klass == OVERALL or canonical(klass)):
                    name = overall if klass == OVERALL else names[klass]
                    trends.setdefault((name, measures[m]), []).append(total / count)
        curves = []
        for klass, name in classes:
            pair = judged.curves(klass)
            if pair is not None and (klass == OVERALL or canonical(klass)):
                curves.append(CurveFigures(
                    name, pair.sample_id, pair.curve, pair.queries, pair.baseline_id,
                    pair.baseline or (), pair.baseline_queries,
                ))
        offline = OfflineFigures(
            tuple(means), tuple(verdicts), judged.last_completed_time, acceptances,
            tuple(TrendFigures(name, measure, tuple(values))
                  for (name, measure), values in trends.items()),
            tuple(curves),
            tuple(judged.agreement[1].items()) if judged.agreement else (),
            judged.agreement[0] if judged.agreement else None,
        )
    sessions = pipeline.sessions
    figures = Export(
        slices=slices, accepted=health.accepted,
        rejected={reason.value: count for reason, count in health.rejected.items()},
        ignored_actions=health.ignored_actions, judged_messages=health.judged_messages,
        unmatched_clicks=sessions.unmatched_clicks, unmatched_events=sessions.unmatched_events,
        reused_query_ids=health.reused_query_ids,
        impressions_without_position=health.impressions_without_position,
        unlisted_queries=health.unlisted_queries,
        merged_query_records=health.merged_query_records,
        scores=scores, skipped_scores=judged.skipped,
        open_sessions=sessions.open_count, newest=finite_or_none(sessions.newest),
        watermark=finite_or_none(sessions.watermark), offline=offline,
        labels=slices_of.labels, folded_values=dict(health.folded_values),
        experiments=_experiments(pipeline),
        interleaving=tuple(
            InterleavingFigures(a, b, counts.wins_a, counts.wins_b, counts.ties)
            for (a, b), counts in ((pair, preference.snapshot())
                                   for pair, preference in pipeline.experiments.pairs.items())
        ),
    )
    if len(set(names)) < len(names):  # aliases: added up under their labels
        figures = combine([(figures, 1)], live=[figures], offline=figures)
    return figures


def _experiments(pipeline: Pipeline) -> tuple[ExperimentFigures, ...]:
    experiments = pipeline.experiments
    return tuple(
        ExperimentFigures(config.id, config.unit, tuple(
            VariantFigures(
                name, share, units.count(), units.approximate,
                tuple(tuple(float(x) for x in row) for row in sums),
            )
            for name, share, sums, units in zip(config.variants, config.shares,
                                                 experiments.sums[e], experiments.units[e],
                                                 strict=True)
        ))
        for e, config in enumerate(experiments.configs)
    )


def _combined_experiments(
    counted: Sequence[tuple[Export, int]]
) -> tuple[ExperimentFigures, ...]:
    """The experiments' sums and units added up (signed), matched by id and variant name."""
    out: dict[str, ExperimentFigures] = {}
    for part, sign in counted:
        for experiment in part.experiments:
            found = out.get(experiment.id)
            if found is None:
                out[experiment.id] = ExperimentFigures(experiment.id, experiment.unit, tuple(
                    replace(v, units=sign * v.units,
                            sums=tuple(tuple(sign * x for x in row) for row in v.sums))
                    for v in experiment.variants
                ))
                continue
            by_name = {v.name: v for v in experiment.variants}
            variants = []
            for v in found.variants:
                other = by_name.get(v.name)
                if other is None or len(other.sums) != len(v.sums) or any(
                    len(a) != len(b) for a, b in zip(other.sums, v.sums, strict=True)
                ):
                    variants.append(v)
                    continue
                variants.append(replace(
                    v, units=v.units + sign * other.units,
                    approximate=v.approximate or other.approximate,
                    sums=tuple(tuple(x + sign * y for x, y in zip(a, b, strict=True))
                               for a, b in zip(v.sums, other.sums, strict=True)),
                ))
            out[experiment.id] = replace(found, variants=tuple(variants))
    return tuple(out.values())


def _combined_interleaving(
    counted: Sequence[tuple[Export, int]]
) -> tuple[InterleavingFigures, ...]:
    out: dict[tuple[str, str], list[int]] = {}
    for part, sign in counted:
        for pair in part.interleaving:
            found = out.setdefault((pair.a, pair.b), [0, 0, 0])
            found[0] += sign * pair.wins_a
            found[1] += sign * pair.wins_b
            found[2] += sign * pair.ties
    return tuple(InterleavingFigures(a, b, *counts) for (a, b), counts in out.items())


def combine(
    counted: Sequence[tuple[Export, int]],
    live: Iterable[Export] = (),
    offline: Export | None = None,
) -> Export:
    """Counters: the signed sums of ``counted`` (``(export, +1 or -1)``); gauges: from
    ``live``; the offline gauges: from ``offline``. Slices are matched by their values."""
    slices: dict[Slice, tuple[list[int], list[list[int]], list[float]]] = {}
    scores: dict[tuple[str, Slice, str], tuple[list[int], list[float]]] = {}
    rejected = dict.fromkeys((r.value for r in Reason), 0)
    accepted = ignored = judged = unmatched = skipped = orphans = reused = unplaced = 0
    merged = unlisted = 0
    folded: dict[str, int] = {}
    labels = SLICE_LABELS
    for part, sign in counted:
        labels = part.labels
        for name, count in part.folded_values.items():
            folded[name] = folded.get(name, 0) + sign * count
        for figures in part.slices:
            into = slices.get(figures.slice)
            if into is None:
                into = slices[figures.slice] = (
                    [0] * len(figures.counts),
                    [[0] * len(h.counts) for h in figures.histograms],
                    [0.0] * len(figures.histograms),
                )
            counts, buckets, sums = into
            for i, value in enumerate(figures.counts):
                counts[i] += sign * value
            for i, histogram in enumerate(figures.histograms):
                row = buckets[i]
                for b, value in enumerate(histogram.counts):
                    row[b] += sign * value
                sums[i] += sign * histogram.sum
        for score in part.scores:
            key = (score.source, score.slice, score.measure)
            found = scores.get(key)
            if found is None:
                found = scores[key] = ([0] * len(score.histogram.counts), [0.0])
            for b, value in enumerate(score.histogram.counts):
                found[0][b] += sign * value
            found[1][0] += sign * score.histogram.sum
        accepted += sign * part.accepted
        ignored += sign * part.ignored_actions
        judged += sign * part.judged_messages
        unmatched += sign * part.unmatched_clicks
        orphans += sign * part.unmatched_events
        reused += sign * part.reused_query_ids
        unplaced += sign * part.impressions_without_position
        unlisted += sign * part.unlisted_queries
        merged += sign * part.merged_query_records
        skipped += sign * part.skipped_scores
        for reason, count in part.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + sign * count
    open_sessions, newest, watermark = 0, None, None
    for part in live:
        open_sessions += part.open_sessions
        newest = _latest(newest, part.newest)
        watermark = _latest(watermark, part.watermark)
    return Export(
        slices=tuple(
            SliceFigures(key, tuple(counts), tuple(
                HistogramFigures(tuple(row), total) for row, total in zip(buckets, sums,
                                                                          strict=True)
            ))
            for key, (counts, buckets, sums) in slices.items()
        ),
        accepted=accepted, rejected=rejected, ignored_actions=ignored, judged_messages=judged,
        unmatched_clicks=unmatched, unmatched_events=orphans, reused_query_ids=reused,
        impressions_without_position=unplaced, merged_query_records=merged,
        unlisted_queries=unlisted,
        scores=tuple(
            ScoreFigures(source, key, measure, HistogramFigures(tuple(counts), total[0]))
            for (source, key, measure), (counts, total) in scores.items()
        ),
        skipped_scores=skipped, open_sessions=open_sessions, newest=newest,
        watermark=watermark, offline=offline.offline if offline is not None else None,
        labels=labels, folded_values=folded, experiments=_combined_experiments(counted),
        interleaving=_combined_interleaving(counted),
    )


def fold_classes(figures: Export, kept: Collection[str]) -> Export:
    """``figures`` with the online and judged-score counters of every query class outside
    ``kept`` (besides ``other`` and ``all``) added to ``other``: a replica's label values stay
    within its class bound however many partitions learned their classes apart."""
    def folded(values: Slice) -> Slice:
        name = values[0]
        return values if name in kept or name in (OTHER, ALL) else (OTHER, *values[1:])

    if all(folded(part.slice) == part.slice for part in figures.slices) and all(
        folded(score.slice) == score.slice for score in figures.scores
    ):
        return figures
    renamed = replace(
        figures,
        slices=tuple(replace(part, slice=folded(part.slice)) for part in figures.slices),
        scores=tuple(replace(score, slice=folded(score.slice)) for score in figures.scores),
    )
    return combine([(renamed, 1)], live=[renamed], offline=renamed)


def _latest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
