"""Evaluation of a TREC run against qrels, with trec_eval's query-set rules.

Queries are those in both files (trec_eval), or with ``complete`` every query of the qrels,
a query missing from the run scoring as an empty ranking (trec_eval -c). Results are ranked
by score descending, ties broken by document id descending (trec_eval); the rank column is
ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from monitor.offline.measures import aggregate, relstring, score, shown
from monitor.offline.ranking import UNJUDGED, RankedLists
from monitor.offline.spec import MeasureSpec
from monitor.offline.trec import Qrels, Run, byte_order, pair_keys

if TYPE_CHECKING:
    from monitor.offline.ranking import FloatArray, IntArray


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Per-query values (NaN where skipped) and summaries of each measure.

    ``shared_queries`` counts the queries found in both files (with -c, ``query_ids`` also
    holds the queries of the qrels that the run lacks).
    """

    query_ids: list[str]
    values: dict[MeasureSpec, FloatArray]
    summary: dict[MeasureSpec, float | None]
    shared_queries: int
    run_id: str = ""
    texts: dict[MeasureSpec, list[str]] = field(default_factory=dict)
    """Per-query text of the measures that print one (relstring)."""


@dataclass(frozen=True, slots=True)
class RankedRun:
    """A run ranked against qrels: the evaluated query ids (sorted), how many queries both
    files have, the queries' ranked, labelled lists and the run's tag."""

    query_ids: list[str]
    shared_queries: int
    lists: RankedLists
    run_id: str
    relevant_lines: int | None = None
    """With ``complete`` (``-c``): the qrels lines labelled above 0, whatever the relevance
    level: trec_eval's num_rel summary then (``te_calc_avg_num_rel``)."""


def rank_run(
    qrels: Qrels, run: Run, *, complete: bool = False, max_docs: int | None = None
) -> RankedRun:
    """``run`` ranked against ``qrels``; ``max_docs``: only the top that many documents of
    each ranking count (trec_eval ``-M``), the rest is discarded."""
    query_ids, shared, lists = _rank(qrels, run, complete, max_docs)
    relevant = int(np.count_nonzero(qrels.labels > 0)) if complete else None
    return RankedRun(query_ids, shared, lists, run.run_id, relevant)


def evaluate_ranked(ranked: RankedRun, specs: Sequence[MeasureSpec]) -> Evaluation:
    """Score every spec on every evaluated query of ``ranked`` and summarise each."""
    lists = ranked.lists
    values = {spec: score(lists, spec) for spec in specs}
    summary = {s: aggregate(s, v) for s, v in values.items()}
    if ranked.relevant_lines is not None:  # -c: num_rel sums the qrels as trec_eval does
        summary.update((s, float(ranked.relevant_lines)) for s in specs if s.name == "num_rel")
    texts = {spec: relstring(lists, spec) for spec in specs if shown(spec) == "text"}
    return Evaluation(ranked.query_ids, values, summary, ranked.shared_queries, ranked.run_id,
                      texts)


def evaluate(
    qrels: Qrels, run: Run, specs: Sequence[MeasureSpec], *, complete: bool = False,
    max_docs: int | None = None,
) -> Evaluation:
    """``evaluate_ranked`` of ``rank_run`` (``max_docs``: as ``rank_run``'s)."""
    return evaluate_ranked(rank_run(qrels, run, complete=complete, max_docs=max_docs), specs)


