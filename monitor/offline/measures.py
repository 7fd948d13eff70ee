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

import numpy as np

from monitor.offline.ranking import (
    BoolArray,
    FloatArray,
    IntArray,
    RankedLists,
    safe_divide,
    segment_sums,
)
from monitor.offline.spec import MeasureSpec

GEOMETRIC_FLOOR = 1e-5
"""trec_eval's MIN_GEO_MEAN: per-query values below it are raised to it before GMAP's log."""


def precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """P@k = |relevant in top k| / k.

    Fewer than k retrieved still divides by k (trec_eval P_k).
    """
    k = _cutoff(spec)
    return lists.count_ranked(lists.relevant(spec.relevance), k) / k


def recall(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """R@k = |relevant in top k| / R; 0 when R = 0 (trec_eval recall_k)."""
    rel = spec.relevance
    return safe_divide(lists.count_ranked(lists.relevant(rel), spec.cutoff), lists.num_rel(rel))


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
    top = lists.within(spec.cutoff)
    scale = None
    if spec.gain == "exp" and spec.ideal == "judged":
        scale = lists.max_judged
    elif spec.gain == "exp":
        kept = lists.labels if top is None else np.where(top, lists.labels, 0)
        scale = _segment_max(lists.segment, kept, lists.size)
    gains = _gain(lists.labels, lists.segment, scale)
    dcg = lists.sum_ranked(gains / np.log2(lists.position + 2.0), top)
    if spec.ideal == "retrieved":
        ideal = _retrieved_ideal_dcg(lists, gains, top)
    else:
        ideal_gains = _gain(lists.judged, lists.judged_segment, scale)
        if spec.cutoff is not None:
            keep = lists.judged_position < spec.cutoff
            ideal_gains = np.where(keep, ideal_gains, 0.0)
        discounted = ideal_gains / np.log2(lists.judged_position + 2.0)
        ideal = segment_sums(lists.judged_segment, discounted, lists.size)
    return safe_divide(dcg, ideal)


def r_precision(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Rprec = |relevant in top R| / R; 0 when R = 0."""
    num_rel = lists.num_rel(spec.relevance)
    top_r = lists.position < num_rel[lists.segment]
    return safe_divide(lists.count_ranked(lists.relevant(spec.relevance) & top_r, None), num_rel)


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
    found = lists.count_ranked(lists.relevant(spec.relevance), spec.cutoff)
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


@dataclass(frozen=True, slots=True)
class Measure:
    """A registered measure: its per-query function and how its values aggregate."""

    per_query: Callable[[RankedLists, MeasureSpec], FloatArray]
    aggregate: Callable[[FloatArray], float | None]


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
    "GMAP": Measure(average_precision, geometric_mean),
}


def score(lists: RankedLists, spec: MeasureSpec) -> FloatArray:
    """Per-query values of ``spec``; NaN for queries it skips (``no_rel=skip`` and R = 0)."""
    values = MEASURES[spec.name].per_query(lists, spec)
    if spec.no_rel == "skip":
        values = np.where(lists.num_rel(spec.relevance) == 0, np.nan, values)
    return values


def aggregate(spec: MeasureSpec, values: FloatArray) -> float | None:
    """The measure's summary over queries (mean, or geometric mean for GMAP)."""
    return MEASURES[spec.name].aggregate(values)


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
