"""The evaluation's shortcuts give what the plain computations give: ordering whole query
groups, counting judged labels instead of sorting them, reading relevant documents in the
top k off a running count, taking only the first k rows of each query."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from monitor.offline.evaluate import _judged_labels, _stable_order
from monitor.offline.ranking import RankedLists

if TYPE_CHECKING:
    from monitor.offline.ranking import IntArray


def grouped(rng: np.random.Generator, groups: int) -> IntArray:
    """Keys as files list queries: each key's lines together, the keys in no order."""
    keys = rng.permutation(groups)
    return np.repeat(keys, rng.integers(0, 6, size=groups)).astype(np.int64)


@pytest.mark.parametrize("layout", ["grouped", "scattered"])
def test_stable_order_is_the_stable_argsort(layout: str) -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        groups = int(rng.integers(1, 8))
        if layout == "grouped":
            keys = grouped(rng, groups)
        else:
            keys = rng.integers(0, groups, size=int(rng.integers(0, 30))).astype(np.int64)
        assert _stable_order(keys).tolist() == np.argsort(keys, kind="stable").tolist(), keys


@pytest.mark.parametrize("top", [3, 2**40])  # few labels are counted, large ones sorted
def test_judged_labels_come_by_query_then_label_descending(top: int) -> None:
    rng = np.random.default_rng(2)
    for _ in range(100):
        rows = int(rng.integers(0, 40))
        size = int(rng.integers(1, 6))
        query = rng.integers(-1, size, size=rows).astype(np.int64)  # -1: not evaluated
        labels = rng.choice(np.array([-1, 0, 1, top]), size=rows).astype(np.int64)
        got, counts = _judged_labels(query, labels, size)
        usable = (query >= 0) & (labels >= 0)
        expected = labels[usable][np.lexsort((-labels[usable], query[usable]))]
        assert got.tolist() == expected.tolist()
        assert counts.tolist() == np.bincount(query[usable], minlength=size).tolist()


def random_lists(rng: np.random.Generator) -> RankedLists:
    size = int(rng.integers(1, 6))
    num_ret = rng.integers(0, 8, size=size)  # some queries retrieve nothing
    num_judged = rng.integers(0, 8, size=size)
    labels = rng.integers(-1, 3, size=int(num_ret.sum())).astype(np.int64)
    judged = np.concatenate(
        [np.sort(rng.integers(0, 3, size=n))[::-1] for n in num_judged] + [np.zeros(0)]
    ).astype(np.int64)
    return RankedLists(
        labels, np.concatenate(([0], np.cumsum(num_ret))).astype(np.int64),
        judged, np.concatenate(([0], np.cumsum(num_judged))).astype(np.int64), labels >= 0,
    )


def test_relevant_in_top_counts_what_a_mask_counts() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        lists = random_lists(rng)
        rel = int(rng.integers(1, 3))
        relevant = lists.labels >= rel
        per_query = rng.integers(0, 9, size=lists.size).astype(np.int64)
        for cutoff in (None, 1, 3, 100, per_query):
            if cutoff is None:
                top = np.ones(len(lists.labels), dtype=np.bool_)
            else:
                top = lists.position < np.broadcast_to(cutoff, (lists.size,))[lists.segment]
            expected = np.bincount(lists.segment[relevant & top], minlength=lists.size)
            assert lists.relevant_in_top(rel, cutoff).tolist() == expected.tolist()


def test_first_rows_are_the_rows_above_the_cutoff() -> None:
    rng = np.random.default_rng(4)
    for _ in range(200):
        lists = random_lists(rng)
        for cutoff in (1, 2, 5, 100):
            rows = lists.first_rows(cutoff)
            expected = np.flatnonzero(lists.position < cutoff)
            if rows is None:  # no ranking is longer than the cutoff
                assert len(expected) == len(lists.labels)
            else:
                assert rows.tolist() == expected.tolist()
            judged_rows = lists.first_judged_rows(cutoff)
            judged_expected = np.flatnonzero(lists.judged_position < cutoff)
            if judged_rows is None:
                assert len(judged_expected) == len(lists.judged)
            else:
                assert judged_rows.tolist() == judged_expected.tolist()
