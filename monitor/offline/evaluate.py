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
    judgments: dict[bytes, dict[bytes, int]] = {}
    for qid, doc, label in zip(qrels.qids, qrels.docs, qrels.labels, strict=True):
        judgments.setdefault(qid, {})[doc] = label

    run_codes: dict[bytes, int] = {}
    codes = np.fromiter(
        (run_codes.setdefault(q, len(run_codes)) for q in run.qids), np.int64, len(run.qids)
    )
    evaluated = sorted(judgments if complete else (q for q in run_codes if q in judgments))
    index = {q: i for i, q in enumerate(evaluated)}
    remap = np.array([index.get(q, -1) for q in run_codes], dtype=np.int64)
    query = remap[codes] if len(codes) else codes
    empty: dict[bytes, int] = {}
    labels = np.fromiter(
        (judgments.get(q, empty).get(d, UNJUDGED) for q, d in zip(run.qids, run.docs, strict=True)),
        np.int64,
        len(run.qids),
    )

    keep = np.flatnonzero(query >= 0)
    order = keep[np.lexsort((-run.scores[keep], query[keep]))]
    order = _break_ties_by_docno(order, query, run)
    counts = np.bincount(query[order], minlength=len(evaluated))

    judged_query = np.fromiter((index.get(q, -1) for q in qrels.qids), np.int64, len(qrels.qids))
    judged_labels = np.asarray(qrels.labels, dtype=np.int64)
    usable = np.flatnonzero((judged_query >= 0) & (judged_labels >= 0))
    judged_order = usable[np.lexsort((-judged_labels[usable], judged_query[usable]))]
    judged_counts = np.bincount(judged_query[judged_order], minlength=len(evaluated))

    lists = RankedLists(
        np.maximum(labels[order], UNJUDGED),
        _offsets(counts),
        judged_labels[judged_order],
        _offsets(judged_counts),
    )
    return [q.decode("utf-8", "replace") for q in evaluated], lists


def evaluate(
    qrels: Qrels, run: Run, specs: Sequence[MeasureSpec], *, complete: bool = False
) -> Evaluation:
    """Score every spec on every evaluated query and summarise each."""
    query_ids, lists = rank_run(qrels, run, complete=complete)
    values = {spec: score(lists, spec) for spec in specs}
    return Evaluation(query_ids, values, {s: aggregate(s, v) for s, v in values.items()})


def _offsets(counts: IntArray) -> IntArray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


def _break_ties_by_docno(order: IntArray, query: IntArray, run: Run) -> IntArray:
    """Within runs of equal (query, score), order documents by id descending (strcmp)."""
    scores = run.scores[order]
    queries = query[order]
    tied = (scores[1:] == scores[:-1]) & (queries[1:] == queries[:-1])
    if not tied.any():
        return order
    order = order.copy()
    edges = np.diff(np.concatenate(([0], tied.astype(np.int8), [0])))
    for start, stop in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        group = order[start : stop + 1]
        order[start : stop + 1] = sorted(group, key=lambda i: run.docs[i], reverse=True)
    return order
