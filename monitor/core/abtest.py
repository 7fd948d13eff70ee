"""Statistics of A/B experiments over bucketed sums: pure, numpy and the standard library only.

Each randomization unit (a user or a session) is hashed into one of B buckets per variant,
and per bucket and metric the pipeline keeps two sums, a numerator n_i and a denominator
d_i (CTR: clicked queries / queries). The state is bounded (2 x B floats per variant and
metric) whatever the number of units, and this module turns those sums into verdicts.

Ratio metrics, the delta method over buckets (Deng, Knoblich, Lu, "Applying the delta method
in metric analytics: a practical guide with novel ideas", KDD 2018). Each bucket is a
super-unit; the buckets of a variant are independent draws, since units are hashed into them
at random. With means n-bar, d-bar over the B buckets and R = sum(n) / sum(d)::

    Var(R) ~= (s2_n - 2 R s_nd + R^2 s2_d) / (B d-bar^2)
           =  B / (B - 1) * sum_i (n_i - R d_i)^2 / sum(d)^2

with sample (co)variances (ddof 1) over buckets. delta = R_T - R_C, se^2 = Var_T + Var_C;
the fixed-horizon interval is delta +- z_(1-alpha/2) se and p = 2 (1 - Phi(|delta| / se)).

What bucketing costs. The pooled ratios and delta are exact (sums lose nothing). Hashing
units into buckets at random makes ``sum_i (n_i - R d_i)^2`` an unbiased estimate of
(B - 1) / B times the unit-level ``sum_u (n_u - R d_u)^2``, so the bucket variance is, on
average over hash salts, the unit-level delta-method variance: bucketing costs the variance
estimate degrees of freedom (B - 1 instead of units - 1), not bias. With B = 128 the se
varies by about 6% (relative sd) across hash salts, and the normal reference stands for a
t with about 2 (B - 1) = 254 degrees of freedom: 5.1% of rejections at a nominal 5% for
normal data, intervals 0.5% narrower than t ones. With few units, few buckets are non-empty
and the normal reference is poor, so a comparison waits for ``MIN_BUCKETS`` non-empty
buckets per variant. Whatever must be done per unit (capping heavy users, medians, a
per-user pre-period covariate) must be done before the sums: the buckets cannot undo it.

Always-valid inference, the mixture sequential probability ratio test (Johari, Koomen,
Pekelis, Walsh, "Always valid inference: continuous monitoring of A/B tests", Operations
Research 70(3), 2022; arXiv:1512.04922), applied to the asymptotically normal delta with
V = se^2 and a normal mixing distribution N(0, tau^2) over the true difference::

    Lambda = sqrt(V / (V + tau^2)) * exp(delta^2 tau^2 / (2 V (V + tau^2)))
    p_always = min(1, 1 / Lambda)
    CS = delta +- sqrt(2 V (V + tau^2) / tau^2 * log(sqrt((V + tau^2) / V) / alpha))

Under no difference Lambda is a martingale along the looks (exactly for a normal estimate of
known variance, asymptotically with V estimated from the buckets), so by Ville's inequality
the chance that it ever reaches 1 / alpha is at most alpha, however often one looks: the
running minimum of p_always and the running intersection of the sequences (``look``) are
valid at any look. 0 lies outside the sequence exactly when p_always < alpha.

tau is the scale of differences the test is tuned for: it needs the fewest units for a true
difference of about tau, about 2.4 times the units at which a fixed-horizon test's estimate
of that difference would just reach significance. A tau 10 times too large costs 43% more
units, one 10 times too small 3 times as many. The default, ``DEFAULT_RELATIVE_TAU`` (5%) of
the pooled metric of both variants, is scale-free (the same for a CTR, a rate near 0, or
seconds) and centred on the relative changes search experiments look for (1% to 10%). The
pooled metric of both variants is, under no difference, asymptotically independent of
delta and settles within the first looks; a caller wanting the exact martingale passes a
tau fixed when the experiment starts.

Also: Holm's step-down adjustment across variants and metrics (Holm 1979), and the sample
ratio mismatch check, a chi-square goodness-of-fit test of unit counts against the
configured split, with the regularized upper incomplete gamma function (Numerical Recipes,
3rd ed., 6.2) in place of SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    Sums = Sequence[float] | FloatArray
else:
    from monitor.lazy import numpy as np

DEFAULT_RELATIVE_TAU = 0.05
"""The default mixing scale tau, as a fraction of the pooled metric of both variants."""

MIN_BUCKETS = 60
"""Non-empty buckets (denominator > 0) a variant needs before it is compared: this many, or
all its buckets if it has fewer, and 2 at least (for a variance). The statistic is referred
to the normal distribution, but its variance comes from the buckets: with K non-empty
buckets it is closer to a t with about K - 1 degrees of freedom, heavier-tailed still when
the units are few and skewed. In a slow simulated A/A ramp (bench/experiments_bench.py, 400
users per variant) a look rejects at a nominal 5% 15 to 25% of the time with fewer than 10
non-empty buckets, 10% with 10 to 19, 7 to 8% with 20 to 59, and 5 to 6% from 60 on. With
128 buckets, 60 are non-empty from about 80 units on."""


@dataclass(frozen=True)
class Buckets:
    """Per-bucket sums (length B) of one variant and one metric."""

    numerators: Sums
    denominators: Sums

    def __post_init__(self) -> None:
        if len(self.numerators) != len(self.denominators):
            raise ValueError(
                f"{len(self.numerators)} numerators for {len(self.denominators)} denominators"
            )


@dataclass(frozen=True)
class Comparison:
    """Treatment minus control on one metric at one look."""

    control: float
    """Pooled metric of the control: sum(num) / sum(den)."""
    treatment: float
    delta: float
    """treatment - control."""
    relative: float | None
    """delta / control; None when the control is 0."""
    ci95: tuple[float, float]
    """Fixed-horizon interval of delta at level 1 - alpha (95% by default)."""
    p: float
    """Fixed-horizon two-sided p-value."""
    cs95: tuple[float, float]
    """Always-valid confidence sequence of delta at this look, level 1 - alpha."""
    p_always: float
    """Always-valid p-value at this look, before any running minimum."""
    se: float
    """Standard error of delta."""
    tau: float
    """Mixing scale of the always-valid quantities, in the metric's units."""


