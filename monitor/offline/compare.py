"""Two runs' evaluations side by side: each measure over the queries both runs have, and
the printed comparison of ``searchmon eval QRELS RUN_A RUN_B``.

The paired tests themselves are the judged samples' (``monitor.core.stats``); this module
pairs the values they test and prints what they found.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from monitor.offline.evaluate import Evaluation
from monitor.offline.measures import GEOMETRIC_FLOOR, aggregate, geometric
from monitor.offline.spec import MeasureSpec

if TYPE_CHECKING:
    from monitor.offline.ranking import FloatArray

Named = tuple[str, MeasureSpec]


@dataclass(frozen=True, slots=True)
class PairedMeasure:
    """One measure's values of both runs on the queries where both have one.

    ``tested_a`` and ``tested_b`` are what a paired test compares: the values themselves,
    or for a geometric mean (GMAP, gm_bpref) their logarithms (the summary is the
    exponential of their mean), so that the test asks whether the summary moved.
    """

    name: str
    spec: MeasureSpec
    query_ids: list[str]
    a: FloatArray
    b: FloatArray
    mean_a: float | None
    mean_b: float | None

    @property
    def tested_a(self) -> FloatArray:
        return _tested(self.spec, self.a)

    @property
    def tested_b(self) -> FloatArray:
        return _tested(self.spec, self.b)


@dataclass(frozen=True, slots=True)
class MeasureComparison:
    """A printed row: the means of A and B, B - A, and the two-sided p-values of the paired
    randomization test and t-test, over ``queries`` queries."""

    name: str
    queries: int
    mean_a: float | None
    mean_b: float | None
    p_randomization: float
    p_t: float

    @property
    def difference(self) -> float | None:
        if self.mean_a is None or self.mean_b is None:
            return None
        return self.mean_b - self.mean_a


def shared_queries(a: Evaluation, b: Evaluation) -> list[str]:
    """The query ids both evaluations have, in evaluation order."""
    in_b = set(b.query_ids)
    return [qid for qid in a.query_ids if qid in in_b]


def pair(a: Evaluation, b: Evaluation, measures: Sequence[Named]) -> list[PairedMeasure]:
    """Each measure's values of A and B on the shared queries where neither skipped it
    (``no_rel=skip``), and each run's summary over exactly those queries."""
    shared = shared_queries(a, b)
    row_a = {qid: i for i, qid in enumerate(a.query_ids)}
    row_b = {qid: i for i, qid in enumerate(b.query_ids)}
    index_a = np.asarray([row_a[q] for q in shared], dtype=np.int64)
    index_b = np.asarray([row_b[q] for q in shared], dtype=np.int64)
    paired = []
    for name, spec in measures:
        values_a, values_b = a.values[spec][index_a], b.values[spec][index_b]
        both = ~(np.isnan(values_a) | np.isnan(values_b))
        kept_a, kept_b = values_a[both], values_b[both]
        paired.append(PairedMeasure(
            name, spec, [q for q, keep in zip(shared, both.tolist(), strict=True) if keep],
            kept_a, kept_b, aggregate(spec, kept_a), aggregate(spec, kept_b),
        ))
    return paired


def format_comparison_text(
    names: tuple[str, str], counts: tuple[int, int, int], rows: Sequence[MeasureComparison]
) -> str:
    """The text of a comparison: which run is A and which B, the queries, then one
    tab-separated line per measure (``docs/reference/cli.md`` describes it)."""
    (name_a, name_b), (queries_a, queries_b, shared) = names, counts
    lines = [
        f"A\t{name_a}\t{queries_a} queries",
        f"B\t{name_b}\t{queries_b} queries",
        f"shared\t{shared} queries in both runs",
        f"{'measure':<22}\tmean_A\tmean_B\tB-A\tp_rand\tp_t\tqueries",
    ]
    for row in rows:
        difference = row.difference
        lines.append("\t".join((
            f"{row.name:<22}", _number(row.mean_a), _number(row.mean_b),
            "-" if difference is None else f"{difference:+.4f}",
            f"{row.p_randomization:.4f}", f"{row.p_t:.4f}", str(row.queries),
        )))
    return "\n".join(lines) + "\n"


def format_comparison_json(
    names: tuple[str, str], counts: tuple[int, int, int], rows: Sequence[MeasureComparison]
) -> str:
    """``{"A": {"run", "queries"}, "B": {...}, "shared": N, "measures": {NAME: {"mean_A",
    "mean_B", "difference", "p_randomization", "p_t", "queries"}}}``; null for no value."""
    (name_a, name_b), (queries_a, queries_b, shared) = names, counts
    out = {
        "A": {"run": name_a, "queries": queries_a},
        "B": {"run": name_b, "queries": queries_b},
        "shared": shared,
        "measures": {row.name: {
            "mean_A": row.mean_a, "mean_B": row.mean_b, "difference": row.difference,
            "p_randomization": row.p_randomization, "p_t": row.p_t, "queries": row.queries,
        } for row in rows},
    }
    return json.dumps(out, indent=2) + "\n"


def _number(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.4f}"


def _tested(spec: MeasureSpec, values: FloatArray) -> FloatArray:
    if geometric(spec):
        logs: FloatArray = np.log(np.maximum(values, GEOMETRIC_FLOOR))
        return logs
    return values
