"""Evaluation of a TREC run against qrels, with trec_eval's query-set rules.

Queries are those in both files (trec_eval), or with ``complete`` every query of the qrels,
a query missing from the run scoring as an empty ranking (trec_eval -c). Results are ranked
by score descending, ties broken by document id descending (trec_eval); the rank column is
ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monitor.offline.measures import aggregate, score
from monitor.offline.ranking import UNJUDGED, FloatArray, IntArray, RankedLists
from monitor.offline.spec import MeasureSpec
from monitor.offline.trec import Qrels, Run


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Per-query values (NaN where skipped) and summaries of each measure."""

    query_ids: list[str]
    values: dict[MeasureSpec, FloatArray]
    summary: dict[MeasureSpec, float | None]


def rank_run(qrels: Qrels, run: Run, *, complete: bool = False) -> tuple[list[str], RankedLists]:
    """The evaluated query ids (sorted) and their ranked, labelled lists."""
    run_to_qrels = run.qids.codes_in(qrels.qids)
    in_run = np.zeros(len(qrels.qids.vocab), dtype=np.bool_)
    in_run[run_to_qrels[run_to_qrels >= 0]] = True
    evaluated = np.arange(len(in_run)) if complete else np.flatnonzero(in_run)
    # query index (into the evaluated, sorted ids) of each qrels and run row; -1: not evaluated
    slot = np.full(len(qrels.qids.vocab), -1, dtype=np.int64)
    slot[evaluated] = np.arange(len(evaluated))
    judged_query = slot[qrels.qids.codes]
    run_slot = np.where(run_to_qrels >= 0, slot[np.maximum(run_to_qrels, 0)], -1)
    query = run_slot[run.qids.codes]

    labels = _labels_of_run(qrels, run)
    order = _rank_order(query, run)
    counts = np.bincount(query[order], minlength=len(evaluated))

    usable = np.flatnonzero((judged_query >= 0) & (qrels.labels >= 0))
    judged_order = usable[np.lexsort((-qrels.labels[usable], judged_query[usable]))]
    judged_counts = np.bincount(judged_query[judged_order], minlength=len(evaluated))

    lists = RankedLists(
        np.maximum(labels[order], UNJUDGED),
        _offsets(counts),
        qrels.labels[judged_order],
        _offsets(judged_counts),
    )
    names = qrels.qids.vocab[evaluated]
    return [q.decode("utf-8", "replace") for q in names.tolist()], lists


def _rank_order(query: IntArray, run: Run) -> IntArray:
    """Rows of evaluated queries by query, score descending, document id descending.

    Run files usually list each query's documents together and best first; a stable sort by
    query then keeps that order, and a check of neighbours spares the full three-key sort.
    """
    keep = np.flatnonzero(query >= 0)
    by_query = keep[np.argsort(query[keep], kind="stable")]
    q, scores, docs = query[by_query], run.scores[by_query], run.docs.codes[by_query]
    same = q[1:] == q[:-1]
    if bool((scores[1:] > scores[:-1])[same].any()):
        return keep[np.lexsort((-run.docs.codes[keep], -run.scores[keep], query[keep]))]
    # scores already descending: order only the members of each group of tied scores
    tied = same & (scores[1:] == scores[:-1])
    if not tied.any():
        return by_query
    member = np.zeros(len(by_query), dtype=np.bool_)
    member[:-1] |= tied
    member[1:] |= tied
    group = np.cumsum(np.concatenate(([True], ~tied)))
    members = np.flatnonzero(member)
    by_query[members] = by_query[members[np.lexsort((-docs[members], group[members]))]]
    return by_query


def _labels_of_run(qrels: Qrels, run: Run) -> IntArray:
    """The qrels label of each run row, UNJUDGED when the pair is not judged.

    Judged pairs are keyed in the run's vocabularies (the qrels' vocabulary is usually the
    smaller one to look up), then each run row is found among the sorted keys.
    """
    doc_count = max(len(run.docs.vocab), 1)
    query = qrels.qids.codes_in(run.qids)[qrels.qids.codes]
    doc = qrels.docs.codes_in(run.docs)[qrels.docs.codes]
    retrieved = np.flatnonzero((query >= 0) & (doc >= 0))
    judged_keys = query[retrieved] * doc_count + doc[retrieved]
    by_key = np.argsort(judged_keys)
    sorted_keys = judged_keys[by_key]
    if not len(sorted_keys):
        return np.full(len(run.docs), UNJUDGED, dtype=np.int64)
    keys = run.qids.codes * doc_count + run.docs.codes
    where = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    found = sorted_keys[where] == keys
    return np.where(found, qrels.labels[retrieved[by_key[where]]], UNJUDGED).astype(np.int64)


def evaluate(
    qrels: Qrels, run: Run, specs: Sequence[MeasureSpec], *, complete: bool = False
) -> Evaluation:
    """Score every spec on every evaluated query and summarise each."""
    query_ids, lists = rank_run(qrels, run, complete=complete)
    values = {spec: score(lists, spec) for spec in specs}
    return Evaluation(query_ids, values, {s: aggregate(s, v) for s, v in values.items()})


def _offsets(counts: IntArray) -> IntArray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
