"""Interpolated precision-recall curves at trec_eval's eleven recall levels (iprec_at_recall).

A query's interpolated precision at recall r is the largest precision at any rank whose
recall is at least r. trec_eval 10 turns r into a number of relevant documents,
c = lround(r * R) (R: relevant judged documents of the query; trec_eval 9 and pytrec_eval
truncate r * R + 0.9 instead, which differs for some R), and takes the largest
precision at or below the rank of the c-th relevant document retrieved; a level whose c
exceeds the relevant documents retrieved gets 0, and c = 0 (recall 0) gets the largest
precision anywhere in the ranking. A query that retrieves no relevant document scores 0 at
every level. The curve of a run is the mean over its evaluated queries, level by level.
"""

from __future__ import annotations

import numpy as np

from monitor.offline.ranking import FloatArray, IntArray, RankedLists

RECALL_LEVELS: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
"""trec_eval's iprec_at_recall levels."""


def interpolated_precision(lists: RankedLists, relevance: int = 1) -> FloatArray:
    """Per query (rows) and recall level (columns, ``RECALL_LEVELS``): the interpolated
    precision, as trec_eval's iprec_at_recall computes it (the module's docstring)."""
    hits = lists.relevant(relevance)
    found = lists.running_count(hits)
    precision = found / (lists.position + 1.0)
    best_below = _suffix_max(lists, precision)
    num_rel = lists.num_rel(relevance)
    rel_ret = lists.count(lists.segment, hits)
    levels = np.asarray(RECALL_LEVELS, dtype=np.float64)
    needed = _round_half_up(levels[None, :] * num_rel[:, None])
    needed = np.maximum(needed, 1)  # recall 0: the first relevant document's rank
    relevant_at = np.flatnonzero(hits)
    first = np.searchsorted(lists.segment[relevant_at], np.arange(lists.size))
    reached = needed <= rel_ret[:, None]
    index = np.where(reached, first[:, None] + needed - 1, 0)
    values = best_below[relevant_at[index]] if len(relevant_at) else np.zeros(index.shape)
    return np.where(reached, values, 0.0)


def mean_curve(per_query: FloatArray) -> tuple[float, ...] | None:
    """The mean over queries of each level's interpolated precision (summed in query order,
    as trec_eval does); None without queries."""
    if not len(per_query):
        return None
    totals = np.zeros(per_query.shape[1], dtype=np.float64)
    for row in per_query:
        totals += row
    return tuple(float(v) for v in totals / len(per_query))


def _round_half_up(values: FloatArray) -> IntArray:
    """C's lround of non-negative values: halves away from zero (numpy rounds them to even)."""
    whole = np.floor(values)
    return (whole + (values - whole >= 0.5)).astype(np.int64)


def _suffix_max(lists: RankedLists, values: FloatArray) -> FloatArray:
    """Per ranked document, the largest of ``values`` at its rank or below in its query.

    Values are replaced by their integer ranks so that queries can be kept apart by an
    offset and one running maximum serves them all, exactly.
    """
    if not len(values):
        return values
    distinct, ranks = np.unique(values, return_inverse=True)
    span = len(distinct)
    # backwards: later queries first, each offset above the ones after it
    backwards = ranks[::-1].astype(np.int64) + (lists.size - 1 - lists.segment[::-1]) * span
    running: IntArray = np.maximum.accumulate(backwards)
    local = running - (lists.size - 1 - lists.segment[::-1]) * span
    spread: FloatArray = distinct[local[::-1]]
    return spread
