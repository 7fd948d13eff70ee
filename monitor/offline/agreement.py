"""Several raters' labels of the same (query, document) pairs: one label per pair, and how far
the raters agree (docs/reference/cli.md, ``searchmon judgments import``).

Pure functions over plain sequences. The agreement measures treat labels as categories
(a 2 and a 3 disagree as much as a 0 and a 3); a pair counts when two raters or more rated
it.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence


def _half_up(value: float) -> int:
    return math.floor(value + 0.5)


def mean_label(ratings: Sequence[float]) -> int:
    """The mean of the ratings, rounded half up (1.5 is 2)."""
    return _half_up(sum(ratings) / len(ratings))


def median_label(ratings: Sequence[float]) -> int:
    """The median of the ratings (of an even count: the mean of the middle two), rounded
    half up."""
    return _half_up(statistics.median(ratings))


def majority_label(ratings: Sequence[float]) -> int:
    """The most frequent rating, rounded half up; a tie goes to the lowest of the tied (the
    cautious label)."""
    counts = Counter(_half_up(rating) for rating in ratings)
    most = max(counts.values())
    return min(label for label, count in counts.items() if count == most)


AGGREGATES: dict[str, Callable[[Sequence[float]], int]] = {
    "mean": mean_label, "median": median_label, "majority": majority_label,
}
"""How several raters' ratings of a pair become its label, by name."""


Units = Mapping[tuple[str, str], Mapping[str, int]]
"""Per (query, document) pair: each rater's label."""


def cohen_kappa(units: Units, first: str, second: str) -> float | None:
    """Cohen's kappa of two raters over the pairs both rated: ``(p_o - p_e) / (1 - p_e)``,
    ``p_o`` the share of those pairs they gave the same label, ``p_e`` the share expected by
    chance from each rater's own label frequencies. None when they share no pair, or when
    chance alone agrees fully (``p_e = 1``: one label everywhere)."""
    both = [(labels[first], labels[second]) for labels in units.values()
            if first in labels and second in labels]
    if not both:
        return None
    count = len(both)
    observed = sum(a == b for a, b in both) / count
    left = Counter(a for a, _ in both)
    right = Counter(b for _, b in both)
    expected = sum(left[label] * right[label] for label in left) / count**2
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def fleiss_kappa(units: Units) -> float | None:
    """Fleiss' kappa over the pairs rated by two raters or more (Fleiss 1971; with unequal
    numbers of raters per pair, each pair's agreement is over its own raters):
    ``(P - P_e) / (1 - P_e)``, ``P`` the mean over pairs of ``sum_j n_j (n_j - 1) / (n (n -
    1))`` (``n_j`` the pair's raters who gave label ``j``, ``n`` its raters), ``P_e = sum_j
    p_j^2`` with ``p_j`` the share of label ``j`` among all those ratings. None when no pair
    has two raters, or when ``P_e = 1``."""
    rated, totals = _pairable(units)
    if not rated:
        return None
    agreement = 0.0
    for counts in rated:
        raters = sum(counts.values())
        agreement += sum(n * (n - 1) for n in counts.values()) / (raters * (raters - 1))
    observed = agreement / len(rated)
    everyone = sum(totals.values())
    expected = sum((n / everyone) ** 2 for n in totals.values())
    if expected == 1:
        return None
    return (observed - expected) / (1 - expected)


def krippendorff_alpha(units: Units) -> float | None:
    """Krippendorff's alpha for nominal labels (Krippendorff 2011, "Computing Krippendorff's
    alpha-reliability"): ``1 - (n - 1) sum_{c != k} o_ck / sum_{c != k} n_c n_k``, where
    ``o_ck`` counts the ordered pairs of labels (c, k) of two raters of one pair, each pair
    weighted ``1 / (m - 1)`` for its ``m`` raters, and ``n_c`` the pairable labels c (those
    of pairs with two raters or more), ``n`` all of them. None when nothing is pairable or
    every pairable label is the same."""
    rated, totals = _pairable(units)
    if not rated:
        return None
    disagreement = 0.0
    for counts in rated:
        raters = sum(counts.values())
        same = sum(n * (n - 1) for n in counts.values())
        disagreement += (raters * (raters - 1) - same) / (raters - 1)
    everyone = sum(totals.values())
    expected = everyone**2 - sum(n * n for n in totals.values())
    if expected == 0:
        return None
    return 1 - (everyone - 1) * disagreement / expected


def _pairable(units: Units) -> tuple[list[Counter[int]], Counter[int]]:
    """The label counts of each pair two raters or more rated, and of all their labels."""
    rated = [Counter(labels.values()) for labels in units.values() if len(labels) >= 2]
    totals: Counter[int] = Counter()
    for counts in rated:
        totals.update(counts)
    return rated, totals
