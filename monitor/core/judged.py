"""Rolling offline metrics from judged queries, and regression detection between samples.

Judged queries come from three sources: ``sample`` (``judgment`` messages, grouped by
``sample_id``), ``live`` (live ``query`` events whose normalised text has stored ``qrels``
labels) and ``implicit`` (live queries whose key has labels from a click model,
``monitor.core.implicit``). Each is scored with the configured measures by the offline
engine, in batches, and feeds rolling windows per query class. A completed sample is compared
with its baseline on the queries both share (paired by normalised query text). Pure: no
clock, no I/O.

Baselines are kept per (class, measure) cell. Under the default policy, ``last_good``, a cell's
baseline is the last sample not flagged for it: a regression stays flagged, sample after
sample, until quality comes back or an ``accept`` message makes a sample the new baseline.
``previous`` compares with the sample completed before (a lasting regression is flagged once);
any other value names a pinned sample.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np
else:
    from monitor.lazy import numpy as np

from monitor.config import OfflineConfig
from monitor.core.classes import normalise
from monitor.core.snapshots import (
    Float,
    Int,
    Layout,
    Migration,
    StateError,
    finite_or_none,
    nan_or_none,
    none_as_nan,
    or_minus_infinity,
    require,
    same_lengths,
)
from monitor.core.stats import PairedComparison, compare
from monitor.offline.curves import interpolated_precision
from monitor.offline.measures import score
from monitor.offline.ranking import DuplicateDocumentError, RankedLists
from monitor.offline.spec import RECALL_LEVELS, MeasureSpec, parse_measure

if TYPE_CHECKING:
    from monitor.offline.ranking import BoolArray, FloatArray, IntArray

SOURCES = ("sample", "live", "implicit")
SCORE_BUCKETS = tuple(i / 10 for i in range(11))
log = logging.getLogger(__name__)

AGREEMENT = frozenset(("raters", "cohen_kappa", "fleiss_kappa", "krippendorff_alpha"))
"""The raters' agreement statistics a judgment may carry (exported by name)."""

BATCH = 1024
OVERALL = -1
"""Class index of the overall figures (exported as query_class="all")."""
LAST_GOOD, PREVIOUS = "last_good", "previous"
"""Baseline policies; any other ``[offline] baseline`` names a pinned sample."""
ACCEPTANCES_KEPT = 20
"""Acceptances remembered for the page and the report (the newest)."""
CURVE_RELEVANCE = 1
"""The label from which a judged document counts as relevant for a sample's precision-recall
curve (trec_eval's default; the measures may set their own)."""
CURVE_SIZE = len(RECALL_LEVELS) + 1
"""A curve cell: the sums of each recall level's interpolated precision, then the count."""


@dataclass(slots=True)
class Pending:
    """A judged query waiting to be scored."""

    source: str
    time: float
    klass: int
    key: str
    sample_id: str | None
    ranking: Sequence[str]
    labels: dict[str, int]


MEMO_SIZE = 16384
"""Scores of (query, results, labels) remembered: a cache, rebuilt after a restart."""

WINDOW_BUCKETS = 60
"""A rolling window of length L keeps its scores in buckets of L / 60 of event time."""

Cells = dict[tuple[int, int], list[float]]
"""(class index or OVERALL, measure index) -> [sum, count] of scores."""


def _add_cells(cells: Cells, klass: int, values: Sequence[float]) -> None:
    for m, value in enumerate(values):
        if math.isnan(value):
            continue
        for k in (klass, OVERALL):
            cell = cells.get((k, m))
            if cell is None:
                cells[(k, m)] = [value, 1.0]
            else:
                cell[0] += value
                cell[1] += 1.0


def _classes_then_overall(classes: IntArray) -> tuple[list[int], IntArray]:
    """The classes of a batch's rows, then OVERALL: the cells a batch adds to, in order; and
    each row's class among them (OVERALL, last, takes every row again)."""
    present, slot = np.unique(classes, return_inverse=True)
    return [*present.tolist(), OVERALL], slot