def _rank(
    qrels: Qrels, run: Run, complete: bool, max_docs: int | None = None
) -> tuple[list[str], int, RankedLists]:
    run_to_qrels = run.qids.codes_in(qrels.qids)
    in_run = np.zeros(len(qrels.qids.vocab), dtype=np.bool_)
    in_run[run_to_qrels[run_to_qrels >= 0]] = True
    evaluated = np.arange(len(in_run)) if complete else np.flatnonzero(in_run)
    # query index (into the evaluated, sorted ids) of each qrels and run row; -1: not evaluated
    slot = np.full(len(qrels.qids.vocab) + 1, -1, dtype=np.int64)
    slot[evaluated] = np.arange(len(evaluated))
    judged_query = slot[qrels.qids.codes]
    query = slot[run_to_qrels][run.qids.codes]  # run_to_qrels -1 picks the last slot, -1

    order = _rank_order(query, run)
    ranked_query = query[order]
    if max_docs is not None and len(order):
        # rank within its query (the rows are grouped by query): the top max_docs stay
        starts = np.flatnonzero(np.concatenate(([True], ranked_query[1:] != ranked_query[:-1])))
        first = np.repeat(starts, np.diff(np.append(starts, len(order))))
        keep = np.arange(len(order)) - first < max_docs
        order, ranked_query = order[keep], ranked_query[keep]
    counts = np.bincount(ranked_query, minlength=len(evaluated))
    judgment = _judgments(qrels, run, order)
    # the judgment -1 (none) picks the label appended last
    labels = np.append(np.maximum(qrels.labels, UNJUDGED), UNJUDGED)[judgment]
    judged, judged_counts = _judged_labels(judged_query, qrels.labels, len(evaluated))

    lists = RankedLists(labels, _offsets(counts), judged, _offsets(judged_counts), judgment >= 0)
    names = qrels.qids.vocab[evaluated]
    # bytes that are no UTF-8 kept apart, and printed back as they were
    query_ids = [q.decode("utf-8", "surrogateescape") for q in names.tolist()]
    return query_ids, int(in_run.sum()), lists


def _rank_order(query: IntArray, run: Run) -> IntArray:
    """Rows of evaluated queries by query, score descending, document id descending.

    Run files usually list each query's documents together and best first; grouping by query
    keeps that order, and a check of neighbours spares sorting by score.
    """
    keep = np.flatnonzero(query >= 0)
    by_query = keep[_stable_order(query[keep])]
    q, scores = query[by_query], run.scores[by_query]
    same = q[1:] == q[:-1]
    if bool((scores[1:] > scores[:-1])[same].any()):
        by_score = keep[np.argsort(-run.scores[keep])]
        by_query = by_score[_stable_order(query[by_score])]
        q, scores = query[by_query], run.scores[by_query]
        same = q[1:] == q[:-1]
    # scores descending: order only the members of each group of tied scores
    tied = same & (scores[1:] == scores[:-1])
    if not tied.any():
        return by_query
    member = np.zeros(len(by_query), dtype=np.bool_)
    member[:-1] |= tied
    member[1:] |= tied
    group = np.cumsum(np.concatenate(([True], ~tied)))
    members = np.flatnonzero(member)
    doc_rank = np.empty(len(members), dtype=np.int64)
    doc_rank[byte_order(run.docs.values[by_query[members]])] = np.arange(len(members))
    by_query[members] = by_query[members[np.lexsort((-doc_rank, group[members]))]]
    return by_query


def _stable_order(keys: IntArray) -> IntArray:
    """The stable argsort of non-negative ``keys``.

    Files list a query's lines together: when each key makes one run of equal neighbours,
    the runs are ordered and moved whole. Otherwise, one sort of keys packed with positions.
    """
    if not len(keys):
        return np.zeros(0, dtype=np.int64)
    head = np.empty(len(keys), dtype=np.bool_)
    head[0] = True
    np.not_equal(keys[1:], keys[:-1], out=head[1:])
    starts = np.flatnonzero(head)
    by_run = np.argsort(keys[starts], kind="stable")
    ordered = keys[starts[by_run]]
    if bool((ordered[1:] != ordered[:-1]).all()):
        lengths = np.diff(starts, append=len(keys))[by_run]
        # the i-th row out is row i of the output's run, shifted to where that run starts
        shifts = starts[by_run] - (np.cumsum(lengths) - lengths)
        return np.repeat(shifts, lengths) + np.arange(len(keys), dtype=np.int64)
    shift = len(keys).bit_length()
    if int(keys.max()).bit_length() + shift > 63:
        return np.argsort(keys, kind="stable").astype(np.int64)
    packed = (keys << shift) | np.arange(len(keys), dtype=np.int64)
    packed.sort()
    return packed & ((1 << shift) - 1)


