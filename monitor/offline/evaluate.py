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
    keep = np.flatnonzero(query >= 0)
    # score descending, then document id descending (trec_eval's strcmp order)
    order = keep[np.lexsort((-run.docs.codes[keep], -run.scores[keep], query[keep]))]
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


def _labels_of_run(qrels: Qrels, run: Run) -> IntArray:
    """The qrels label of each run row, UNJUDGED when the pair is not judged."""
    doc_count = max(len(qrels.docs.vocab), 1)
    judged_keys = qrels.qids.codes * doc_count + qrels.docs.codes
    by_key = np.argsort(judged_keys)
    sorted_keys = judged_keys[by_key]
    query = run.qids.codes_in(qrels.qids)[run.qids.codes]
    doc = run.docs.codes_in(qrels.docs)[run.docs.codes]
    keys = query * doc_count + doc
    found = (query >= 0) & (doc >= 0)
    where = np.minimum(np.searchsorted(sorted_keys, keys), max(len(sorted_keys) - 1, 0))
    if not len(sorted_keys):
        return np.full(len(keys), UNJUDGED, dtype=np.int64)
    found &= sorted_keys[where] == keys
    return np.where(found, qrels.labels[by_key[where]], UNJUDGED).astype(np.int64)


def evaluate(
    qrels: Qrels, run: Run, specs: Sequence[MeasureSpec], *, complete: bool = False
) -> Evaluation:
    """Score every spec on every evaluated query and summarise each."""
    query_ids, lists = rank_run(qrels, run, complete=complete)
    values = {spec: score(lists, spec) for spec in specs}
    return Evaluation(query_ids, values, {s: aggregate(s, v) for s, v in values.items()})


def _offsets(counts: IntArray) -> IntArray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
