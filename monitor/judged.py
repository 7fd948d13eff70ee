"""Rolling offline metrics from judged queries, and regression detection between samples.

Judged queries come from two sources: ``sample`` (``judgment`` messages, grouped by
``sample_id``) and ``live`` (live ``query`` events whose normalised text has stored ``qrels``
labels). Each is scored with the configured measures by the offline engine, in batches, and
feeds rolling windows per query class. A completed sample is compared with its baseline on the
queries both share (paired by normalised query text). Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from monitor.classes import normalise
from monitor.config import OfflineConfig
from monitor.offline.measures import score
from monitor.offline.ranking import RankedLists
from monitor.offline.spec import MeasureSpec, parse_measure
from monitor.stats import PairedComparison, compare

SOURCES = ("sample", "live")
SCORE_BUCKETS = tuple(i / 10 for i in range(11))
BATCH = 256
OVERALL = -1
"""Class index of the overall figures (exported as query_class="all")."""


@dataclass(frozen=True, slots=True)
class Pending:
    """A judged query waiting to be scored."""

    source: str
    time: float
    klass: int
    key: str
    sample_id: str | None
    ranking: Sequence[str]
    labels: dict[str, int]


@dataclass(frozen=True, slots=True)
class Scored:
    source: str
    time: float
    klass: int
    key: str
    values: tuple[float, ...]  # one per measure; NaN where the measure skips the query


@dataclass
class Window:
    """Running sums of the scores inside a window, per (class, measure)."""

    entries: deque[Scored] = field(default_factory=deque)
    sums: dict[tuple[int, int], float] = field(default_factory=dict)
    counts: dict[tuple[int, int], int] = field(default_factory=dict)

    def add(self, scored: Scored, sign: int = 1) -> None:
        for m, value in enumerate(scored.values):
            if math.isnan(value):
                continue
            for klass in (scored.klass, OVERALL):
                key = (klass, m)
                self.sums[key] = self.sums.get(key, 0.0) + sign * value
                self.counts[key] = self.counts.get(key, 0) + sign

    def mean(self, klass: int, measure: int) -> tuple[float, int] | None:
        count = self.counts.get((klass, measure), 0)
        if count <= 0:
            return None
        return self.sums[(klass, measure)] / count, count


@dataclass
class Sample:
    sample_id: str
    first: float
    last: float
    scores: dict[str, tuple[int, tuple[float, ...]]] = field(default_factory=dict)
    pending: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    """A completed sample against its baseline, for one class (or OVERALL) and measure."""

    sample_id: str
    baseline_id: str
    comparison: PairedComparison
    regression: bool | None  # None: too few shared queries for a verdict


@dataclass
class Judged:
    """The explicit state of the offline side."""

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
    completed: deque[Sample] = field(default_factory=deque)
    pinned: Sample | None = None
    verdicts: dict[tuple[int, int], Verdict] = field(default_factory=dict)
    last_completed_time: float | None = None
    qrels: OrderedDict[str, dict[str, int]] = field(default_factory=OrderedDict)
    skipped: int = 0
    totals: dict[tuple[int, int], tuple[float, int]] = field(default_factory=dict)
    """All-time sums and counts of sample scores per (class or OVERALL, measure)."""
    judged_queries: dict[int, int] = field(default_factory=dict)
    """All-time number of scored sample queries per class or OVERALL."""

    def __post_init__(self) -> None:
        self.specs = [parse_measure(name) for name in self.config.measures]
        for source in SOURCES:
            for length in self.config.windows:
                self.time_windows[(source, length)] = Window()

    # --- input -----------------------------------------------------------------------------

    def judgment(
        self, sample_id: str, time: float, klass: int, text: str, ranking: Sequence[str],
        labels: dict[str, int],
    ) -> None:
        self.judgment_clock = max(self.judgment_clock, time)
        self.settle(self.judgment_clock)
        sample = self.open_samples.get(sample_id)
        if sample is None:
            sample = self.open_samples[sample_id] = Sample(sample_id, time, time)
        sample.last = max(sample.last, time)
        sample.pending += 1
        self._queue(Pending("sample", time, klass, normalise(text), sample_id, ranking, labels))
        size = self.config.sample_size
        if size and sample.pending + len(sample.scores) >= size:
            self._flush()
            self._complete(sample)

    def store_qrels(self, text: str, labels: dict[str, int]) -> None:
        capacity = self.config.qrels_capacity
        if capacity == 0:
            return
        key = normalise(text)
        self.qrels[key] = labels
        self.qrels.move_to_end(key)
        while len(self.qrels) > capacity:
            self.qrels.popitem(last=False)

    def live_query(self, time: float, klass: int, text: str, results: Sequence[str]) -> None:
        """A live query: scored when its normalised text has stored labels."""
        key = normalise(text)
        labels = self.qrels.get(key)
        if labels is not None:
            self._queue(Pending("live", time, klass, key, None, results, labels))

    def advance(self, time: float) -> None:
        """Move the offline clock, which bounds the time windows."""
        if time > self.clock:
            self.clock = time

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
        total, count = 0.0, 0
        for sample in list(self.completed)[-last:]:
            for query_class, values in sample.scores.values():
                value = values[measure]
                if (klass == OVERALL or query_class == klass) and not math.isnan(value):
                    total += value
                    count += 1
        return (total / count, count) if count else None

    # --- internals -------------------------------------------------------------------------

    def _queue(self, pending: Pending) -> None:
        self.pending.append(pending)
        if len(self.pending) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        lists = RankedLists.from_lists([p.ranking for p in batch], [p.labels for p in batch])
        columns = [score(lists, spec) for spec in self.specs]
        matrix = np.column_stack(columns) if columns else np.zeros((len(batch), 0))
        for pending, row in zip(batch, matrix.tolist(), strict=True):
            values = tuple(float(v) for v in row)
            self._record(Scored(pending.source, pending.time, pending.klass, pending.key, values))
            if pending.sample_id is not None:
                sample = self.open_samples.get(pending.sample_id)
                if sample is not None:
                    sample.scores[pending.key] = (pending.klass, values)
                    sample.pending -= 1
        self._evict()

    def _record(self, scored: Scored) -> None:
        if scored.source == "sample":
            for klass in (scored.klass, OVERALL):
                self.judged_queries[klass] = self.judged_queries.get(klass, 0) + 1
                for m, value in enumerate(scored.values):
                    if not math.isnan(value):
                        total, count = self.totals.get((klass, m), (0.0, 0))
                        self.totals[(klass, m)] = (total + value, count + 1)
        for m, value in enumerate(scored.values):
            if math.isnan(value):
                self.skipped += 1
                continue
            for klass in (scored.klass, OVERALL):
                key = (scored.source, klass, m)
                counts = self.histograms.get(key)
                if counts is None:
                    counts = self.histograms[key] = [0] * (len(SCORE_BUCKETS) + 1)
                    self.histogram_sums[key] = 0.0
                counts[bisect_left(SCORE_BUCKETS, value)] += 1
                self.histogram_sums[key] += value
        for (source, length), window in self.time_windows.items():
            if source == scored.source and scored.time >= self.clock - length:
                window.entries.append(scored)
                window.add(scored)

    def _evict(self) -> None:
        for (_, length), window in self.time_windows.items():
            horizon = self.clock - length
            entries = window.entries
            while entries and entries[0].time < horizon:
                window.add(entries.popleft(), sign=-1)

    def _complete(self, sample: Sample) -> None:
        del self.open_samples[sample.sample_id]
        baseline = self._baseline()
        if sample.sample_id == self.config.baseline:
            self.pinned = sample
        self.completed.append(sample)
        keep = max([*self.config.last_samples, 1]) + 1
        while len(self.completed) > keep:
            self.completed.popleft()
        self.last_completed_time = sample.last
        if baseline is not None:
            self._judge(sample, baseline)

    def _baseline(self) -> Sample | None:
        if self.config.baseline == "previous":
            return self.completed[-1] if self.completed else None
        return self.pinned

    def _judge(self, sample: Sample, baseline: Sample) -> None:
        """Compare per class and measure; flags follow Holm's step-down procedure.

        ``max_p_value`` bounds the family-wise error over all tests of the sample, so that a
        quiet week pages nobody although dozens of (class, measure) pairs are tested.
        """
        config = self.config
        shared = [key for key in sample.scores if key in baseline.scores]
        classes = {sample.scores[key][0] for key in shared} | {OVERALL}
        classes |= {klass for klass, _ in self.verdicts}
        results: dict[tuple[int, int], PairedComparison] = {}
        for klass in sorted(classes):
            keys = [k for k in shared if klass == OVERALL or sample.scores[k][0] == klass]
            for m in range(len(self.specs)):
                pairs = [
                    (sample.scores[k][1][m], baseline.scores[k][1][m]) for k in keys
                    if not math.isnan(sample.scores[k][1][m])
                    and not math.isnan(baseline.scores[k][1][m])
                ]
                current = np.array([p[0] for p in pairs], dtype=np.float64)
                before = np.array([p[1] for p in pairs], dtype=np.float64)
                results[(klass, m)] = compare(current, before, config.permutations, len(pairs))
        testable = sorted(
            (c.p_permutation, key) for key, c in results.items()
            if c.shared >= config.min_shared_queries
        )
        significant: set[tuple[int, int]] = set()
        for rank, (p_value, key) in enumerate(testable):
            if p_value >= config.max_p_value / (len(testable) - rank):
                break
            significant.add(key)
        for key, comparison in results.items():
            verdict: bool | None = None
            if comparison.shared >= config.min_shared_queries:
                verdict = key in significant and comparison.delta < -config.min_drop
            self.verdicts[key] = Verdict(sample.sample_id, baseline.sample_id, comparison, verdict)
