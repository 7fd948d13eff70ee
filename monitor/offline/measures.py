"""The offline IR measures: one small pure function each, over a batch of ranked lists.

Every function has the signature ``(lists, spec) -> per-query values`` and follows
trec_eval 10 by default; the variants people argue about are parameters of the spec
(see ``spec.py``). ``k`` is ``spec.cutoff``, ``rel`` is ``spec.relevance`` and R is the
number of judged documents with a label >= rel. Unjudged documents count as non-relevant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
else:
    from monitor.lazy import numpy as np

from monitor.offline import curves
from monitor.offline.ranking import RankedLists, safe_divide, segment_sums
from monitor.offline.spec import RECALL_LEVELS, MeasureSpec

if TYPE_CHECKING:
    from monitor.offline.ranking import BoolArray, FloatArray, IntArray

GEOMETRIC_FLOOR = 1e-5
"""trec_eval's MIN_GEO_MEAN: per-query values below it are raised to it before GMAP's log."""


def precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """P@k = |relevant in top k| / k.

    Fewer than k retrieved still divides by k (trec_eval P_k).
    """
    k = _cutoff(spec)
    return lists.relevant_in_top(spec.relevance, k) / k


def recall(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """R@k = |relevant in top k| / R; 0 when R = 0 (trec_eval recall_k)."""
    rel = spec.relevance
    return safe_divide(lists.relevant_in_top(rel, spec.cutoff), lists.num_rel(rel))


def f1(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """F1@k = 2 P@k R@k / (P@k + R@k); 0 when both are 0."""
    p = precision(lists, spec)
    r = recall(lists, spec)
    return safe_divide(2 * p * r, p + r)


def average_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """AP@k = sum over relevant d in the top k of P@rank(d), divided by the denominator.

    Denominator ``denom``: ``R`` (default, trec_eval map and map_cut), ``min_R_k`` (Spark
    MLlib's meanAveragePrecisionAt; R when there is no cutoff) or ``rel_ret``, the relevant
    documents retrieved in the top k (the recommender-systems variant). 0 when it is 0.
    """
    hits = lists.relevant(spec.relevance)
    top = lists.within(spec.cutoff)
    if top is not None:
        hits = hits & top
    at = np.flatnonzero(hits)
    precision_at_hit = lists.rank_among(at) / (lists.position[at] + 1.0)
    total = segment_sums(lists.segment[at], precision_at_hit, lists.size)
    if spec.denom == "rel_ret":
        denominator = lists.count(lists.segment, hits)
    elif spec.denom == "min_R_k" and spec.cutoff is not None:
        denominator = np.minimum(lists.num_rel(spec.relevance), spec.cutoff)
    else:
        denominator = lists.num_rel(spec.relevance)
    return safe_divide(total, denominator)


def reciprocal_rank(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """RR@k = 1 / rank of the first relevant document in the top k; 0 when there is none."""
    hits = lists.relevant(spec.relevance)
    top = lists.within(spec.cutoff)
    first = lists.first_position(hits if top is None else hits & top)
    return safe_divide(first >= 0, first + 1.0)


def ndcg(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """nDCG@k = DCG@k / IDCG@k with DCG@k = sum_{i<=k} gain(label_i) / log2(i + 1).

    ``gain``: ``linear`` (the label, trec_eval) or ``exp`` (2^label - 1). Unjudged and
    label-0 documents gain 0; the gains do not depend on rel (trec_eval). ``ideal``:
    ``judged`` ranks all judged documents of the query by label (trec_eval), ``retrieved``
    re-sorts the retrieved top k only. 0 when the ideal DCG is 0.

    Exponential gains are computed as (2^label - 1) / 2^m, m the largest label of the query's
    ideal ranking: the ratio is the same (scaling by a power of 2 is exact in floating point),
    and labels of 1024 and more, whose 2^label overflows a double, keep their exact weight.
    """
    if spec.pairs:
        return gain_ndcg(lists, spec)
    if spec.gain == "exp" and spec.ideal == "retrieved":  # scaled by the top k's largest label
        top = lists.within(spec.cutoff)
        kept = lists.labels if top is None else np.where(top, lists.labels, 0)
        scale = _segment_max(lists.segment, kept, lists.size)
        gains = _gain(lists.labels, lists.segment, scale)
        dcg = lists.sum_ranked(gains / np.log2(lists.position + 2.0), top)
        return safe_divide(dcg, _retrieved_ideal_dcg(lists, gains, top))
    # the gains are the same at every cutoff: worked out once
    largest = lists.max_judged if spec.gain == "exp" else None
    gains = lists.shared(("ndcg gains", spec.gain),
                         lambda: _gain(lists.labels, lists.segment, largest))
    dcg = _discounted_sum(lists, lists.segment, lists.position, gains,
                          lists.first_rows(spec.cutoff))
    if spec.ideal == "retrieved":
        ideal = _retrieved_ideal_dcg(lists, gains, lists.within(spec.cutoff))
    else:
        ideal_gains = lists.shared(("ndcg ideal gains", spec.gain),
                                   lambda: _gain(lists.judged, lists.judged_segment, largest))
        ideal = _discounted_sum(lists, lists.judged_segment, lists.judged_position, ideal_gains,
                                lists.first_judged_rows(spec.cutoff))
    return safe_divide(dcg, ideal)


def _discounted_sum(
    lists: RankedLists, segment: IntArray, position: IntArray, gains: FloatArray,
    rows: IntArray | None,
) -> FloatArray:
    """Per query, the sum of gain / log2(rank + 1) over ``rows`` (None: all), added in
    rank order."""
    if rows is not None:
        segment, position, gains = segment[rows], position[rows], gains[rows]
    return segment_sums(segment, gains / lists.log2_ranks[position], lists.size)


def r_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Rprec = |relevant in top R| / R; 0 when R = 0."""
    num_rel = lists.num_rel(spec.relevance)
    return safe_divide(lists.relevant_in_top(spec.relevance, num_rel), num_rel)


def bpref(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """bpref = (1/R) sum over retrieved relevant r of (1 - min(n_r, R) / min(N, R)).

    n_r: judged non-relevant documents ranked above r; N: judged non-relevant documents of
    the query. Unjudged documents are skipped, as in trec_eval (Buckley and Voorhees, 2004).
    A relevant document with no judged non-relevant one above it contributes 1.
    """
    rel = spec.relevance
    num_rel = lists.num_rel(rel)
    hits = lists.relevant(rel)
    at = np.flatnonzero(hits)
    segment = lists.segment[at]
    nonrel_above = lists.running_count((lists.labels >= 0) & ~hits)[at]
    bound = np.minimum(lists.num_nonrel(rel), num_rel)[segment]
    penalty = safe_divide(np.minimum(nonrel_above, num_rel[segment]), bound)
    total = segment_sums(segment, 1.0 - penalty, lists.size)
    return safe_divide(total, num_rel)


def success(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Success@k = 1 if a relevant document is in the top k, else 0 (trec_eval success_k)."""
    found = lists.relevant_in_top(spec.relevance, spec.cutoff)
    return (found > 0).astype(np.float64)


def judged(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Judged@k = |judged documents in the top k| / denominator.

    ``denom``: ``k`` (default), like P@k, so a list shorter than k cannot look fully judged;
    ``retrieved``, the documents retrieved in the top k, min(k, retrieved), as ir_measures
    0.4.3 does (0 for an empty list). ``negative``: ``unjudged`` (default) counts a document
    labelled below 0 (-1) as unjudged, as every other measure does; ``judged`` counts every
    document with a qrels line, whatever its label, as ir_measures does. trec_eval's unj_k
    equals 1 - Judged@k when at least k documents were retrieved.
    """
    k = _cutoff(spec)
    found = lists.in_qrels if spec.negative == "judged" else lists.labels >= 0
    count = lists.count_ranked(found, k)
    if spec.denom == "retrieved":
        return safe_divide(count, np.minimum(lists.num_ret, k))
    return count / k


INFAP_EPSILON = 1e-5
"""trec_eval's INFAP_EPSILON, which keeps infAP's ratio of judged documents defined."""


def _counts(values: IntArray) -> FloatArray:
    return values.astype(np.float64)


def num_q(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """1 per evaluated query; the summary is their number (trec_eval num_q)."""
    return np.ones(lists.size, dtype=np.float64)


def run_id(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """No number: the run's tag (the sixth column of the run file's last line) is printed in
    the summary (trec_eval runid)."""
    return np.full(lists.size, np.nan)


def num_ret(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Documents retrieved (after -M); the summary is the sum (trec_eval num_ret)."""
    return _counts(lists.num_ret)


def num_rel(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """R, judged documents with a label >= rel; the summary is the sum (trec_eval num_rel;
    with -c trec_eval sums the labels > 0 of every qrels query, the same at rel = 1)."""
    return _counts(lists.num_rel(spec.relevance))


def num_rel_ret(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Relevant documents retrieved; the summary is the sum (trec_eval num_rel_ret)."""
    return _counts(lists.relevant_in_top(spec.relevance, None))


def num_nonrel_judged_ret(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Retrieved documents judged with a label 0 <= label < rel; the summary is the sum."""
    judged_nonrel = (lists.labels >= 0) & ~lists.relevant(spec.relevance)
    return _counts(lists.count_ranked(judged_nonrel, None))


def interpolated_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """iprec_at_recall_x = max over ranks r at or below the c-th relevant document of P@r,
    c = lround(x R) (trec_eval 10; trec_eval 9 used (long)(x R + 0.9)); c = 0 is the first
    relevant document. 0 when fewer than c relevant documents were retrieved."""
    return curves.interpolated_precision(lists, spec.relevance, (_level(spec),))[:, 0]


def eleven_point_average(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """11pt_avg = mean of iprec_at_recall over the levels (default 0, 0.1, ..., 1), added from
    the last level to the first, as trec_eval does."""
    levels = spec.values or RECALL_LEVELS
    per_level = curves.interpolated_precision(lists, spec.relevance, levels)
    total = np.zeros(lists.size)
    for column in reversed(range(len(levels))):
        total = total + per_level[:, column]
    return total / len(levels)


def r_precision_multiple(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Rprec_mult_x = P@c with c = (long)(x R + 0.9), trec_eval's rounding; 0 when c = 0."""
    rel = spec.relevance
    cutoff = np.floor(_level(spec) * lists.num_rel(rel) + 0.9)
    return safe_divide(lists.relevant_in_top(rel, cutoff.astype(np.int64)), cutoff)


def relative_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """relative_P@k = |relevant in top k| / min(k, R): precision up to R, recall after it;
    0 when R = 0."""
    k = _cutoff(spec)
    rel = spec.relevance
    found = lists.relevant_in_top(rel, k)
    return safe_divide(found, np.minimum(lists.num_rel(rel), k))


def set_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """set_P = relevant retrieved / retrieved; 0 for an empty ranking."""
    return safe_divide(num_rel_ret(lists, spec), lists.num_ret)


def set_recall(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """set_recall = relevant retrieved / R; 0 when R = 0."""
    return safe_divide(num_rel_ret(lists, spec), lists.num_rel(spec.relevance))


def set_relative_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """set_relative_P = relevant retrieved / min(retrieved, R); 0 when either is 0."""
    return safe_divide(
        num_rel_ret(lists, spec), np.minimum(lists.num_ret, lists.num_rel(spec.relevance))
    )


def set_map(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """set_map = set_P x set_recall = relevant retrieved^2 / (retrieved R); 0 when either
    is 0."""
    found = num_rel_ret(lists, spec)
    return safe_divide(found * found, _counts(lists.num_ret) * lists.num_rel(spec.relevance))


def set_f(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """set_F = (b + 1) P R / (b P + R) with P = set_P, R = set_recall and b the parameter
    (default 1: F1 of the whole ranking); 0 when nothing relevant was retrieved."""
    beta = spec.values[0] if spec.values else 1.0
    p, r = set_precision(lists, spec), set_recall(lists, spec)
    return safe_divide((beta + 1.0) * p * r, np.where(p > 0, beta * p + r, 0.0))


def utility(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """utility = u1 a + u2 b + u3 c + u4 d over the contingency table (a: relevant
    retrieved, b: non-relevant retrieved, c: relevant not retrieved, d: the collection's
    other documents, taken as 0 documents), parameters u1..u4 default 1, -1, 0, 0. 0 for a
    query missing from the run (-c), as trec_eval sets it."""
    u1, u2, u3, u4 = spec.values or (1.0, -1.0, 0.0, 0.0)
    a = num_rel_ret(lists, spec)
    retrieved = _counts(lists.num_ret)
    relevant = _counts(lists.num_rel(spec.relevance))
    value = u1 * a + u2 * (retrieved - a) + u3 * (relevant - a) + u4 * (a - retrieved - relevant)
    return np.where(lists.num_ret > 0, value, 0.0)


def inferred_ap(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """infAP (Yilmaz and Aslam, 2006) as trec_eval computes it: over the relevant documents
    d at 0-based rank j, 1 if j = 0, else 1/(j+1) + j/(j+1) (r - 1 + n + u)/j
    (r - 1 + e)/(r - 1 + n + 2e), r, n, u the relevant (d included), judged non-relevant and
    pooled-but-unjudged (labelled below 0) documents down to d, e = 1e-5; summed over d and
    divided by R. Documents without a qrels line are skipped."""
    hits = lists.relevant(spec.relevance)
    judged_nonrel = (lists.labels >= 0) & ~hits
    pooled_unjudged = lists.in_qrels & (lists.labels < 0)
    at = np.flatnonzero(hits)
    r = lists.running_count(hits)[at].astype(np.float64)
    n = lists.running_count(judged_nonrel)[at]
    u = lists.running_count(pooled_unjudged)[at]
    j = lists.position[at].astype(np.float64)
    above = (r - 1 + n + u) / np.where(j > 0, j, 1.0)
    share = (r - 1 + INFAP_EPSILON) / (r - 1 + n + 2 * INFAP_EPSILON)
    term = np.where(j > 0, 1.0 / (j + 1.0) + (j / (j + 1.0)) * above * share, 1.0)
    total = segment_sums(lists.segment[at], term, lists.size)
    return safe_divide(total, lists.num_rel(spec.relevance))


def binary_g(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """binG = (1/R) sum over relevant retrieved d of 1 / log2(2 + non-relevant above d)."""
    hits = lists.relevant(spec.relevance)
    at = np.flatnonzero(hits)
    nonrel_above = lists.position[at] + 1 - lists.running_count(hits)[at]
    total = segment_sums(lists.segment[at], 1.0 / np.log2(2.0 + nonrel_above), lists.size)
    return safe_divide(total, lists.num_rel(spec.relevance))


def unjudged(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """unj@k = |documents without a judgment (none, or a label below 0) in the top k| / k;
    0 for a query missing from the run (-c)."""
    k = _cutoff(spec)
    return lists.count_ranked(lists.labels < 0, k) / k


def rank_biased_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """RBP (Moffat and Zobel, 2008) = (1 - p) sum_i gain(label_i) p^(i-1), p the parameter
    ``p`` (default 0.9); gains are the labels (or ``level=gain`` pairs), divided into [0, 1]
    as (g - min) / (max - min) when one lies outside it; p^(i-1) is multiplied out down the
    ranking, as trec_eval does."""
    p = _persistence(spec)
    gains = _gains(lists.labels, _gain_table(lists, spec))
    low, high = _gain_range(lists, spec)
    scaled = (low < 0) | (high > 1)  # per query: its levels are 0 to its largest label
    low_of = low[lists.segment]
    spread = np.where(scaled, high - low, 1.0)[lists.segment]
    gains = np.where(scaled[lists.segment], (gains - low_of) / spread, gains)
    total = lists.sum_ranked(gains * _powers(p, lists), None)
    return (1.0 - p) * total


def rbp_residual(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """rbp_resid = p^n + (1 - p) sum over unjudged documents i of p^(i-1), n documents
    retrieved: how much RBP could still grow; 0 when every retrieved document is judged."""
    p = _persistence(spec)
    weight = _powers(p, lists)
    unjudged_docs = lists.labels < 0
    total = lists.sum_ranked(weight, unjudged_docs)
    rest = _power_table(p, int(lists.num_ret.max(initial=0)) + 1)[lists.num_ret]
    value = rest + (1 - p) * total
    return np.where(lists.count(lists.segment, unjudged_docs) > 0, value, 0.0)


def _persistence(spec: MeasureSpec) -> float:
    p = 0.9
    for key, value in spec.pairs:
        if key == "p":
            p = value
    return p


def _power_table(p: float, n: int) -> FloatArray:
    """1, p, p p, ... (n entries), each the previous times p, as a C loop makes them."""
    table = np.ones(max(n, 1))
    if n > 1:
        table[1:] = np.cumprod(np.full(n - 1, p))
    return table


def _powers(p: float, lists: RankedLists) -> FloatArray:
    """p^(rank - 1) of each ranked document (rbp and rbp_resid read the same)."""
    return lists.shared(
        ("powers", p), lambda: _power_table(p, int(lists.num_ret.max(initial=0)))[lists.position]
    )


def _level(spec: MeasureSpec) -> float:
    if spec.level is None:
        raise ValueError(f"{spec} needs a level")
    return spec.level


def _gain_table(lists: RankedLists, spec: MeasureSpec) -> dict[int, float]:
    """Gain per label (trec_eval's setup_gains): the label itself, unless a ``level=gain``
    pair sets it."""
    levels = lists.shared(("judged levels",), lambda: _distinct(lists.judged))
    gains = {level: float(level) for level in levels}
    gains.update(_gain_pairs(spec))
    return gains


def _distinct(labels: IntArray) -> list[int]:
    """The distinct labels (>= 0), ascending; counted by value when they are small."""
    if len(labels) and int(labels.max()) < 4 * len(labels) + 1024:
        return np.flatnonzero(np.bincount(labels)).tolist()
    return [int(level) for level in np.unique(labels).tolist()]


def _gain_pairs(spec: MeasureSpec) -> dict[int, float]:
    pairs = {}
    for key, value in spec.pairs:
        try:
            pairs[int(key)] = value
        except ValueError:
            continue  # not a level (rbp's p)
    return pairs


def _gain_range(lists: RankedLists, spec: MeasureSpec) -> tuple[FloatArray, FloatArray]:
    """The smallest and largest gain per query over its levels (0 to its largest label, each
    with its gain) and the levels of the pairs, as trec_eval's setup_gains lists them."""
    pairs = _gain_pairs(spec)
    low = np.zeros(lists.size)
    high = np.zeros(lists.size)
    for top in np.unique(lists.max_judged).tolist():
        lowest, highest = 0, top  # the extreme levels that keep their own gain
        while lowest in pairs:
            lowest += 1
        while highest in pairs:
            highest -= 1
        gains = list(pairs.values()) + [float(v) for v in {lowest, highest} if 0 <= v <= top]
        where = lists.max_judged == top
        low[where], high[where] = min(gains), max(gains)
    return low, high


def _gains(labels: IntArray, gains: dict[int, float]) -> FloatArray:
    """The gain of each label (0 for unjudged documents and unknown levels)."""
    out = np.zeros(len(labels))
    for level, gain in gains.items():
        if gain:
            out[labels == level] = gain
    return out


@dataclass(frozen=True, slots=True)
class GainRows:
    """The gains of each query's ranking and of its ideal ranking (the positive gains of its
    judged documents, largest first), one padded row per query: a row's running sums, taken
    along the row, add up in rank order exactly as trec_eval's loops do."""

    results: FloatArray
    ideal: FloatArray
    num_ret: IntArray
    num_ideal: IntArray

    @property
    def discount(self) -> FloatArray:
        """log2(rank + 1) for each column."""
        return np.log2(np.arange(self.results.shape[1], dtype=np.float64) + 2.0)


def gain_rows(lists: RankedLists, spec: MeasureSpec) -> GainRows:
    """Gains per label as trec_eval's setup_gains gives them (the label, or ``level=gain``
    pairs; 0 for unjudged documents), laid out in ``GainRows``; made once per set of pairs
    for the measures that read them."""
    pairs = tuple(sorted(_gain_pairs(spec).items()))
    return lists.shared(("gain rows", pairs), lambda: _gain_rows(lists, spec))


def _running_dcg(lists: RankedLists, spec: MeasureSpec) -> tuple[FloatArray, FloatArray]:
    """Each query's DCG and ideal DCG down to each rank (running sums along ``gain_rows``)."""
    def make() -> tuple[FloatArray, FloatArray]:
        rows = gain_rows(lists, spec)
        return (np.cumsum(rows.results / rows.discount, axis=1),
                np.cumsum(rows.ideal / rows.discount, axis=1))

    return lists.shared(("running dcg", tuple(sorted(_gain_pairs(spec).items()))), make)


def _gain_rows(lists: RankedLists, spec: MeasureSpec) -> GainRows:
    table = _gain_table(lists, spec)
    ideal = _gains(lists.judged, table)
    positive = ideal > 0
    segment = lists.judged_segment[positive]
    ideal = ideal[positive]
    # the labels come largest first in each query: so do their gains unless pairs set them
    if bool(((segment[1:] == segment[:-1]) & (ideal[1:] > ideal[:-1])).any()):
        order = np.lexsort((-ideal, segment))
        ideal, segment = ideal[order], segment[order]
    num_ideal = np.bincount(segment, minlength=lists.size).astype(np.int64)
    width = int(max(lists.num_ret.max(initial=0), num_ideal.max(initial=0))) + 1
    results = np.zeros((lists.size, width))
    results[lists.segment, lists.position] = _gains(lists.labels, table)
    ideal_rows = np.zeros((lists.size, width))
    starts = np.concatenate(([0], np.cumsum(num_ideal)))[:-1]
    ideal_rows[segment, np.arange(len(segment)) - starts[segment]] = ideal
    return GainRows(results, ideal_rows, lists.num_ret, num_ideal)


def _last(rows: FloatArray) -> FloatArray:
    return rows[:, -1] if rows.shape[1] else np.zeros(rows.shape[0])


def gain_ndcg(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """nDCG with gains set per label (trec_eval ``ndcg.1=3,2=9``): DCG / ideal DCG, the
    ideal ranking of the positive gains only; 0 when the ideal DCG is 0."""
    dcg_at, ideal_at = _running_dcg(lists, spec)
    return safe_divide(_last(dcg_at), _last(ideal_at))


def dcg(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """DCG = sum_i gain(label_i) / log2(i + 1), gains as for ``ndcg`` (trec_eval dcg)."""
    return _last(_running_dcg(lists, spec)[0])


def ndcg_rel(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """ndcg_rel = nDCG averaged over the relevant documents (positive gain): at the rank of
    each one retrieved, nDCG there; for each one not retrieved, nDCG at the end of the
    ranking; divided by their number. 0 when that is 0."""
    rows = gain_rows(lists, spec)
    dcg_at, ideal_at = _running_dcg(lists, spec)
    found = rows.results > 0
    ratio = np.divide(dcg_at, ideal_at, out=np.zeros_like(dcg_at), where=found)
    at_end = safe_divide(_last(dcg_at), _last(ideal_at))
    missed = rows.num_ideal - found.sum(axis=1)
    total = _last(np.cumsum(ratio, axis=1)) + missed * at_end
    return np.where(total > 0, safe_divide(total, rows.num_ideal), 0.0)


def r_ndcg(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Rndcg = the mean of nDCG at each rank where the ideal ranking's gain changes (the R
    of each gain level, the last at the number of positive gains), then at the end of the
    ranking if it reaches two ranks past that, as trec_eval computes it; 0 when R = 0."""
    rows = gain_rows(lists, spec)
    dcg_at, ideal_at = _running_dcg(lists, spec)
    size, width = rows.results.shape
    j = np.arange(1, width)
    # a boundary after the top j: the ideal gain at rank j + 1 differs from rank j's
    boundary = (rows.ideal[:, 1:] != rows.ideal[:, :-1]) & (j <= rows.num_ideal[:, None])
    ranked = np.minimum(j, rows.num_ret[:, None]) - 1
    dcg_then = np.where(ranked >= 0, np.take_along_axis(dcg_at, np.maximum(ranked, 0), 1), 0.0)
    ndcg_then = np.divide(dcg_then, ideal_at[:, :-1], out=np.zeros((size, width - 1)),
                          where=boundary)
    total = _last(np.cumsum(ndcg_then, axis=1)) if width > 1 else np.zeros(size)
    points = boundary.sum(axis=1)
    extra = rows.num_ret >= rows.num_ideal + 2
    total = np.where(extra, total + safe_divide(_last(dcg_at), _last(ideal_at)), total)
    points = points + extra
    value = safe_divide(total, points)
    return np.where(lists.num_rel(spec.relevance) > 0, value, 0.0)


def normalized_gain(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """G (trec_eval, experimental): sum over documents of gain_i / log2(2 + C_i - S_i),
    C_i the running sum of max(ideal gain at i, 1) and S_i that of the gains so far, divided
    by the sum of the ideal gains; 0 when that is 0."""
    rows = gain_rows(lists, spec)
    cost = np.cumsum(np.maximum(rows.ideal, 1.0), axis=1)
    gained = np.cumsum(rows.results, axis=1)
    within = np.arange(rows.results.shape[1]) < rows.num_ret[:, None]
    terms = np.divide(rows.results, np.log2(2 + cost - gained),
                      out=np.zeros_like(cost), where=within & (rows.results != 0))
    ideal = _last(np.cumsum(rows.ideal, axis=1))
    return safe_divide(_last(np.cumsum(terms, axis=1)), ideal)


Shown = Literal["decimal", "count", "summary", "queries", "runid", "text"]
"""How trec_eval prints a measure: ``decimal`` per query and summary (%.4f); ``count``
per query and summary, an integer (the summary a sum); ``summary`` only in the summary
(geometric means); ``queries`` the number of queries, summary only; ``runid`` the run's
tag, summary only; ``text`` per query only, quoted (relstring)."""


@dataclass(frozen=True, slots=True)
class Measure:
    """A registered measure: its per-query function, how its values aggregate and print."""

    per_query: Callable[[RankedLists, MeasureSpec], FloatArray]
    aggregate: Callable[[FloatArray], float | None]
    shown: Shown = "decimal"


def arithmetic_mean(values: FloatArray) -> float | None:
    """Mean over the queries that have a value (NaN = skipped); None over nothing. Summed
    in query order, one addition after the other, as trec_eval does: a mean on a rounding
    tie of the printed decimals then prints as trec_eval prints it (numpy's pairwise sum
    can land on the other side)."""
    present = values[~np.isnan(values)]
    return _in_order(present) / len(present) if len(present) else None


def geometric_mean(values: FloatArray) -> float | None:
    """GMAP: exp(mean(log(max(v, 1e-5)))) over the queries that have a value (trec_eval),
    summed in query order."""
    present = values[~np.isnan(values)]
    if not len(present):
        return None
    return math.exp(_in_order(np.log(np.maximum(present, GEOMETRIC_FLOOR))) / len(present))


def total(values: FloatArray) -> float | None:
    """The sum over queries (trec_eval's num_ret, num_rel ...); counts add up exactly."""
    return float(values.sum())


def count(values: FloatArray) -> float | None:
    """The number of queries (trec_eval num_q)."""
    return float(len(values))


def nothing(values: FloatArray) -> float | None:
    """No summary value (runid prints the run's tag, relstring none)."""
    return None


def _in_order(values: FloatArray) -> float:
    """The sum of ``values``, added first to last in double precision (a C loop's sum)."""
    total = 0.0
    for value in values.tolist():
        total += value
    return total


MEASURES: dict[str, Measure] = {
    "P": Measure(precision, arithmetic_mean),
    "R": Measure(recall, arithmetic_mean),
    "F1": Measure(f1, arithmetic_mean),
    "AP": Measure(average_precision, arithmetic_mean),
    "RR": Measure(reciprocal_rank, arithmetic_mean),
    "nDCG": Measure(ndcg, arithmetic_mean),
    "Rprec": Measure(r_precision, arithmetic_mean),
    "bpref": Measure(bpref, arithmetic_mean),
    "Success": Measure(success, arithmetic_mean),
    "Judged": Measure(judged, arithmetic_mean),
    "GMAP": Measure(average_precision, geometric_mean, "summary"),
    "runid": Measure(run_id, nothing, "runid"),
    "num_q": Measure(num_q, count, "queries"),
    "num_ret": Measure(num_ret, total, "count"),
    "num_rel": Measure(num_rel, total, "count"),
    "num_rel_ret": Measure(num_rel_ret, total, "count"),
    "iprec_at_recall": Measure(interpolated_precision, arithmetic_mean),
    "relstring": Measure(run_id, nothing, "text"),
    "infAP": Measure(inferred_ap, arithmetic_mean),
    "gm_bpref": Measure(bpref, geometric_mean, "summary"),
    "Rprec_mult": Measure(r_precision_multiple, arithmetic_mean),
    "utility": Measure(utility, arithmetic_mean),
    "11pt_avg": Measure(eleven_point_average, arithmetic_mean),
    "binG": Measure(binary_g, arithmetic_mean),
    "relative_P": Measure(relative_precision, arithmetic_mean),
    "set_P": Measure(set_precision, arithmetic_mean),
    "set_relative_P": Measure(set_relative_precision, arithmetic_mean),
    "set_recall": Measure(set_recall, arithmetic_mean),
    "set_map": Measure(set_map, arithmetic_mean),
    "set_F": Measure(set_f, arithmetic_mean),
    "num_nonrel_judged_ret": Measure(num_nonrel_judged_ret, total, "count"),
    "rbp": Measure(rank_biased_precision, arithmetic_mean),
    "rbp_resid": Measure(rbp_residual, arithmetic_mean),
    "unj": Measure(unjudged, arithmetic_mean),
    "G": Measure(normalized_gain, arithmetic_mean),
    "dcg": Measure(dcg, arithmetic_mean),
    "ndcg_rel": Measure(ndcg_rel, arithmetic_mean),
    "Rndcg": Measure(r_ndcg, arithmetic_mean),
}


def relstring(lists: RankedLists, spec: MeasureSpec) -> list[str]:
    """trec_eval's relstring: the labels of the top n documents (default 10), one character
    each: the digit of a label 0 to 9, '>' above 9, '-' for a document without a qrels line,
    '.' for one judged below 0."""
    n = int(spec.values[0]) if spec.values else 10
    top = lists.position < n
    chars = np.where(lists.labels > 9, ord(">"), ord("0") + np.clip(lists.labels, 0, 9))
    chars = np.where(lists.labels < 0, np.where(lists.in_qrels, ord("."), ord("-")), chars)
    text = chars[top].astype(np.uint8).tobytes().decode("ascii")
    bounds = np.concatenate(([0], np.cumsum(lists.count(lists.segment, top))))
    return [text[bounds[q]:bounds[q + 1]] for q in range(lists.size)]


def shown(spec: MeasureSpec) -> Shown:
    """How ``spec``'s values print (``Shown``)."""
    return MEASURES[spec.name].shown


def score(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Per-query values of ``spec``; NaN for queries it skips (``no_rel=skip`` and R = 0)."""
    values = MEASURES[spec.name].per_query(lists, spec)
    if spec.no_rel == "skip":
        values = np.where(lists.num_rel(spec.relevance) == 0, np.nan, values)
    return values


def aggregate(spec: MeasureSpec, values: FloatArray) -> float | None:
    """The measure's summary over queries (mean, or geometric mean for GMAP)."""
    return MEASURES[spec.name].aggregate(values)


def geometric(spec: MeasureSpec) -> bool:
    """Whether ``spec``'s summary is a geometric mean (GMAP, gm_bpref): it has no per-query
    value of its own, and what moves its summary is the mean of its values' logarithms."""
    return MEASURES[spec.name].aggregate is geometric_mean


def _cutoff(spec: MeasureSpec) -> int:
    if spec.cutoff is None:
        raise ValueError(f"{spec} needs a cutoff")
    return spec.cutoff


def _gain(labels: IntArray, segment: IntArray, scale: IntArray | None) -> FloatArray:
    """Linear gains (``scale`` None), or (2^label - 1) / 2^scale[query], computed exactly:
    ldexp is exact, so each gain is the rounded value of 2^label - 1, scaled."""
    positive = np.maximum(labels, 0)
    if scale is None:
        return positive.astype(np.float64)
    exponent = scale[segment]
    # labels above the scale are only those of documents below the cutoff of
    # ideal=retrieved, which count for nothing: they are capped, not overflowed
    return np.ldexp(1.0, np.minimum(positive - exponent, 0)) - np.ldexp(1.0, -exponent)


def _segment_max(segment: IntArray, values: IntArray, size: int) -> IntArray:
    """The largest of ``values`` and 0 per segment index 0..size-1."""
    out = np.zeros(size, dtype=np.int64)
    np.maximum.at(out, segment, values)
    return out


def _retrieved_ideal_dcg(
    lists: RankedLists, gains: FloatArray, top: BoolArray | None
) -> FloatArray:
    segment = lists.segment if top is None else lists.segment[top]
    kept = gains if top is None else gains[top]
    order = np.lexsort((-kept, segment))
    sorted_gains = kept[order]
    starts = np.searchsorted(segment, np.arange(lists.size))
    position = np.arange(len(segment)) - starts[segment]
    return segment_sums(segment, sorted_gains / np.log2(position + 2.0), lists.size)
