"""Ranked, labelled result lists of many queries, flattened so that measures are vectorised.

A measure never loops over documents in Python: it combines the arrays below with numpy.
A single judged query is a batch of one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    IntArray = npt.NDArray[np.int64]
    FloatArray = npt.NDArray[np.float64]
    BoolArray = npt.NDArray[np.bool_]
else:
    from monitor.lazy import numpy as np

UNJUDGED = -1
"""Label of a ranked document without a judgment (absent from the qrels, or labelled -1)."""


Shared = TypeVar("Shared")


class DuplicateDocumentError(ValueError):
    """A ranking names the same document twice; measures would be meaningless."""


@dataclass(frozen=True, eq=False)
class RankedLists:
    """The result lists of ``size`` queries in rank order, with their judgments.

    ``labels[offsets[q]:offsets[q+1]]`` are the labels of query q's results, best rank first,
    ``UNJUDGED`` where a result has no judgment. ``judged[judged_offsets[q]:judged_offsets[q+1]]``
    are the labels (>= 0) of every judged document of query q, retrieved or not, sorted
    descending: they give R, the non-relevant count and the ideal ranking. ``in_qrels`` says
    whether each result has a qrels line at all (any label, -1 included).
    """

    labels: IntArray
    offsets: IntArray
    judged: IntArray
    judged_offsets: IntArray
    in_qrels: BoolArray
    _shared: dict[Hashable, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_lists(
        cls, rankings: Sequence[Sequence[str]], qrels: Sequence[Mapping[str, int]]
    ) -> RankedLists:
        """Build from one ranking (doc ids, best first) and one label mapping per query."""
        if len(rankings) != len(qrels):
            raise ValueError("one label mapping per ranking is needed")
        labels: list[int] = []
        offsets = [0]
        judged: list[int] = []
        judged_offsets = [0]
        in_qrels: list[bool] = []
        for ranking, query_labels in zip(rankings, qrels, strict=True):
            if len(set(ranking)) != len(ranking):
                raise DuplicateDocumentError(f"document {_first_repeat(ranking)!r} is ranked twice")
            labels.extend(max(query_labels.get(doc, UNJUDGED), UNJUDGED) for doc in ranking)
            in_qrels.extend(doc in query_labels for doc in ranking)
            offsets.append(len(labels))
            judged.extend(sorted((v for v in query_labels.values() if v >= 0), reverse=True))
            judged_offsets.append(len(judged))
        return cls(
            np.asarray(labels, dtype=np.int64),
            np.asarray(offsets, dtype=np.int64),
            np.asarray(judged, dtype=np.int64),
            np.asarray(judged_offsets, dtype=np.int64),
            np.asarray(in_qrels, dtype=np.bool_),
        )

    @property
    def size(self) -> int:
        """Number of queries."""
        return len(self.offsets) - 1

    @cached_property
    def segment(self) -> IntArray:
        """Query index of each ranked document."""
        return np.repeat(np.arange(self.size, dtype=np.int64), np.diff(self.offsets))

    @cached_property
    def position(self) -> IntArray:
        """0-based rank of each ranked document within its query."""
        return np.arange(len(self.labels), dtype=np.int64) - self.offsets[:-1][self.segment]

    @cached_property
    def judged_segment(self) -> IntArray:
        """Query index of each judged label."""
        return np.repeat(np.arange(self.size, dtype=np.int64), np.diff(self.judged_offsets))

    @cached_property
    def judged_position(self) -> IntArray:
        """Position of each judged label in its query's ideal (descending) order."""
        starts = self.judged_offsets[:-1][self.judged_segment]
        return np.arange(len(self.judged), dtype=np.int64) - starts

    @cached_property
    def max_judged(self) -> IntArray:
        """The largest judged label (>= 0) per query; 0 for a query without judgments."""
        first = np.minimum(self.judged_offsets[:-1], max(len(self.judged) - 1, 0))
        has_judged = np.diff(self.judged_offsets) > 0
        return np.where(has_judged, self.judged[first] if len(self.judged) else 0, 0)

    @cached_property
    def num_ret(self) -> IntArray:
        """Number of ranked documents per query."""
        return np.diff(self.offsets)

    def shared(self, key: Hashable, make: Callable[[], Shared]) -> Shared:
        """``make()``, worked out once for these lists and ``key``: what several measures
        (or one measure at several cutoffs or levels) compute alike. ``key`` names the
        function and every argument it depends on."""
        if key not in self._shared:
            self._shared[key] = make()
        value: Shared = self._shared[key]
        return value

    @cached_property
    def log2_ranks(self) -> FloatArray:
        """log2(rank + 1) for each 1-based rank of the longest ranking or ideal ranking
        (``log2_ranks[position]``: the discount of DCG)."""
        longest = max(int(self.num_ret.max(initial=0)),
                      int(np.diff(self.judged_offsets).max(initial=0)))
        return np.log2(np.arange(longest, dtype=np.float64) + 2.0)

    def first_rows(self, cutoff: int | None) -> IntArray | None:
        """The ranked documents in each query's top ``cutoff``, in order; None when that is
        every one of them."""
        return _first_rows(self.offsets, cutoff)

    def first_judged_rows(self, cutoff: int | None) -> IntArray | None:
        """The judged labels among the first ``cutoff`` of each query's ideal order; None
        when that is every one of them."""
        return _first_rows(self.judged_offsets, cutoff)

    def relevant(self, rel: int) -> BoolArray:
        """Whether each ranked document is relevant (judged with a label >= rel)."""
        return self.shared(("relevant", rel), lambda: self.labels >= rel)

    def num_rel(self, rel: int) -> IntArray:
        """R: judged documents with a label >= rel, per query."""
        return self.shared(
            ("num_rel", rel), lambda: self.count(self.judged_segment, self.judged >= rel)
        )

    def num_nonrel(self, rel: int) -> IntArray:
        """Judged documents with a label below rel, per query."""
        return self.count(self.judged_segment, self.judged < rel)

    def within(self, cutoff: int | None) -> BoolArray | None:
        """Mask of ranked documents in the top ``cutoff`` (None: no cutoff)."""
        return None if cutoff is None else self.position < cutoff

    def count(self, segment: IntArray, mask: BoolArray | None) -> IntArray:
        """Per-query number of True entries of ``mask`` over ``segment``."""
        if mask is None:
            return np.bincount(segment, minlength=self.size).astype(np.int64)
        return np.bincount(segment[mask], minlength=self.size).astype(np.int64)

    def count_ranked(self, mask: BoolArray, cutoff: int | None) -> IntArray:
        """Per-query number of ranked documents in the top ``cutoff`` where ``mask`` holds."""
        top = self.within(cutoff)
        return self.count(self.segment, mask if top is None else mask & top)

    def relevant_in_top(self, rel: int, cutoff: int | IntArray | None) -> IntArray:
        """Per query, the relevant documents (label >= rel) among its first ``cutoff``
        ranked ones: one cutoff for every query, one per query, or None for all of them.

        Read off a running count of relevant documents made once per rel, so that every
        cutoff of every measure costs two lookups per query.
        """
        running = self.shared(
            ("running relevant", rel), lambda: np.cumsum(self.relevant(rel), dtype=np.int64)
        )
        starts = self.offsets[:-1]
        ends = self.offsets[1:] if cutoff is None else starts + np.minimum(cutoff, self.num_ret)
        return _count_before(running, ends) - _count_before(running, starts)

    def sum_ranked(self, values: FloatArray, mask: BoolArray | None) -> FloatArray:
        """Per-query sum of ``values`` over ranked documents where ``mask`` holds."""
        if mask is None:
            return segment_sums(self.segment, values, self.size)
        return segment_sums(self.segment[mask], values[mask], self.size)

    def running_count(self, mask: BoolArray) -> IntArray:
        """Per-query inclusive running count of ``mask`` down each ranking."""
        total = np.cumsum(mask, dtype=np.int64)
        starts = self.offsets[:-1]
        before = np.where(starts > 0, total[np.maximum(starts - 1, 0)], 0) if len(total) else starts
        total -= before[self.segment]
        return total

    def rank_among(self, at: IntArray) -> IntArray:
        """For ranked documents ``at`` (indices, ascending), each one's 1-based rank among
        those of ``at`` in its query."""
        segment = self.segment[at]
        first = np.searchsorted(segment, np.arange(self.size))
        return np.arange(1, len(at) + 1) - first[segment]

    def first_position(self, mask: BoolArray) -> IntArray:
        """0-based rank of the first document where ``mask`` holds, -1 where none does."""
        hits = np.flatnonzero(mask)
        first = np.full(self.size, -1, dtype=np.int64)
        if len(hits):
            seg = self.segment[hits]
            lead = np.concatenate(([True], seg[1:] != seg[:-1]))
            first[seg[lead]] = self.position[hits[lead]]
        return first


