"""Paired tests for regression detection: a randomization (sign-flip) test and a t-test.

Pure and dependency-free beyond numpy; checked against SciPy in the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
else:
    from monitor.lazy import numpy as np


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """Current minus baseline on shared queries."""

    shared: int
    delta: float
    p_permutation: float
    p_t: float


def compare(current: FloatArray, baseline: FloatArray, permutations: int, seed: int) -> (
    PairedComparison
):
    """Paired difference of means with two-sided p-values of both tests."""
    differences = np.asarray(current, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    return PairedComparison(
        shared=len(differences),
        delta=float(differences.mean()) if len(differences) else 0.0,
        p_permutation=sign_flip_p_value(differences, permutations, seed),
        p_t=paired_t_p_value(differences),
    )


def sign_flip_p_value(differences: FloatArray, permutations: int, seed: int) -> float:
    """Two-sided p of the paired randomization test: flip the sign of each difference.

    Exact (all 2^n sign vectors) when 2^n <= ``permutations``; otherwise Monte Carlo with
    ``permutations`` random sign vectors from a seeded generator, p = (hits + 1) / (R + 1).
    """
    n = len(differences)
    if n == 0:
        return 1.0
    observed = abs(float(differences.mean()))
    tolerance = 1e-12 * max(1.0, observed)
    if (1 << n) <= permutations:
        codes = np.arange(1 << n, dtype=np.int64)
        signs = 1 - 2 * ((codes[:, None] >> np.arange(n)) & 1)
        means = np.abs(signs @ differences) / n
        return float(np.count_nonzero(means >= observed - tolerance)) / float(1 << n)
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, permutations, 1024):
        rows = min(1024, permutations - start)
        signs = rng.integers(0, 2, size=(rows, n), dtype=np.int8) * 2 - 1
        means = np.abs(signs @ differences) / n
        hits += int(np.count_nonzero(means >= observed - tolerance))
    return (hits + 1) / (permutations + 1)


def paired_t_p_value(differences: FloatArray) -> float:
    """Two-sided p of the paired t-test (scipy.stats.ttest_rel); 1 with fewer than 2 pairs."""
    n = len(differences)
    if n < 2:
        return 1.0
    mean = float(differences.mean())
    sd = float(differences.std(ddof=1))
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    t = mean / (sd / math.sqrt(n))
    df = n - 1
    return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) by Lentz's continued fraction (Numerical Recipes, betacf)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, epsilon = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < epsilon:
            break
    return h