@dataclass(frozen=True)
class Running:
    """What carries over between looks for one comparison: the running minimum of the
    always-valid p-value and the running intersection of the confidence sequence.

    ``low > high`` (an empty intersection) means the looks contradict one constant
    difference (the effect drifts); 0 was then outside some look's sequence, so ``p`` is
    below alpha too."""

    p: float
    low: float
    high: float


@dataclass(frozen=True)
class RatioEstimate:
    """Pooled ratio of one variant and the delta-method variance of it."""

    value: float
    variance: float


def ratio(buckets: Buckets, min_buckets: int = MIN_BUCKETS) -> RatioEstimate | None:
    """R = sum(n) / sum(d) and Var(R) by the delta method over buckets.

    Every bucket counts in B, empty ones included (their sums are zero draws of the same
    hash); None without a denominator or with fewer non-empty buckets than ``min_buckets``
    (or B when smaller, and 2 at least).
    """
    numerators = np.asarray(buckets.numerators, dtype=np.float64)
    denominators = np.asarray(buckets.denominators, dtype=np.float64)
    total = float(denominators.sum())
    count = len(denominators)
    needed = max(2, min(min_buckets, count))
    if total <= 0.0 or int(np.count_nonzero(denominators)) < needed:
        return None
    value = float(numerators.sum()) / total
    residuals = numerators - value * denominators
    variance = count / (count - 1) * float(residuals @ residuals) / (total * total)
    return RatioEstimate(value, variance)