def _first_rows(offsets: IntArray, cutoff: int | None) -> IntArray | None:
    """The entries of each segment (``offsets``) below position ``cutoff``, in order; None
    when no segment is longer."""
    lengths = np.diff(offsets)
    if cutoff is None or cutoff >= int(lengths.max(initial=0)):
        return None
    kept = np.minimum(lengths, cutoff)
    # the i-th row out is row i of the output's segment, shifted to where that segment starts
    shifts = offsets[:-1] - (np.cumsum(kept) - kept)
    return np.repeat(shifts, kept) + np.arange(int(kept.sum()), dtype=np.int64)


def _count_before(running: IntArray, index: IntArray) -> IntArray:
    """The running count just before each ``index`` (0 at the start)."""
    if not len(running):
        return np.zeros(len(index), dtype=np.int64)
    return np.where(index > 0, running[np.maximum(index - 1, 0)], 0)


def _first_repeat(ranking: Sequence[str]) -> str:
    seen: set[str] = set()
    for doc in ranking:
        if doc in seen:
            return doc
        seen.add(doc)
    raise ValueError("no document is repeated")


def segment_sums(segment: IntArray, values: FloatArray, size: int) -> FloatArray:
    """Sum of ``values`` per segment index 0..size-1."""
    return np.bincount(segment, weights=values, minlength=size).astype(np.float64, copy=False)


def safe_divide(numerator: npt.ArrayLike, denominator: npt.ArrayLike) -> FloatArray:
    """numerator / denominator, 0 where the denominator is 0 (trec_eval's convention)."""
    num = np.asarray(numerator, dtype=np.float64)
    den = np.asarray(denominator, dtype=np.float64)
    out = np.zeros(np.broadcast(num, den).shape, dtype=np.float64)
    np.divide(num, den, out=out, where=den != 0)
    return out