def _judgments(qrels: Qrels, run: Run, order: IntArray) -> IntArray:
    """The qrels row that judges each run row of ``order``, -1 where none does.

    Each judgment's key (its query's code in the run and a hash of the document id) is
    looked up among the run's sorted keys (``Run.sorted_pairs``, which the parse's check for
    repeated pairs made). The judgments' keys are sorted first: a search for ascending keys
    reads memory nearly in order, and costs less than the sort. The ids of each match are
    then compared; should two ids of a query ever share their hash, the exact match by
    sorted vocabularies decides.
    """
    judgment = np.full(len(run), -1, dtype=np.int64)
    if not len(order) or not len(qrels):
        return judgment[order]
    keys, lines = run.sorted_pairs
    query = qrels.qids.codes_in(run.qids)[qrels.qids.codes]  # -1: not a query of the run
    rows = np.flatnonzero(query >= 0)
    needles = pair_keys(query[rows], qrels.docs, len(run.qids.vocab), rows)
    by_needle = np.argsort(needles)
    needles = needles[by_needle]
    where = np.minimum(np.searchsorted(keys, needles), len(keys) - 1)
    found = np.flatnonzero(keys[where] == needles)
    judged, judging = lines[where[found]], rows[by_needle[found]]
    judgment[judged] = judging
    if bool((qrels.docs.values[judging] == run.docs.values[judged]).all()):
        return judgment[order]
    return _judgments_by_vocabulary(qrels, run)[order]


def _judgments_by_vocabulary(qrels: Qrels, run: Run) -> IntArray:
    """The qrels row that judges each run row (in file order), -1 where none does, without
    hashing: judged pairs are keyed by the run's vocabulary codes (the qrels' vocabulary is
    usually the smaller one to look up), then each run row is found among the sorted keys."""
    doc_count = max(len(run.docs.vocab), 1)
    query = qrels.qids.codes_in(run.qids)[qrels.qids.codes]
    doc = qrels.docs.codes_in(run.docs)[qrels.docs.codes]
    retrieved = np.flatnonzero((query >= 0) & (doc >= 0))
    judged_keys = query[retrieved] * doc_count + doc[retrieved]
    by_key = np.argsort(judged_keys)
    sorted_keys = judged_keys[by_key]
    if not len(sorted_keys):
        return np.full(len(run), -1, dtype=np.int64)
    keys = run.qids.codes * doc_count + run.docs.codes
    where = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    found = sorted_keys[where] == keys
    return np.where(found, retrieved[by_key[where]], -1).astype(np.int64)


def _judged_labels(
    judged_query: IntArray, labels: IntArray, size: int
) -> tuple[IntArray, IntArray]:
    """The labels >= 0 of each evaluated query's judgments, by query then label descending,
    and their number per query."""
    usable = np.flatnonzero((judged_query >= 0) & (labels >= 0))
    query, kept = judged_query[usable], labels[usable]
    counts = np.bincount(query, minlength=size).astype(np.int64)
    top = int(kept.max()) if len(kept) else 0
    shift = top.bit_length()
    if shift + size.bit_length() > 63:  # labels too large to pack: sort by two keys
        return kept[np.lexsort((-kept, query))], counts
    # query and (top - label) packed in one integer: a single sort orders both
    packed = (query << shift) | (top - kept)
    if (size << shift) <= 4 * len(packed) + 1024:  # few labels: count each pair instead
        pairs = np.arange(size << shift, dtype=np.int64)
        packed = np.repeat(pairs, np.bincount(packed, minlength=len(pairs)))
    else:
        packed.sort()
    return top - (packed & ((1 << shift) - 1)), counts


def _offsets(counts: IntArray) -> IntArray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