def compare(
    control: Buckets,
    treatment: Buckets,
    alpha: float = 0.05,
    tau: float | None = None,
    min_buckets: int = MIN_BUCKETS,
) -> Comparison | None:
    """Treatment against control: fixed-horizon and always-valid inference on the delta.

    None when either side has no denominator or fewer than ``min_buckets`` non-empty
    buckets (see ``MIN_BUCKETS``).
    ``tau`` is in the metric's units (default: ``DEFAULT_RELATIVE_TAU`` times the pooled
    metric of both variants). With a zero standard error (every bucket of both variants at
    its variant's ratio) the intervals shrink to delta and both p-values are 1 when delta is
    0, else 0.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), not {alpha}")
    if tau is not None and not tau > 0.0:
        raise ValueError(f"tau must be positive, not {tau}")
    left, right = ratio(control, min_buckets), ratio(treatment, min_buckets)
    if left is None or right is None:
        return None
    delta = right.value - left.value
    variance = left.variance + right.variance
    se = math.sqrt(variance)
    if tau is None:
        tau = DEFAULT_RELATIVE_TAU * abs(pooled(control, treatment))
    relative = delta / left.value if left.value != 0.0 else None
    if se == 0.0:
        p = 1.0 if delta == 0.0 else 0.0
        return Comparison(left.value, right.value, delta, relative, (delta, delta), p,
                          (delta, delta), p, 0.0, tau)
    half = normal_quantile(1.0 - alpha / 2.0) * se
    p = two_sided_p(delta / se)
    return Comparison(
        control=left.value,
        treatment=right.value,
        delta=delta,
        relative=relative,
        ci95=(delta - half, delta + half),
        p=p,
        cs95=confidence_sequence(delta, variance, tau, alpha),
        p_always=always_valid_p(delta, variance, tau),
        se=se,
        tau=tau,
    )


def pooled(control: Buckets, treatment: Buckets) -> float:
    """The metric of both variants together: their summed numerators over denominators."""
    numerator = math.fsum(control.numerators) + math.fsum(treatment.numerators)
    denominator = math.fsum(control.denominators) + math.fsum(treatment.denominators)
    return numerator / denominator if denominator > 0.0 else 0.0


def mixture_log_ratio(delta: float, variance: float, tau: float) -> float:
    """log Lambda of the normal-mixture SPRT for a normal estimate ``delta`` of variance V
    against no difference: log sqrt(V / (V + tau^2)) + delta^2 tau^2 / (2 V (V + tau^2))."""
    spread = variance + tau * tau
    return 0.5 * math.log(variance / spread) + delta * delta * tau * tau / (
        2.0 * variance * spread
    )


def always_valid_p(delta: float, variance: float, tau: float) -> float:
    """min(1, 1 / Lambda); 1 when tau is 0 (a mixture of no differences weighs nothing)."""
    if tau <= 0.0:
        return 1.0
    return min(1.0, math.exp(-mixture_log_ratio(delta, variance, tau)))


def confidence_sequence(
    delta: float, variance: float, tau: float, alpha: float
) -> tuple[float, float]:
    """delta +- sqrt(2 V (V + tau^2) / tau^2 * log(sqrt((V + tau^2) / V) / alpha)): the
    differences theta whose mixture ratio (of delta - theta) stays below 1 / alpha.
    Unbounded when tau is 0."""
    if tau <= 0.0:
        return (-math.inf, math.inf)
    spread = variance + tau * tau
    half = math.sqrt(
        2.0 * variance * spread / (tau * tau)
        * (0.5 * math.log(spread / variance) - math.log(alpha))
    )
    return (delta - half, delta + half)


def look(previous: Running | None, comparison: Comparison) -> Running:
    """Fold one more look into the running always-valid quantities."""
    low, high = comparison.cs95
    if previous is None:
        return Running(comparison.p_always, low, high)
    return Running(
        min(previous.p, comparison.p_always), max(previous.low, low), min(previous.high, high)
    )


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: sorted ascending, the j-th
    (from 0) is max over i <= j of min(1, (m - i) p_(i)). Rejecting where the adjusted p is
    below alpha controls the family-wise error at alpha. On running always-valid p-values
    the control holds at every look, since each is a valid p-value at any stopping time."""
    order = sorted(range(len(pvalues)), key=lambda index: pvalues[index])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[index]))
        adjusted[index] = running
    return adjusted


def srm(observed: Sequence[int], split: Sequence[float]) -> float:
    """Sample ratio mismatch: the chi-square goodness-of-fit p-value (df = k - 1) of the
    units counted per variant against the configured split (weights, any positive scale).
    1 without units or with a single variant."""
    if len(observed) != len(split):
        raise ValueError(f"{len(observed)} counts for a split of {len(split)}")
    if any(not weight > 0.0 for weight in split):
        raise ValueError(f"split weights must be positive: {list(split)}")
    total = sum(observed)
    if total == 0 or len(observed) < 2:
        return 1.0
    weights = math.fsum(split)
    statistic = 0.0
    for count, weight in zip(observed, split, strict=True):
        expected = total * weight / weights
        statistic += (count - expected) ** 2 / expected
    return chi_square_sf(statistic, len(observed) - 1)


def two_sided_p(z: float) -> float:
    """P(|Z| >= |z|) for a standard normal Z."""
    return math.erfc(abs(z) / math.sqrt(2.0))


def normal_quantile(probability: float) -> float:
    """Phi^-1(probability) (Wichura's AS241, the standard library's ``NormalDist``)."""
    return NormalDist().inv_cdf(probability)


def chi_square_sf(statistic: float, df: int) -> float:
    """P(X >= statistic) for X chi-square with df degrees of freedom: Q(df / 2, x / 2)."""
    if statistic <= 0.0:
        return 1.0
    return regularized_upper_gamma(df / 2.0, statistic / 2.0)


def regularized_upper_gamma(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a): the series of P for x < a + 1, else the continued
    fraction of Q by Lentz's method (Numerical Recipes, gser and gcf), so tiny tails keep
    their precision."""
    if x <= 0.0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        shifted = a
        for _ in range(10_000):
            shifted += 1.0
            term *= x / shifted
            total += term
            if abs(term) < abs(total) * 1e-16:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = d if abs(d) > tiny else tiny
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        d = 1.0 / d
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return math.exp(log_front) * h