@dataclass
class Window:
    """A rolling window of scores: sums and counts per (class, measure) in time buckets.

    Its size depends on the configuration alone (buckets x classes x measures), never on how
    many queries were scored. A bucket leaves once it lies wholly before ``clock - length``,
    so the window covers between ``length`` and ``length + length / 60`` of event time; a
    query is admitted when its bucket is still inside at scoring time. What a window holds is
    then the queries of its buckets, whatever order they were scored in (partitions read at
    different paces, a restart).
    """

    length: float
    buckets: dict[int, Cells] = field(default_factory=dict)

    @property
    def width(self) -> float:
        return self.length / WINDOW_BUCKETS

    def add_batch(
        self, times: FloatArray, classes: IntArray, matrix: FloatArray, valid: BoolArray
    ) -> None:
        """Rows of scores (``valid``: not NaN) at ``times`` of ``classes``. Each (bucket,
        class) cell gets the sum of its rows' scores in their order, as one query at a time
        would add them (``np.bincount`` adds its weights in order, from 0.0)."""
        numbers, bucket_of = np.unique(
            np.floor_divide(times, self.width).astype(np.int64), return_inverse=True
        )
        names, class_of = _classes_then_overall(classes)
        width, measures = len(names), matrix.shape[1]
        size = len(numbers) * width
        # every row twice: in its (bucket, class) group, then in its bucket's OVERALL one
        groups = np.concatenate([bucket_of * width + class_of, bucket_of * width + width - 1])
        cells = (groups[:, None] * measures + np.arange(measures)).ravel()
        both = np.concatenate([valid, valid]).ravel()
        zeroed = np.where(valid, matrix, 0.0)
        sums = np.bincount(
            cells, np.concatenate([zeroed, zeroed]).ravel(), minlength=size * measures
        ).reshape(size, measures).tolist()
        counts = np.bincount(cells[both], minlength=size * measures).reshape(
            size, measures
        ).tolist()
        rows = np.bincount(groups, minlength=size).tolist()
        for b, number in enumerate(numbers.tolist()):
            bucket = self.buckets.get(number)
            if bucket is None:
                bucket = self.buckets[number] = {}
            for c, klass in enumerate(names):
                group = b * width + c
                if not rows[group]:
                    continue
                for m, (total, count) in enumerate(zip(sums[group], counts[group], strict=True)):
                    if count:
                        cell = bucket.get((klass, m))
                        if cell is None:
                            bucket[(klass, m)] = [total, float(count)]
                        else:
                            cell[0] += total
                            cell[1] += count

    def add(self, time: float, klass: int, values: Sequence[float]) -> None:
        """One query's scores (NaN: skipped) at ``time`` of ``klass``."""
        _add_cells(self.buckets.setdefault(int(time // self.width), {}), klass, values)

    def first(self, clock: float) -> int:
        """The oldest bucket kept at ``clock``."""
        return int((clock - self.length) // self.width)

    def evict(self, clock: float) -> None:
        if math.isinf(clock):
            return
        first = self.first(clock)
        for index in [i for i in self.buckets if i < first]:
            del self.buckets[index]

    def mean(self, klass: int, measure: int) -> tuple[float, int] | None:
        total, count = 0.0, 0.0
        for bucket in self.buckets.values():
            cell = bucket.get((klass, measure))
            if cell is not None:
                total += cell[0]
                count += cell[1]
        return (total / count, int(count)) if count > 0 else None


@dataclass
class Sample:
    """A judged sample: its queries' scores, kept while it is open or may be a baseline
    (bounded by the sample's size)."""

    sample_id: str
    first: float
    last: float
    scores: dict[str, tuple[int, tuple[float, ...]]] = field(default_factory=dict)
    pending: int = 0
    curves: dict[int, list[float]] = field(default_factory=dict)
    """Per class and OVERALL: the sums of its queries' interpolated precision at each of
    the eleven recall levels, then their number (``CURVE_SIZE`` floats). A query judged
    twice in the sample counts once, with its first judgment."""

    def add_curve(self, klass: int, precisions: Sequence[float]) -> None:
        for k in (klass, OVERALL):
            cell = self.curves.get(k)
            if cell is None:
                cell = self.curves[k] = [0.0] * CURVE_SIZE
            for level, value in enumerate(precisions):
                cell[level] += value
            cell[-1] += 1.0


@dataclass
class Summary:
    """A completed sample as the last-N-samples means need it: sums per (class, measure)."""

    sample_id: str
    last: float
    cells: Cells

    @staticmethod
    def of(sample: Sample) -> Summary:
        cells: Cells = {}
        for klass, values in sample.scores.values():
            _add_cells(cells, klass, values)
        return Summary(sample.sample_id, sample.last, cells)


@dataclass(frozen=True, slots=True)
class CurvePair:
    """A class's mean interpolated precision at the eleven recall levels in the newest
    completed sample and in its baseline (None: the baseline has none), with the number of
    queries each mean is over."""

    sample_id: str
    curve: tuple[float, ...]
    queries: int
    baseline_id: str | None
    baseline: tuple[float, ...] | None
    baseline_queries: int


def _means(cell: Sequence[float]) -> tuple[float, ...]:
    return tuple(total / cell[-1] for total in cell[:-1])


def _curve_pair(sample: Sample, klass: int, baseline: Sample | None) -> CurvePair:
    cell = sample.curves[klass]
    before = None if baseline is None or baseline is sample else baseline.curves.get(klass)
    if baseline is None or before is None or not before[-1]:
        return CurvePair(sample.sample_id, _means(cell), int(cell[-1]), None, None, 0)
    return CurvePair(sample.sample_id, _means(cell), int(cell[-1]), baseline.sample_id,
                     _means(before), int(before[-1]))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A completed sample against its baseline, for one class (or OVERALL) and measure."""

    sample_id: str
    baseline_id: str
    comparison: PairedComparison
    regression: bool | None  # None: too few shared queries for a verdict


@dataclass(frozen=True, slots=True)
class Flagged:
    """A regression that lasts: the sample it was first flagged at, that sample's event
    time, and how many samples in a row have been flagged since (that one included)."""

    sample_id: str
    time: float
    samples: int


@dataclass(frozen=True, slots=True)
class Acceptance:
    """A ``baseline`` message: ``sample_id`` is the baseline of the cells of
    ``query_class`` (None: every class and the overall figures; ``all``: the overall
    figures) and ``measure`` (None: every measure) from then on. ``applied``: whether the
    sample was kept (completed) and the class known when it was read."""

    time: float
    sample_id: str
    query_class: str | None
    measure: int | None
    reason: str
    by: str
    applied: bool


@dataclass(frozen=True)
class CellsState:
    """A table of score sums: class index (-1: overall), measure index, sum, count."""

    klass: list[Int]
    measure: list[Int]
    sums: list[Float]
    counts: list[Int]

    @staticmethod
    def of(cells: Cells) -> CellsState:
        keys = sorted(cells)
        return CellsState(
            [k for k, _ in keys], [m for _, m in keys], [cells[key][0] for key in keys],
            [int(cells[key][1]) for key in keys],
        )

    def cells(self, classes: int, measures: int) -> Cells:
        same_lengths("score sums", self.klass, self.measure, self.sums, self.counts)
        cells: Cells = {}
        for k, m, total, count in zip(self.klass, self.measure, self.sums, self.counts,
                                      strict=True):
            require(OVERALL <= k < classes and 0 <= m < measures and count >= 0,
                    "score sums: a class or measure index out of range")
            cells[(k, m)] = [total, float(count)]
        return cells


@dataclass(frozen=True)
class PendingState:
    source: str
    time: Float
    klass: Int
    key: str
    sample_id: str | None
    ranking: list[str]
    labels: dict[str, Int]


@dataclass(frozen=True)
class WindowState:
    source: str
    length: Float
    buckets: list[Int]
    cells: list[CellsState]


@dataclass(frozen=True)
class SampleState:
    """A sample's queries (normalised text), their classes and scores (null: skipped); per
    class (-1: overall) of its queries, the sums of their interpolated precision at the
    eleven recall levels and their number."""

    sample_id: str
    first: Float
    last: Float
    keys: list[str]
    klass: list[Int]
    scores: list[list[Float | None]]
    pending: Int
    curve_classes: list[Int]
    curve_sums: list[list[Float]]


@dataclass(frozen=True)
class SummaryState:
    sample_id: str
    last: Float
    cells: CellsState


@dataclass(frozen=True)
class ScoreHistogramState:
    source: str
    klass: Int
    measure: Int
    counts: list[Int]
    sum: Float


@dataclass(frozen=True)
class VerdictState:
    klass: Int
    measure: Int
    sample_id: str
    baseline_id: str
    shared: Int
    delta: Float
    p_permutation: Float
    p_t: Float
    regression: bool | None


@dataclass(frozen=True)
class BaselineState:
    """A cell whose baseline is not the newest completed sample (``last_good``)."""

    klass: Int
    measure: Int
    sample_id: str


@dataclass(frozen=True)
class FlaggedState:
    klass: Int
    measure: Int
    sample_id: str
    time: Float
    samples: Int


@dataclass(frozen=True)
class AcceptanceState:
    time: Float
    sample_id: str
    query_class: str | None
    measure: Int | None
    reason: str
    by: str
    applied: bool


@dataclass(frozen=True)
class JudgedState:
    """``Judged`` as plain data. Its size follows the configuration: windows x buckets x
    classes x measures, the samples kept (open ones, the baseline), the qrels capacity."""

    active: bool
    clock: Float | None
    judgment_clock: Float | None
    pending: list[PendingState]
    windows: list[WindowState]
    histograms: list[ScoreHistogramState]
    open_samples: list[SampleState]
    completed: list[SummaryState]
    previous: SampleState | None
    pinned: SampleState | None
    verdicts: list[VerdictState]
    last_completed_time: Float | None
    qrels_keys: list[str]
    qrels_labels: list[dict[str, Int]]
    implicit_keys: list[str]
    implicit_labels: list[dict[str, Int]]
    agreement_sample: str | None
    agreement_names: list[str]
    agreement_values: list[Float]
    skipped: Int
    totals: CellsState
    judged_classes: list[Int]
    judged_counts: list[Int]
    worsened: WorsenedState | None
    drift: list[DriftState]
    held: list[SampleState]
    """Older samples some cell still compares with (``last_good``)."""
    baselines: list[BaselineState]
    flagged: list[FlaggedState]
    acceptances: list[AcceptanceState]
    curve_pairs: list[CurvePairState]


@dataclass(frozen=True)
class CurvePairState:
    """A class's (-1: overall) precision-recall curve in the newest completed sample and in
    its baseline (empty: none): mean interpolated precision at the eleven recall levels."""

    klass: Int
    sample_id: str
    curve: list[Float]
    queries: Int
    baseline_id: str | None
    baseline: list[Float]
    baseline_queries: Int


@dataclass(frozen=True)
class WorsenedCell:
    """The queries of one class (-1: overall) and measure whose score dropped most."""

    klass: Int
    measure: Int
    keys: list[str]
    before: list[Float]
    after: list[Float]


@dataclass(frozen=True)
class WorsenedState:
    sample_id: str
    baseline_id: str
    cells: list[WorsenedCell]


@dataclass(frozen=True)
class DriftState:
    """Per live-joined query: its class, and score sums and counts per measure (``measures``
    sums, then ``measures`` counts) in each half-window bucket kept."""

    window: Float
    keys: list[str]
    klass: list[Int]
    buckets: list[list[Int]]
    sums: list[list[list[Float]]]


@dataclass(frozen=True)
class Worsened:
    """The latest completed sample against its baseline: per (class, measure), the shared
    queries whose score dropped most, as (key, baseline score, sample score)."""

    sample_id: str
    baseline_id: str
    cells: dict[tuple[int, int], list[tuple[str, float, float]]]


WORSENED_ROWS = 20
"""Queries kept per (class, measure) that dropped most."""


def _judged_1_to_2(document: Any) -> Any:
    """Version 1 kept no worsened queries and no live drift: they start empty."""
    if isinstance(document, dict):
        document["worsened"], document["drift"] = None, []
    return document


def _judged_2_to_3(document: Any) -> Any:
    """Version 2 had one baseline for every class and measure (``previous``, the newest
    sample, or the pinned one): no cell holds an older one, nothing is flagged since."""
    if isinstance(document, dict):
        document["held"], document["baselines"] = [], []
        document["flagged"], document["acceptances"] = [], []
    return document


def _judged_4_to_5(document: Any) -> Any:
    """Version 4 had no implicit labels: none yet, and empty windows of their scores."""
    if isinstance(document, dict):
        document["implicit_keys"], document["implicit_labels"] = [], []
        document["agreement_sample"] = None
        document["agreement_names"], document["agreement_values"] = [], []
        windows = document.get("windows")
        if isinstance(windows, list):
            windows += [{**w, "source": "implicit", "buckets": [], "cells": []}
                        for w in list(windows)
                        if isinstance(w, dict) and w.get("source") == "live"]
    return document


def _judged_3_to_4(document: Any) -> Any:
    """Version 3 kept no precision-recall curve of its samples: theirs start empty (the
    page draws curves from the next completed sample on)."""
    if isinstance(document, dict):
        samples = [document.get("previous"), document.get("pinned")]
        for listed in (document.get("open_samples"), document.get("held")):
            if isinstance(listed, list):
                samples += listed
        for sample in samples:
            if isinstance(sample, dict):
                sample["curve_classes"], sample["curve_sums"] = [], []
        document["curve_pairs"] = []
    return document


def _keep(
    store: OrderedDict[str, dict[str, int]], labels: Mapping[str, dict[str, int]],
    capacity: int,
) -> None:
    """Labels per query key into ``store``, newest last, the least recently updated out
    past ``capacity``."""
    for key, given in labels.items():
        store[key] = given
        store.move_to_end(key)
    while len(store) > capacity:
        store.popitem(last=False)


def _labels_of(
    what: str, keys: list[str], labels: list[dict[str, int]], capacity: int
) -> OrderedDict[str, dict[str, int]]:
    """Stored labels per query key, as a snapshot holds them, checked."""
    same_lengths(what, keys, labels)
    require(len(keys) <= capacity, f"judged state: more {what} than the capacity")
    for given in labels:
        require(all(-(2**31) <= v < 2**31 for v in given.values()),
                f"judged state: a label of the {what} out of range")
    return OrderedDict(zip(keys, labels, strict=True))


def _index(clock: float, width: float) -> float:
    """The bucket of ``width`` the clock is in (-inf before any event)."""
    return clock // width if clock > -math.inf else -math.inf


def _bucket(
    keys: dict[str, tuple[int, dict[int, list[float]]]], shown: str, klass: int, index: int,
    clock_index: float,
) -> tuple[dict[int, list[float]], list[float] | None] | None:
    """The drift buckets of key ``shown`` (of class ``klass``: another class starts them
    over) and its cell for bucket ``index`` (None: new; the buckets older than the newest
    four are dropped for it); None when ``index`` is older than the two windows compared
    (``clock_index``: the clock's bucket, -inf before any)."""
    entry = keys.get(shown)
    if entry is None or entry[0] != klass:
        entry = keys[shown] = (klass, {})
    buckets = entry[1]
    cell = buckets.get(index)
    if cell is not None:
        return buckets, cell
    newest = max(index, *buckets) if buckets else index
    if index < newest - 3 or index < clock_index - 3:
        if not buckets:
            del keys[shown]
        return None
    for old in [b for b in buckets if b < newest - 3]:
        del buckets[old]
    return buckets, None


@dataclass
class Judged:
    """The explicit state of the offline side."""

    VERSION: ClassVar[int] = 5
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {
        1: _judged_1_to_2, 2: _judged_2_to_3, 3: _judged_3_to_4, 4: _judged_4_to_5,
    }

    config: OfflineConfig
    active: bool = False
    """Set by the first judgment or qrels message: from then on live queries are joined
    and move the offline clock (shared by the pipelines of every partition)."""
    specs: list[MeasureSpec] = field(default_factory=list)
    clock: float = float("-inf")
    judgment_clock: float = float("-inf")
    """Newest judgment timestamp seen."""
    pending: list[Pending] = field(default_factory=list)
    time_windows: dict[tuple[str, float], Window] = field(default_factory=dict)
    histograms: dict[tuple[str, int, int], list[int]] = field(default_factory=dict)
    histogram_sums: dict[tuple[str, int, int], float] = field(default_factory=dict)
    open_samples: dict[str, Sample] = field(default_factory=dict)
    completed: deque[Summary] = field(default_factory=deque)
    previous: Sample | None = None
    """The newest completed sample with its scores: the baseline ``previous``."""
    pinned: Sample | None = None
    baselines: dict[tuple[int, int], Sample] = field(default_factory=dict)
    """``last_good``: the cells whose baseline is an older sample than ``previous``."""
    flagged: dict[tuple[int, int], Flagged] = field(default_factory=dict)
    """The cells whose latest verdict is a regression, since when."""
    acceptances: deque[Acceptance] = field(default_factory=deque)
    verdicts: dict[tuple[int, int], Verdict] = field(default_factory=dict)
    last_completed_time: float | None = None
    qrels: OrderedDict[str, dict[str, int]] = field(default_factory=OrderedDict)
    implicit: OrderedDict[str, dict[str, int]] = field(default_factory=OrderedDict)
    """Labels from clicks per query key (as the query lists key a text), newest fit last:
    at most ``qrels_capacity``."""
    agreement: tuple[str, dict[str, float]] | None = None
    """The raters' agreement the newest sample that carried one gave, with its id."""
    skipped: int = 0
    totals: dict[tuple[int, int], tuple[float, int]] = field(default_factory=dict)
    """All-time sums and counts of sample scores per (class or OVERALL, measure)."""
    judged_queries: dict[int, int] = field(default_factory=dict)
    """All-time number of scored sample queries per class or OVERALL."""
    show: Callable[[str], str] | None = None
    """How a judged query's text is kept for the worsened queries (redacted); None: they are
    not kept (the query lists are disabled). Set by the pipeline."""
    worsened: Worsened | None = None
    curve_pairs: dict[int, CurvePair] = field(default_factory=dict)
    """Per class and OVERALL: the newest completed sample's precision-recall curve and its
    baseline's (the baseline of the class's first measure)."""
    drift: dict[float, dict[str, tuple[int, dict[int, list[float]]]]] = field(
        default_factory=dict
    )
    """Per window length: per live-joined query key, its class and, per bucket of half the
    window (event time // (length / 2)), the sums then the counts of its scores per measure.
    The newest four buckets are kept: the last window and the one before it."""

    def __post_init__(self) -> None:
        self._memo: dict[
            tuple[str, str, tuple[str, ...]], tuple[dict[str, int], FloatArray]
        ] = {}
        """Scores per (source, key, ranking): a live query scored against human qrels and
        against labels from clicks holds one entry each."""
        self._drift_first: dict[float, int] = {}
        """Per window: the oldest drift bucket kept at the last eviction (a cache)."""
        self.specs = [parse_measure(name) for name in self.config.measures]
        for source in SOURCES:
            for length in self.config.windows:
                self.time_windows[(source, length)] = Window(length)
        for length in self.config.windows:
            self.drift[length] = {}

    # --- input -----------------------------------------------------------------------------

    def judgment(
        self, sample_id: str, time: float, klass: int, text: str, ranking: Sequence[str],
        labels: dict[str, int], agreement: Mapping[str, float] | None = None,
    ) -> None:
        if agreement:  # the statistics ``judgments import`` writes; the rest are no label
            kept = {name: value for name, value in agreement.items() if name in AGREEMENT}
            if kept:
                self.agreement = (sample_id, kept)
        self.judgment_clock = max(self.judgment_clock, time)
        self.settle(self.judgment_clock)
        sample = self.open_samples.get(sample_id)
        if sample is None:
            if any(done.sample_id == sample_id for done in self.completed):
                log.warning("judged sample %r had completed (no message for [offline] "
                            "sample_quiet) when another of its judgments came: it makes a "
                            "sample of its own, too small for a verdict", sample_id[:100])
            sample = self.open_samples[sample_id] = Sample(sample_id, time, time)
        sample.last = max(sample.last, time)
        sample.pending += 1
        self._queue(Pending("sample", time, klass, normalise(text), sample_id, ranking, labels))
        size = self.config.sample_size
        if size and sample.pending + len(sample.scores) >= size:
            self._flush()
            self._complete(sample)

    def store_qrels(self, text: str, labels: dict[str, int]) -> None:
        _keep(self.qrels, {normalise(text): labels}, self.config.qrels_capacity)

    def store_implicit(self, labels: Mapping[str, dict[str, int]]) -> None:
        """The labels of a click model's fit, per query key (they replace a key's older)."""
        _keep(self.implicit, labels, self.config.qrels_capacity)

    def live_query(self, time: float, klass: int, text: str, results: Sequence[str]) -> None:
        """A live query: scored when its normalised text has stored labels (and under
        ``implicit`` when its key has labels from clicks). Then it moves the offline clock
        (a batch it fills is scored by the clock before it)."""
        key = normalise(text)
        labels = self.qrels.get(key)
        if labels is not None:  # ``_queue``, inline: this runs for every live query
            pending = self.pending
            pending.append(Pending("live", time, klass, key, None, results, labels))
            if len(pending) >= BATCH:
                self._flush()
        if self.implicit:
            found = self.implicit.get(self.show(key) if self.show is not None else key)
            if found is not None:
                self._queue(Pending("implicit", time, klass, key, None, results, found))
        if time > self.clock:
            self.clock = time

    def advance(self, time: float) -> None:
        """Move the offline clock, which bounds the time windows."""
        if time > self.clock:
            self.clock = time

    def score_waiting(self) -> None:
        """Score the queries waiting for a full batch. Called after each batch of input, so
        that the state read between batches (exported, checkpointed, reported) holds every
        query joined so far, and the batches scored follow the input alone, never the
        moments the state is read at."""
        self._flush()

    def settle(self, time: float) -> None:
        """Complete the samples without a message for ``sample_quiet`` before ``time``.

        Judgment messages settle the samples before them by their own timestamps. Live
        event time may settle them too, but only when no judgment is waiting to be read
        (the daemon checks the judgments topic's lag): a judgment read late, behind live
        traffic, must join its sample rather than start a sample of its own.
        """
        if not self.open_samples:
            return
        quiet = self.config.sample_quiet
        done = [s for s in self.open_samples.values() if s.last + quiet < time]
        if done:
            self._flush()
            for sample in sorted(done, key=lambda s: (s.last, s.sample_id)):
                self._complete(sample)

    def close(self) -> None:
        """End of input: score everything pending and complete every open sample."""
        self._flush()
        for sample in sorted(self.open_samples.values(), key=lambda s: (s.last, s.sample_id)):
            self._complete(sample)

    # --- reading ---------------------------------------------------------------------------

    def time_mean(self, source: str, length: float, klass: int, measure: int) -> (
        tuple[float, int] | None
    ):
        return self.time_windows[(source, length)].mean(klass, measure)

    def samples_mean(self, last: int, klass: int, measure: int) -> tuple[float, int] | None:
        """Mean over the last ``last`` completed samples (all if fewer)."""
        total, count = 0.0, 0.0
        for summary in list(self.completed)[-last:]:
            cell = summary.cells.get((klass, measure))
            if cell is not None:
                total += cell[0]
                count += cell[1]
        return (total / count, int(count)) if count else None

    # --- internals -------------------------------------------------------------------------

    def _queue(self, pending: Pending) -> None:
        self.pending.append(pending)
        if len(self.pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        matrix = self._scores_of(batch)
        curves = self._curves_of(batch)
        # the worsened queries of the qrels join (not of the labels from clicks)
        live = [i for i, pending in enumerate(batch) if pending.source == "live"]
        if live:
            self._drift_batch([batch[i] for i in live], matrix[live])
        for i, pending in enumerate(batch):
            if pending.sample_id is not None:
                values = tuple(matrix[i].tolist())
                self._count_sample_query(pending.klass, values)
                sample = self.open_samples.get(pending.sample_id)
                if sample is not None:
                    if pending.key not in sample.scores:
                        sample.add_curve(pending.klass, curves[i])
                    sample.scores[pending.key] = (pending.klass, values)
                    sample.pending -= 1
        self._record(
            np.array([SOURCES.index(p.source) for p in batch]),
            np.array([p.time for p in batch], dtype=np.float64),
            np.array([p.klass for p in batch]), matrix,
        )
        self._evict()

    def _scores_of(self, batch: list[Pending]) -> FloatArray:
        """One row of scores per query. Live queries repeat (the same text, results and
        labels): their scores come from a bounded memo when they were computed before."""
        memo = self._memo
        matrix = np.empty((len(batch), len(self.specs)), dtype=np.float64)
        misses, keys, hits, remembered = [], [], [], []
        for i, pending in enumerate(batch):
            key = (pending.source, pending.key, tuple(pending.ranking))
            found = memo.get(key)
            if found is not None and found[0] is pending.labels:
                hits.append(i)
                remembered.append(found[1])
            else:
                misses.append(i)
                keys.append(key)
        if hits:
            matrix[hits] = remembered
        if misses:
            lists = _ranked([batch[i].ranking for i in misses], [batch[i].labels for i in misses])
            for m, spec in enumerate(self.specs):
                matrix[misses, m] = score(lists, spec)
            if len(memo) + len(misses) > MEMO_SIZE:
                memo.clear()
            for i, key in zip(misses, keys, strict=True):
                memo[key] = (batch[i].labels, matrix[i].copy())
        return matrix

    def _curves_of(self, batch: list[Pending]) -> dict[int, list[float]]:
        """The interpolated precision at the eleven recall levels of each sample query of
        ``batch``, by its index in the batch."""
        at = [i for i, p in enumerate(batch) if p.sample_id is not None]
        if not at:
            return {}
        lists = _ranked([batch[i].ranking for i in at], [batch[i].labels for i in at])
        rows = interpolated_precision(lists, CURVE_RELEVANCE).tolist()
        return dict(zip(at, rows, strict=True))

    def curves(self, klass: int) -> CurvePair | None:
        """The newest completed sample's precision-recall curve of ``klass`` (or OVERALL)
        and its baseline's, as they were when it completed (None: no query of the class)."""
        return self.curve_pairs.get(klass)

    def _count_sample_query(self, klass: int, values: tuple[float, ...]) -> None:
        for k in (klass, OVERALL):
            self.judged_queries[k] = self.judged_queries.get(k, 0) + 1
            for m, value in enumerate(values):
                if not math.isnan(value):
                    total, count = self.totals.get((k, m), (0.0, 0))
                    self.totals[(k, m)] = (total + value, count + 1)

    def _record(
        self, sources: IntArray, times: FloatArray, classes: IntArray, matrix: FloatArray
    ) -> None:
        """A scored batch (one row per query, one column per measure, NaN: skipped) into
        the score histograms and the windows, a few numpy operations per batch and window."""
        valid = ~np.isnan(matrix)
        self.skipped += int(valid.size - np.count_nonzero(valid))
        buckets = np.searchsorted(SCORE_BUCKETS, np.where(valid, matrix, 0.0), side="left")
        size, measures = len(SCORE_BUCKETS) + 1, matrix.shape[1]
        names, slot = _classes_then_overall(classes)
        groups = len(names)
        for s, source in enumerate(SOURCES):
            rows, column = np.nonzero(valid & (sources == s)[:, None])
            if not len(rows):
                continue
            # every (class, measure) cell at once: its counts per bucket and its sum, the
            # cells of a class first, then the overall ones (every row again)
            cell = np.concatenate([slot[rows] * measures + column,
                                   (groups - 1) * measures + column])
            values = matrix[rows, column]
            counts = np.bincount(
                cell * size + np.tile(buckets[rows, column], 2), minlength=groups * measures * size
            ).reshape(groups * measures, size)
            # each cell's sum: its scores added in the batch's order, from 0.0
            sums = np.bincount(cell, np.tile(values, 2), minlength=groups * measures).tolist()
            filled = np.flatnonzero(counts.any(axis=1)).tolist()
            for c, added in zip(filled, counts[filled].tolist(), strict=True):
                key = (source, names[c // measures], c % measures)
                histogram = self.histograms.get(key)
                if histogram is None:
                    self.histograms[key] = added
                    self.histogram_sums[key] = sums[c]
                else:
                    histogram[:] = [a + b for a, b in zip(histogram, added, strict=True)]
                    self.histogram_sums[key] += sums[c]
        for (source, _), window in self.time_windows.items():
            admitted = sources == SOURCES.index(source)
            if not math.isinf(self.clock):
                admitted &= np.floor_divide(times, window.width) >= window.first(self.clock)
            if admitted.any():
                window.add_batch(times[admitted], classes[admitted], matrix[admitted],
                                 valid[admitted])

    def _evict(self) -> None:
        for window in self.time_windows.values():
            window.evict(self.clock)
        if math.isinf(self.clock):
            return
        for length, keys in self.drift.items():
            first = int(self.clock // (length / 2)) - 3
            if self._drift_first.get(length) == first:
                continue  # the clock stayed in the same half-window: nothing more to evict
            self._drift_first[length] = first
            for key in [k for k, (_, buckets) in keys.items() if max(buckets) < first]:
                del keys[key]

    def _drift_batch(self, rows: list[Pending], matrix: FloatArray) -> None:
        """The live queries of a scored batch (``matrix``: their scores) into the drift
        buckets, exactly as one ``_drift`` per query in order would add them.

        Live queries repeat: the queries of one key (of one class, in the same buckets)
        are one group, placed once; their addends go to their bucket in one ``np.bincount``
        per window, which adds them one by one in the batch's order after the bucket's
        value (the same floats).
        A key whose queries differ in class or bucket takes them one at a time."""
        show = self.show
        if show is None:
            return
        valid = ~np.isnan(matrix)
        # what one scored query adds to its bucket: its scores, then 1 per scored measure
        addends = np.hstack([np.where(valid, matrix, 0.0), valid.astype(np.float64)])
        halves = [length / 2 for length in self.drift]
        # each query's bucket per window, ``int(time // half)``: numpy divides as Python,
        # and casts exactly below 2**53 (a time beyond, or NaN, takes Python's own ints)
        times = np.array([pending.time for pending in rows])
        if np.abs(times).max() < 2.0**53:
            columns = np.floor_divide(times[:, None], halves).astype(np.int64)
            indexes = columns.tolist()
        else:
            indexes = [[int(time // half) for half in halves] for time in times.tolist()]
            columns = np.array(indexes, dtype=object)
        # each query's group: its shown key's, numbered in the order of first appearance
        # (keys first, each shown once: redaction can show two keys as one)
        number: dict[str, int] = {}
        by_key = np.array([number.setdefault(pending.key, len(number)) for pending in rows],
                          dtype=np.intp)
        shown_number: dict[str, int] = {}
        group_of_key = [shown_number.setdefault(show(key), len(shown_number)) for key in number]
        shown_of = list(shown_number)
        groups = np.array(group_of_key, dtype=np.intp)[by_key]
        group_of = groups.tolist()
        first_row = np.unique(groups, return_index=True)[1][groups]
        # a group whose queries differ in class or bucket takes them one at a time
        klasses = np.array([pending.klass for pending in rows])
        same = (klasses == klasses[first_row]) & (columns == columns[first_row]).all(axis=1)
        mixed = np.zeros(len(shown_of), dtype=bool)
        mixed[groups[~same]] = True
        visited = np.flatnonzero(mixed[groups] | (first_row == np.arange(len(rows)))).tolist()
        clock, windows = self.clock, list(self.drift.items())
        clock_indexes = [_index(clock, half) for half in halves]
        cells: list[list[tuple[dict[int, list[float]], int]]] = [[] for _ in windows]
        starts: list[list[list[float]]] = [[] for _ in windows]
        slots = [[-1] * len(shown_of) for _ in windows]
        """Per window and group: its cell's row in ``starts`` (-1: not placed)."""
        one_by_one = mixed.tolist()
        for i in visited:  # the queries of mixed groups, and the first of each other group
            g = group_of[i]
            if one_by_one[g]:
                self._drift(rows[i], addends[i].tolist(), shown_of[g])
                continue
            klass, buckets_of, shown = rows[i].klass, indexes[i], shown_of[g]
            for w, (_, keys) in enumerate(windows):
                index = buckets_of[w]
                found = _bucket(keys, shown, klass, index, clock_indexes[w])
                if found is None:
                    continue  # older than the two windows compared
                buckets, cell = found
                if cell is None:
                    cell = [0.0] * addends.shape[1]  # 0.0 + the first addend: that addend
                    buckets[index] = cell
                slots[w][g] = len(cells[w])
                cells[w].append((buckets, index))
                starts[w].append(cell)
        width = addends.shape[1]
        for w in range(len(windows)):
            if not cells[w]:
                continue
            of_row = np.array(slots[w], dtype=np.intp)[groups]
            chosen = of_row >= 0
            # each cell's value, then its rows' addends in the batch's order, summed from 0.0
            # by ``np.bincount`` (in input order): the floats of adding them one at a time
            into = np.concatenate([np.arange(len(cells[w])), of_row[chosen]])
            totals = np.bincount(
                (into[:, None] * width + np.arange(width)).ravel(),
                np.concatenate([np.array(starts[w], dtype=np.float64), addends[chosen]]).ravel(),
                minlength=len(cells[w]) * width,
            ).reshape(len(cells[w]), width).astype(np.float64, copy=False)  # weighted
            for (buckets, index), total in zip(cells[w], totals.tolist(), strict=True):
                buckets[index] = total

    def _drift(self, pending: Pending, addend: list[float], shown: str) -> None:
        """One live query's ``addend`` (its scores, then 1 per scored measure) into the drift
        buckets of its key ``shown``."""
        klass, time, clock = pending.klass, pending.time, self.clock
        for length, keys in self.drift.items():
            half = length / 2
            index = int(time // half)
            found = _bucket(keys, shown, klass, index, _index(clock, half))
            if found is None:
                continue  # older than the two windows compared
            buckets, cell = found
            buckets[index] = addend[:] if cell is None else [
                a + b for a, b in zip(cell, addend, strict=True)
            ]

    def drifted(self, length: float) -> dict[tuple[int, int], list[tuple[str, float, float]]]:
        """Live-joined queries whose mean score over the last ``length`` of event time (the
        newest two half-window buckets, the current one partial) dropped most against the
        ``length`` before it: per (class or OVERALL, measure), at most ``WORSENED_ROWS``
        (key, mean before, mean now), largest drop first. Reading only: the queries waiting
        to be scored count once they are (``score_waiting``, after each batch of input)."""
        measures = len(self.specs)
        if math.isinf(self.clock):
            return {}
        now = int(self.clock // (length / 2))
        drops: dict[tuple[int, int], list[tuple[float, str, float, float]]] = {}
        for key, (klass, buckets) in self.drift.get(length, {}).items():
            recent = [buckets[b] for b in (now - 1, now) if b in buckets]
            earlier = [buckets[b] for b in (now - 3, now - 2) if b in buckets]
            if not recent or not earlier:
                continue
            for m in range(measures):
                after_n = sum(c[measures + m] for c in recent)
                before_n = sum(c[measures + m] for c in earlier)
                if not after_n or not before_n:
                    continue
                after = sum(c[m] for c in recent) / after_n
                before = sum(c[m] for c in earlier) / before_n
                if after < before:
                    for k in (klass, OVERALL):
                        drops.setdefault((k, m), []).append((after - before, key, before, after))
        return {
            cell: [(key, before, after) for _, key, before, after in sorted(rows)[:WORSENED_ROWS]]
            for cell, rows in sorted(drops.items())
        }

    def _complete(self, sample: Sample) -> None:
        del self.open_samples[sample.sample_id]
        if sample.sample_id == self.config.baseline:
            self.pinned = sample
        self.completed.append(Summary.of(sample))
        while len(self.completed) > max([*self.config.last_samples, 1]):
            self.completed.popleft()
        # each class's curve against its first measure's baseline, chosen before judging
        self.curve_pairs = {
            klass: _curve_pair(sample, klass, self._baseline((klass, 0)))
            for klass in sorted(sample.curves) if sample.curves[klass][-1]
        }
        self._judge(sample)
        self.previous = sample
        self.last_completed_time = sample.last

    def _baseline(self, cell: tuple[int, int]) -> Sample | None:
        """The sample ``cell`` is compared with: the one it holds (the last good one under
        ``last_good``, or an accepted one under any policy), else the newest completed
        sample, or the pinned one."""
        held = self.baselines.get(cell)
        if held is not None:
            return held
        return self.pinned if self.config.baseline not in (LAST_GOOD, PREVIOUS) else (
            self.previous
        )

    def _judge(self, sample: Sample) -> None:
        """Compare per class and measure, each with its baseline; flags follow Holm's
        step-down procedure.

        ``max_p_value`` bounds the family-wise error over all tests of the sample, so that a
        quiet week pages nobody although dozens of (class, measure) pairs are tested.
        """
        config = self.config
        classes = {klass for klass, _ in sample.scores.values()} | {OVERALL}
        classes |= {klass for klass, _ in self.verdicts} | {klass for klass, _ in self.baselines}
        results: dict[tuple[int, int], tuple[PairedComparison, Sample, list[str]]] = {}
        shared_with: dict[int, list[str]] = {}  # by the baseline (two may share an id)
        per_class: dict[tuple[str, int], Counter[int]] = {}  # queries per class, once each

        def counted(key: tuple[str, int], klasses: Iterable[int]) -> Counter[int]:
            found = per_class.get(key)
            if found is None:
                found = per_class[key] = Counter(klasses)
            return found

        def covered(baseline: Sample, klass: int) -> bool:
            """``covers``, its counts taken once per sample (not per cell)."""
            scores = sample.scores
            shared = shared_with[id(baseline)]
            return covers(
                counted(("judged", id(sample)), (k for k, _ in scores.values())),
                counted(("judged", id(baseline)), (k for k, _ in baseline.scores.values())),
                counted(("shared", id(baseline)), (scores[key][0] for key in shared)), klass,
            )
        for klass in sorted(classes):
            for m in range(len(self.specs)):
                baseline = self._baseline((klass, m))
                if baseline is None:
                    continue
                shared = shared_with.get(id(baseline))
                if shared is None:
                    shared = shared_with[id(baseline)] = [
                        key for key in sample.scores if key in baseline.scores
                    ]
                keys = [k for k in shared if klass == OVERALL or sample.scores[k][0] == klass]
                if not keys and klass != OVERALL and (klass, m) not in self.verdicts:
                    continue
                pairs = [
                    (sample.scores[k][1][m], baseline.scores[k][1][m]) for k in keys
                    if not math.isnan(sample.scores[k][1][m])
                    and not math.isnan(baseline.scores[k][1][m])
                ]
                current = np.array([p[0] for p in pairs], dtype=np.float64)
                before = np.array([p[1] for p in pairs], dtype=np.float64)
                results[(klass, m)] = (
                    compare(current, before, config.permutations, len(pairs)), baseline, keys,
                )
        if not results:
            return
        testable = sorted(
            (c.p_permutation, key) for key, (c, _, _) in results.items()
            if c.shared >= config.min_shared_queries
        )
        significant: set[tuple[int, int]] = set()
        for rank, (p_value, key) in enumerate(testable):
            if p_value >= config.max_p_value / (len(testable) - rank):
                break
            significant.add(key)
        show = self.show
        overall = results.get((OVERALL, 0))
        shown_baseline = (overall or next(iter(results.values())))[1].sample_id
        self.worsened = None if show is None else Worsened(sample.sample_id, shown_baseline, {
            cell: [(show(key), before, after)
                   for key, before, after in _dropped(keys, sample, baseline, cell[1])]
            for cell, (_, baseline, keys) in results.items()
        })
        for cell, (comparison, baseline, _) in results.items():
            verdict: bool | None = None
            if comparison.shared >= config.min_shared_queries:
                verdict = cell in significant and comparison.delta < -config.min_drop
            # ok on part of the baseline's queries only (a class missing from the sample):
            # under ``last_good``, no news for a regression, and no new baseline (nor is a
            # sample too small for a verdict that lacks them)
            partial = (verdict is False and cell[0] == OVERALL and config.baseline == LAST_GOOD
                       and not covered(baseline, OVERALL))
            news = verdict is not None and not partial
            if news or cell not in self.flagged:  # (one flagged lasts, shown by its last verdict)
                self.verdicts[cell] = Verdict(
                    sample.sample_id, baseline.sample_id, comparison, verdict
                )
            if not news:  # too few shared queries to tell
                if config.baseline == LAST_GOOD and not covered(baseline, cell[0]):
                    # (a class missing from the sample): the next is compared with the same
                    self.baselines[cell] = baseline
            elif verdict:
                since = self.flagged.get(cell)
                self.flagged[cell] = (
                    Flagged(sample.sample_id, sample.last, 1) if since is None
                    else Flagged(since.sample_id, since.time, since.samples + 1)
                )
                if config.baseline == LAST_GOOD:
                    self.baselines[cell] = baseline  # the regression is compared with it
            else:  # quality is back
                self.flagged.pop(cell, None)
                if config.baseline == LAST_GOOD:
                    self.baselines.pop(cell, None)  # this sample, the newest: the baseline
            if config.baseline == PREVIOUS:
                self.baselines.pop(cell, None)  # an accepted sample serves once, then previous

    def accept(
        self, time: float, sample_id: str | None, query_class: str | None,
        klasses: Collection[int] | None, measure: int | None, reason: str, by: str,
    ) -> Acceptance:
        """Make ``sample_id`` (None: the newest completed sample) the baseline of the cells
        of ``query_class`` (its slice indexes ``klasses``, None when the class is unknown; no
        class: every slice and the overall figures) and ``measure`` (None: every measure) that
        have a verdict: an intended change, accepted. Their regressions end now. Samples
        that went quiet before ``time`` complete first, as before a judgment."""
        self.judgment_clock = max(self.judgment_clock, time)
        self.settle(self.judgment_clock)
        chosen = self._kept(sample_id)
        known = query_class is None or klasses is not None
        accepted = Acceptance(
            time, chosen.sample_id if chosen is not None else (sample_id or ""), query_class,
            measure, reason, by, chosen is not None and known,
        )
        self.acceptances.append(accepted)
        while len(self.acceptances) > ACCEPTANCES_KEPT:
            self.acceptances.popleft()
        if chosen is None or not known:
            return accepted
        cells = {
            (k, m) for k, m in self.verdicts
            if (query_class is None or (klasses is not None and k in klasses))
            and (measure is None or m == measure)
        }  # a cell with no verdict is judged by no sample yet: it holds no baseline
        for cell in cells:
            self.flagged.pop(cell, None)
            if chosen is self.previous and self.config.baseline in (LAST_GOOD, PREVIOUS):
                self.baselines.pop(cell, None)  # what the cell compares with anyway
            else:
                self.baselines[cell] = chosen  # under a pin: a pin of its own
            verdict = self.verdicts.get(cell)
            if verdict is not None and verdict.regression:  # accepted: no regression now,
                # the comparison still the one it was (its baseline named with it)
                self.verdicts[cell] = Verdict(
                    verdict.sample_id, verdict.baseline_id, verdict.comparison, False
                )
        return accepted

    def _kept(self, sample_id: str | None) -> Sample | None:
        """A completed sample still kept (the newest, a baseline, the pinned one)."""
        if sample_id is None:
            return self.previous
        for sample in (self.previous, self.pinned, *self.baselines.values()):
            if sample is not None and sample.sample_id == sample_id:
                return sample
        return None

    # --- state as data ---------------------------------------------------------------------

    def snapshot(self) -> JudgedState:
        return JudgedState(
            active=self.active, clock=finite_or_none(self.clock),
            judgment_clock=finite_or_none(self.judgment_clock),
            pending=[
                PendingState(p.source, p.time, p.klass, p.key, p.sample_id, list(p.ranking),
                             dict(p.labels))
                for p in self.pending
            ],
            windows=[
                WindowState(source, length, sorted(window.buckets),
                            [CellsState.of(window.buckets[b]) for b in sorted(window.buckets)])
                for (source, length), window in self.time_windows.items()
            ],
            histograms=[
                ScoreHistogramState(source, klass, m, list(counts),
                                    self.histogram_sums[(source, klass, m)])
                for (source, klass, m), counts in self.histograms.items()
            ],
            open_samples=[_sample_state(s) for s in self.open_samples.values()],
            completed=[
                SummaryState(s.sample_id, s.last, CellsState.of(s.cells)) for s in self.completed
            ],
            previous=_sample_state(self.previous) if self.previous is not None else None,
            pinned=_sample_state(self.pinned) if self.pinned is not None else None,
            verdicts=[
                VerdictState(k, m, v.sample_id, v.baseline_id, v.comparison.shared,
                             v.comparison.delta, v.comparison.p_permutation, v.comparison.p_t,
                             v.regression)
                for (k, m), v in self.verdicts.items()
            ],
            last_completed_time=self.last_completed_time,
            qrels_keys=list(self.qrels), qrels_labels=list(self.qrels.values()),
            implicit_keys=list(self.implicit), implicit_labels=list(self.implicit.values()),
            agreement_sample=self.agreement[0] if self.agreement else None,
            agreement_names=list(self.agreement[1]) if self.agreement else [],
            agreement_values=list(self.agreement[1].values()) if self.agreement else [],
            skipped=self.skipped,
            totals=CellsState.of({k: [t, float(n)] for k, (t, n) in self.totals.items()}),
            judged_classes=list(self.judged_queries),
            judged_counts=list(self.judged_queries.values()),
            worsened=None if self.worsened is None else WorsenedState(
                self.worsened.sample_id, self.worsened.baseline_id, [
                    WorsenedCell(klass, m, [r[0] for r in rows], [r[1] for r in rows],
                                 [r[2] for r in rows])
                    for (klass, m), rows in sorted(self.worsened.cells.items())
                ],
            ),
            drift=[
                DriftState(
                    length, list(keys), [klass for klass, _ in keys.values()],
                    [sorted(buckets) for _, buckets in keys.values()],
                    [[buckets[b] for b in sorted(buckets)] for _, buckets in keys.values()],
                )
                for length, keys in self.drift.items()
            ],
            held=[_sample_state(held) for held in self._held()],
            baselines=[
                BaselineState(k, m, sample.sample_id)
                for (k, m), sample in sorted(self.baselines.items())
            ],
            flagged=[
                FlaggedState(k, m, f.sample_id, f.time, f.samples)
                for (k, m), f in sorted(self.flagged.items())
            ],
            acceptances=[
                AcceptanceState(a.time, a.sample_id, a.query_class, a.measure, a.reason,
                                a.by, a.applied)
                for a in self.acceptances
            ],
            curve_pairs=[
                CurvePairState(k, c.sample_id, list(c.curve), c.queries, c.baseline_id,
                               list(c.baseline or ()), c.baseline_queries)
                for k, c in sorted(self.curve_pairs.items())
            ],
        )

    def _held(self) -> list[Sample]:
        """The baselines that are neither the newest sample nor the pinned one."""
        held: dict[str, Sample] = {}
        kept = {s.sample_id for s in (self.previous, self.pinned) if s is not None}
        for sample in self.baselines.values():
            if sample.sample_id not in kept:
                held[sample.sample_id] = sample
        return list(held.values())

    @classmethod
    def restore(cls, layout: Layout, state: JudgedState) -> Judged:
        """The offline state of ``state``; its worsened queries and live drift only where
        the query lists are enabled (they keep query texts)."""
        self = cls(layout.config.offline)
        keep_texts = layout.config.query_lists.enabled
        classes, measures = layout.classes, len(self.specs)

        def klass_ok(klass: int) -> None:
            require(OVERALL <= klass < classes, f"judged state: class index {klass}")

        self.active = state.active
        self.clock = or_minus_infinity(state.clock)
        self.judgment_clock = or_minus_infinity(state.judgment_clock)
        require(len(state.pending) <= BATCH, "judged state: more pending than a batch")
        for p in state.pending:
            require(0 <= p.klass < classes, f"judged state: class index {p.klass}")
            require(p.source in SOURCES, f"judged state: source {p.source!r}")
        self.pending = [
            Pending(p.source, p.time, p.klass, p.key, p.sample_id, p.ranking, p.labels)
            for p in state.pending
        ]
        windows = {(w.source, w.length): w for w in state.windows}
        require(windows.keys() == self.time_windows.keys(),
                "judged state: not the windows of this configuration")
        for key, window in self.time_windows.items():
            saved = windows[key]
            same_lengths("window buckets", saved.buckets, saved.cells)
            window.buckets = {
                b: cells.cells(classes, measures)
                for b, cells in zip(saved.buckets, saved.cells, strict=True)
            }
            require(len(window.buckets) <= WINDOW_BUCKETS + 2, "judged state: too many buckets")
        self.histograms, self.histogram_sums = {}, {}
        for h in state.histograms:
            klass_ok(h.klass)
            require(h.source in SOURCES and 0 <= h.measure < measures
                    and len(h.counts) == len(SCORE_BUCKETS) + 1,
                    "judged state: a malformed score histogram")
            self.histograms[(h.source, h.klass, h.measure)] = list(h.counts)
            self.histogram_sums[(h.source, h.klass, h.measure)] = h.sum
        self.open_samples = {
            s.sample_id: _sample(s, classes, measures) for s in state.open_samples
        }
        self.completed = deque(
            Summary(s.sample_id, s.last, s.cells.cells(classes, measures))
            for s in state.completed
        )
        self.previous = _sample(state.previous, classes, measures) if state.previous else None
        self.pinned = _sample(state.pinned, classes, measures) if state.pinned else None
        if self.previous is not None and self.pinned is not None and (
            self.previous.sample_id == self.pinned.sample_id
        ):
            self.pinned = self.previous  # one sample, as before the snapshot
        kept = {s.sample_id: s for s in (self.previous, self.pinned) if s is not None}
        kept |= {s.sample_id: _sample(s, classes, measures) for s in state.held}
        self.baselines = {}
        for b in state.baselines:
            klass_ok(b.klass)
            require(0 <= b.measure < measures and b.sample_id in kept,
                    "judged state: a baseline's measure or sample")
            self.baselines[(b.klass, b.measure)] = kept[b.sample_id]
        self.flagged = {}
        for f in state.flagged:
            klass_ok(f.klass)
            require(0 <= f.measure < measures and f.samples >= 1,
                    "judged state: a flagged regression")
            self.flagged[(f.klass, f.measure)] = Flagged(f.sample_id, f.time, f.samples)
        require(len(state.acceptances) <= ACCEPTANCES_KEPT, "judged state: acceptances")
        for a in state.acceptances:
            require(a.measure is None or 0 <= a.measure < measures,
                    "judged state: an acceptance's measure")
        self.acceptances = deque(
            Acceptance(a.time, a.sample_id, a.query_class, a.measure, a.reason, a.by,
                       a.applied)
            for a in state.acceptances
        )
        self.verdicts = {}
        for v in state.verdicts:
            klass_ok(v.klass)
            require(0 <= v.measure < measures, "judged state: a verdict's measure")
            self.verdicts[(v.klass, v.measure)] = Verdict(
                v.sample_id, v.baseline_id,
                PairedComparison(v.shared, v.delta, v.p_permutation, v.p_t), v.regression,
            )
        self.curve_pairs = {}
        for c in state.curve_pairs:
            klass_ok(c.klass)
            require(len(c.curve) == len(RECALL_LEVELS) and c.queries > 0
                    and len(c.baseline) in (0, len(RECALL_LEVELS))
                    and (c.baseline_id is None) == (not c.baseline),
                    "judged state: a precision-recall curve")
            self.curve_pairs[c.klass] = CurvePair(
                c.sample_id, tuple(c.curve), c.queries, c.baseline_id,
                tuple(c.baseline) if c.baseline else None, c.baseline_queries,
            )
        self.last_completed_time = state.last_completed_time
        capacity = self.config.qrels_capacity
        self.qrels = _labels_of("qrels", state.qrels_keys, state.qrels_labels, capacity)
        self.implicit = _labels_of(
            "implicit labels", state.implicit_keys, state.implicit_labels, capacity
        )
        same_lengths("agreement", state.agreement_names, state.agreement_values)
        self.agreement = None if state.agreement_sample is None else (
            state.agreement_sample,
            dict(zip(state.agreement_names, state.agreement_values, strict=True)),
        )
        self.skipped = state.skipped
        self.totals = {
            key: (total, int(count))
            for key, (total, count) in state.totals.cells(classes, measures).items()
        }
        same_lengths("judged queries", state.judged_classes, state.judged_counts)
        for klass in state.judged_classes:
            klass_ok(klass)
        self.judged_queries = dict(zip(state.judged_classes, state.judged_counts, strict=True))
        self.worsened = None
        if state.worsened is not None and keep_texts:
            cells = {}
            for cell in state.worsened.cells:
                klass_ok(cell.klass)
                require(0 <= cell.measure < measures
                        and len(cell.keys) <= WORSENED_ROWS,
                        "judged state: a worsened cell's measure or size")
                same_lengths("worsened queries", cell.keys, cell.before, cell.after)
                cells[(cell.klass, cell.measure)] = list(
                    zip(cell.keys, cell.before, cell.after, strict=True)
                )
            self.worsened = Worsened(state.worsened.sample_id, state.worsened.baseline_id,
                                     cells)
        drift = {d.window: d for d in state.drift}
        require(drift.keys() <= self.drift.keys(),
                "judged state: live drift of a window not configured")
        for length in self.drift:
            found = drift.get(length)
            keys: dict[str, tuple[int, dict[int, list[float]]]] = {}
            if found is not None and keep_texts:
                same_lengths("live drift", found.keys, found.klass, found.buckets, found.sums)
                for text, klass, buckets, sums in zip(
                    found.keys, found.klass, found.buckets, found.sums, strict=True
                ):
                    require(0 <= klass < classes and 0 < len(buckets) <= 4
                            and len(buckets) == len(sums)
                            and all(len(row) == 2 * measures for row in sums),
                            "judged state: a live drift row")
                    keys[text] = (klass, dict(zip(buckets, (list(r) for r in sums),
                                                  strict=True)))
            self.drift[length] = keys
        return self


def _dropped(
    keys: list[str], sample: Sample, baseline: Sample, measure: int
) -> list[tuple[str, float, float]]:
    """The shared ``keys`` whose ``measure`` fell most from ``baseline`` to ``sample``."""
    drops = []
    for key in keys:
        before, after = baseline.scores[key][1][measure], sample.scores[key][1][measure]
        if after < before:  # False for NaN
            drops.append((after - before, key, before, after))
    return [(key, before, after) for _, key, before, after in sorted(drops)[:WORSENED_ROWS]]


def _sample_state(sample: Sample) -> SampleState:
    return SampleState(
        sample.sample_id, sample.first, sample.last, list(sample.scores),
        [klass for klass, _ in sample.scores.values()],
        [nan_or_none(values) for _, values in sample.scores.values()], sample.pending,
        sorted(sample.curves), [list(sample.curves[k]) for k in sorted(sample.curves)],
    )


def _sample(state: SampleState, classes: int, measures: int) -> Sample:
    same_lengths(f"sample {state.sample_id}", state.keys, state.klass, state.scores)
    for klass, values in zip(state.klass, state.scores, strict=True):
        if not (0 <= klass < classes and len(values) == measures):
            raise StateError(f"sample {state.sample_id}: a class index or score row")
    same_lengths(f"sample {state.sample_id} curves", state.curve_classes, state.curve_sums)
    for klass, sums in zip(state.curve_classes, state.curve_sums, strict=True):
        if not (OVERALL <= klass < classes and len(sums) == CURVE_SIZE and sums[-1] >= 0):
            raise StateError(f"sample {state.sample_id}: a class index or curve row")
    return Sample(
        state.sample_id, state.first, state.last,
        {key: (klass, none_as_nan(values))
         for key, klass, values in zip(state.keys, state.klass, state.scores, strict=True)},
        state.pending,
        {klass: list(sums)
         for klass, sums in zip(state.curve_classes, state.curve_sums, strict=True)},
    )


def covers(sample: Counter[int], baseline: Counter[int], shared: Counter[int], klass: int) -> (
    bool
):
    """Whether a sample may follow its baseline as the cell's baseline, from the queries per
    class of the sample, of the baseline and of those both share: for a class, it judged at
    least as many queries of the class (a class missing from it, or a sample made of a
    straggling judgment, is no baseline); for OVERALL, it shares queries of every class the
    baseline has (one that lacks a class would hide that class's regression from the overall
    figures)."""
    if klass != OVERALL:
        return sample[klass] >= baseline[klass]
    return all(shared[k] for k in baseline)


def _ranked(rankings: Sequence[Sequence[str]], labels: Sequence[Mapping[str, int]]) -> (
    RankedLists
):
    """The lists to score. A judgment names each document once (``schema`` otherwise), but a
    live result list, or one rebuilt from impressions, may repeat a result: it is scored
    with the result's first place only (online, every place counts as shown)."""
    try:
        return RankedLists.from_lists(rankings, labels)
    except DuplicateDocumentError:
        return RankedLists.from_lists([list(dict.fromkeys(r)) for r in rankings], labels)
