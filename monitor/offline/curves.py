"""Interpolated precision at recall levels: trec_eval's iprec_at_recall, 11pt_avg and the
precision-recall curves of ``eval --plot`` and the judged samples.

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

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
else:
    from monitor.lazy import numpy as np

from monitor.offline.ranking import RankedLists
from monitor.offline.spec import RECALL_LEVELS

if TYPE_CHECKING:
    from monitor.offline.ranking import FloatArray, IntArray


def interpolated_precision(
    lists: RankedLists, relevance: int = 1, levels: Sequence[float] = RECALL_LEVELS,
) -> FloatArray:
    """Per query (rows) and recall level (columns, ``levels``): the interpolated precision,
    as trec_eval's iprec_at_recall computes it (the module's docstring)."""
    best_below, first, found = lists.shared(
        ("interpolated", relevance), lambda: _best_precision_below(lists, relevance)
    )
    wanted = np.asarray(levels, dtype=np.float64)[None, :] * lists.num_rel(relevance)[:, None]
    needed = np.maximum(_round_half_up(wanted), 1)  # recall 0: the first relevant document
    reached = needed <= found[:, None]
    index = np.where(reached, first[:, None] + needed - 1, 0)
    values = best_below[index] if len(best_below) else np.zeros(index.shape)
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


def _best_precision_below(lists: RankedLists, rel: int) -> tuple[FloatArray, IntArray, IntArray]:
    """For each relevant document retrieved (in rank order), the best precision at its rank
    or below it; the index of each query's first one; their number per query. Every recall
    level of every iprec_at_recall and 11pt_avg reads them."""
    at = np.flatnonzero(lists.relevant(rel))
    segment = lists.segment[at]
    precision = lists.rank_among(at) / (lists.position[at] + 1.0)
    best_below = _segment_suffix_max(segment, precision, lists.size)
    first = np.searchsorted(segment, np.arange(lists.size))
    found = np.bincount(segment, minlength=lists.size)
    return best_below, first, found


def _round_half_up(values: FloatArray) -> IntArray:
    """C's lround of non-negative values: halves away from zero (numpy rounds them to even)."""
    whole = np.floor(values)
    return (whole + (values - whole >= 0.5)).astype(np.int64)


def _segment_suffix_max(segment: IntArray, values: FloatArray, size: int) -> FloatArray:
    """For each entry, the largest of ``values`` from it to the end of its segment (segments
    ascending). Exact: the running maximum is taken over the values' ranks, which are
    integers, so segments can be kept apart by an offset."""
    if not len(values):
        return values
    distinct, rank = np.unique(values, return_inverse=True)
    width = len(distinct)
    key = (size - 1 - segment[::-1]) * width + rank[::-1]
    running = np.maximum.accumulate(key)
    spread: FloatArray = distinct[(running - (size - 1 - segment[::-1]) * width)][::-1]
    return spread
