"""The statistics of A/B experiments (monitor/core/abtest.py) against independent
computations: NumPy formulas, SciPy and statsmodels on the same data at unit and query
level, and small simulated experiments with fixed seeds (the larger runs are in
bench/experiments_bench.py).

Tolerances: where both sides compute the same quantity by different routes, relative 1e-9
or tighter (rounding only). Where they estimate the same quantity from different data (the
buckets against the units), the bound is about 3 standard deviations of the difference,
derived in the test. Rates over simulated streams have binomial bands.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import integrate, optimize, special, stats
from statsmodels.api import OLS, add_constant
from statsmodels.stats import proportion
from statsmodels.stats.multitest import multipletests

from monitor.core import abtest
from monitor.core.abtest import Buckets, Comparison, Running, compare, holm, look, srm
from tests.support.experiments import (
    TRUE_CTR,
    FloatArray,
    IntArray,
    bucket_sums,
    sessions,
    stream,
    user_totals,
)

B = 128


def users_of(seed: int, count: int, lift: float = 0.0) -> tuple[FloatArray, FloatArray]:
    """Clicked queries and queries per user of one variant."""
    return user_totals(sessions(np.random.default_rng(seed), count, 60, lift))


def hashed(seed: int, count: int, buckets: int = B) -> IntArray:
    return np.random.default_rng(seed).integers(0, buckets, size=count)


def ab_buckets(seed: int, count: int, lift: float) -> tuple[Buckets, Buckets, list[tuple[
        FloatArray, FloatArray, IntArray]]]:
    """Bucketed CTR of a control and a treatment, and their users (clicks, queries,
    bucket)."""
    units = []
    for offset, variant_lift in enumerate((0.0, lift)):
        clicks, queries = users_of(seed + offset, count, variant_lift)
        units.append((clicks, queries, hashed(seed + 10 + offset, count)))
    control, treatment = (bucket_sums(c, q, b, B) for c, q, b in units)
    return control, treatment, units


def given_comparison(
    control: Buckets, treatment: Buckets, alpha: float = 0.05, tau: float | None = None,
    min_buckets: int = abtest.MIN_BUCKETS,
) -> Comparison:
    comparison = compare(control, treatment, alpha, tau, min_buckets)
    assert comparison is not None
    return comparison


# The delta method over buckets.


def test_the_variance_is_the_delta_method_formula_of_deng_et_al_over_buckets() -> None:
    """Var(R) = (s2_n - 2 R s_nd + R^2 s2_d) / (B d-bar^2) with np.cov (ddof 1), against
    the module's residual form: the same number, rounding apart."""
    control, treatment, _ = ab_buckets(1, 3000, 0.05)
    expected = []
    for side in (control, treatment):
        n, d = np.asarray(side.numerators), np.asarray(side.denominators)
        r = n.sum() / d.sum()
        (s_nn, s_nd), (_, s_dd) = np.cov(n, d, ddof=1)
        expected.append((s_nn - 2 * r * s_nd + r * r * s_dd) / (len(n) * d.mean() ** 2))
    comparison = given_comparison(control, treatment)
    assert comparison.se == pytest.approx(math.sqrt(sum(expected)), rel=1e-12)
    assert comparison.control == pytest.approx(
        sum(control.numerators) / sum(control.denominators), rel=1e-14
    )
    assert comparison.delta == pytest.approx(comparison.treatment - comparison.control,
                                             rel=1e-14)


def test_interval_and_p_equal_a_query_level_regression_with_errors_clustered_by_bucket() -> None:
    """statsmodels OLS of click (0/1 per query) on a treatment indicator, one cluster per
    (variant, bucket), sandwich variance without small-sample factor: its coefficient is
    the difference of pooled CTRs and its variance that of the delta method over buckets
    without B / (B - 1). Relative 1e-9."""
    control, treatment, units = ab_buckets(2, 2500, 0.05)
    clicked, treated, cluster = [], [], []
    for variant, (clicks, queries, bucket) in enumerate(units):
        for c, q, b in zip(clicks.astype(int), queries.astype(int), bucket, strict=True):
            clicked += [1.0] * c + [0.0] * (q - c)
            treated += [float(variant)] * q
            cluster += [variant * B + int(b)] * q
    fit = OLS(np.array(clicked), add_constant(np.array(treated))).fit(
        cov_type="cluster",
        cov_kwds={"groups": np.array(cluster), "use_correction": False,
                  "df_correction": False},
        use_t=False,
    )
    widen = math.sqrt(B / (B - 1))
    comparison = given_comparison(control, treatment)
    assert comparison.delta == pytest.approx(fit.params[1], rel=1e-9)
    assert comparison.se == pytest.approx(fit.bse[1] * widen, rel=1e-9)
    z = fit.params[1] / (fit.bse[1] * widen)
    assert comparison.p == pytest.approx(2 * stats.norm.sf(abs(z)), rel=1e-9)
    half = stats.norm.ppf(0.975) * fit.bse[1] * widen
    assert comparison.ci95 == pytest.approx((fit.params[1] - half, fit.params[1] + half),
                                            rel=1e-9)


def test_bucketing_is_unbiased_for_the_user_level_delta_method_variance() -> None:
    """Over random hash salts, E[sum_i (n_i - R d_i)^2] = (B - 1) / B sum_u (n_u - R d_u)^2,
    so the bucket variance averages to the user-level linearized variance of the ratio
    estimator, sum_u (n_u - R d_u)^2 / sum(d)^2 (computed here from the users, with NumPy).
    One salt's estimate has about 127 degrees of freedom (relative sd ~ 0.13); the mean of
    300 salts is within 0.04 of 1 (> 3 sd)."""
    clicks, queries = users_of(3, 4000)
    r = clicks.sum() / queries.sum()
    user_level = float(np.sum((clicks - r * queries) ** 2) / queries.sum() ** 2)
    ratios = []
    for salt in range(300):
        estimate = abtest.ratio(bucket_sums(clicks, queries, hashed(1000 + salt, 4000), B))
        assert estimate is not None
        assert estimate.value == pytest.approx(r, rel=1e-12)  # bucketing loses nothing here
        ratios.append(estimate.variance / user_level)
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.04)
    assert 0.06 < np.std(ratios) < 0.25  # the precision bucketing costs: ~sqrt(2 / 127)


def test_one_session_per_bucket_is_the_wald_interval_of_two_proportions() -> None:
    """Sessions as units, one outcome each (abandoned or not), each session its own bucket:
    statsmodels' Wald difference of proportions, whose variance is p (1 - p) / N per
    variant, against ours, p (1 - p) / (N - 1) (the B / (B - 1) of the bucket variance,
    B = N). With that factor, relative 1e-10."""
    rng = np.random.default_rng(4)
    count = 600
    control_outcomes = (rng.random(count) < 0.30).astype(float)
    treatment_outcomes = (rng.random(count) < 0.36).astype(float)
    comparison = given_comparison(
        Buckets(control_outcomes.tolist(), [1.0] * count),
        Buckets(treatment_outcomes.tolist(), [1.0] * count),
    )
    args = (treatment_outcomes.sum(), count, control_outcomes.sum(), count)
    low, high = proportion.confint_proportions_2indep(*args, method="wald", compare="diff")
    test = proportion.test_proportions_2indep(*args, method="wald", compare="diff")
    widen = math.sqrt(count / (count - 1))
    middle = (low + high) / 2
    assert comparison.delta == pytest.approx(middle, rel=1e-10)
    assert comparison.ci95 == pytest.approx(
        (middle - (middle - low) * widen, middle + (high - middle) * widen), rel=1e-10
    )
    assert comparison.delta / comparison.se == pytest.approx(test.statistic / widen, rel=1e-10)
    assert comparison.p == pytest.approx(2 * stats.norm.sf(abs(test.statistic) / widen),
                                         rel=1e-10)


def test_128_buckets_of_sessions_agree_with_the_wald_interval_within_sampling_error() -> None:
    """20,000 sessions per variant in 128 buckets: the bucket se estimates the Wald se with
    about 2 x 127 degrees of freedom (relative sd ~ 1 / sqrt(2 x 254) ~ 4.4%), so within
    15% of it (3.4 sd); the point estimates are identical."""
    rng = np.random.default_rng(5)
    count = 20_000
    sides, counts = [], []
    for rate in (0.30, 0.31):
        outcomes = (rng.random(count) < rate).astype(float)
        sides.append(bucket_sums(outcomes, np.ones(count), rng.integers(0, B, count), B))
        counts.append(outcomes.sum())
    comparison = given_comparison(sides[0], sides[1])
    low, high = proportion.confint_proportions_2indep(counts[1], count, counts[0], count,
                                                      method="wald", compare="diff")
    wald_se = (high - low) / 2 / stats.norm.ppf(0.975)
    assert comparison.delta == pytest.approx((low + high) / 2, rel=1e-10)
    assert comparison.se == pytest.approx(wald_se, rel=0.15)


# Always-valid inference.


def mixture_ratio(theta: float, delta: float, variance: float, tau: float) -> float:
    """Lambda at the difference theta, by quadrature: the likelihood of delta under the
    differences theta + s, s ~ N(0, tau^2), over its likelihood under theta alone; the
    ratio of the two normal densities is exp((2 (delta - theta) s - s^2) / (2 V))."""
    gap = delta - theta

    def integrand(shift: float) -> float:
        return math.exp((2 * gap * shift - shift * shift) / (2 * variance)) * float(
            stats.norm.pdf(shift, 0.0, tau)
        )

    centre = gap * tau * tau / (variance + tau * tau)
    spread = 12 * math.sqrt(variance * tau * tau / (variance + tau * tau))
    mixed, _ = integrate.quad(integrand, centre - spread, centre + spread, epsabs=0,
                              epsrel=1e-12, limit=200)
    return float(mixed)


@pytest.mark.parametrize(("delta", "se", "tau"), [
    (0.0, 0.01, 0.01), (0.02, 0.01, 0.01), (-0.035, 0.01, 0.005), (0.004, 0.002, 0.02),
    (0.5, 0.3, 0.1), (1e-4, 3e-5, 2e-5),
])
def test_the_always_valid_p_and_sequence_are_the_normal_mixture_sprt(
    delta: float, se: float, tau: float
) -> None:
    """p_always = 1 / Lambda(0) against a quadrature of the mixture likelihood ratio, and
    the confidence sequence's ends against the roots of Lambda(theta) = 1 / alpha (brentq):
    relative 1e-8."""
    variance = se * se
    assert abtest.always_valid_p(delta, variance, tau) == pytest.approx(
        min(1.0, 1 / mixture_ratio(0.0, delta, variance, tau)), rel=1e-8
    )
    alpha = 0.05
    low, high = abtest.confidence_sequence(delta, variance, tau, alpha)
    width = high - delta
    for end, start in ((low, delta - 2 * width), (high, delta + 2 * width)):
        root = optimize.brentq(lambda theta: mixture_ratio(theta, delta, variance, tau)
                               - 1 / alpha, delta, start, xtol=1e-15, rtol=1e-13)
        assert end == pytest.approx(root, rel=1e-8)


def test_compare_takes_tau_as_given_else_five_percent_of_the_pooled_metric() -> None:
    control = Buckets([1.0, 2.0, 1.0, 3.0], [10.0, 10.0, 10.0, 10.0])
    treatment = Buckets([2.0, 2.0, 3.0, 1.0], [10.0, 10.0, 12.0, 8.0])
    default = given_comparison(control, treatment, min_buckets=2)
    assert default.tau == pytest.approx(0.05 * 15 / 80, rel=1e-14)
    assert default.p_always == pytest.approx(
        abtest.always_valid_p(default.delta, default.se**2, 0.05 * 15 / 80), rel=1e-14
    )
    chosen = given_comparison(control, treatment, tau=0.01, min_buckets=2)
    assert chosen.tau == 0.01
    assert chosen.cs95 == abtest.confidence_sequence(chosen.delta, chosen.se**2, 0.01, 0.05)


def test_look_keeps_the_running_minimum_and_intersection() -> None:
    def at(p_always: float, low: float, high: float) -> Comparison:
        return Comparison(0.1, 0.1, 0.0, 0.0, (low, high), 0.5, (low, high), p_always, 0.01,
                          0.005)

    first = look(None, at(0.4, -0.03, 0.02))
    assert first == Running(0.4, -0.03, 0.02)
    second = look(first, at(0.6, -0.02, 0.03))
    assert second == Running(0.4, -0.02, 0.02)
    third = look(second, at(0.01, 0.021, 0.05))
    assert third == Running(0.01, 0.021, 0.02)  # empty: low > high, and p below alpha


# Holm and SRM.


@pytest.mark.parametrize("pvalues", [
    [], [0.03], [0.01, 0.04, 0.03, 0.005], [0.5, 0.5, 0.5], [0.02, 0.02, 0.9, 1e-8, 0.04],
    [1.0, 0.0, 0.2], [0.011, 0.012, 0.013, 0.014, 0.015, 0.016, 0.3],
])
def test_holm_equals_statsmodels(pvalues: list[float]) -> None:
    expected = multipletests(pvalues, method="holm")[1].tolist() if pvalues else []
    assert holm(pvalues) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.slow
def test_holm_equals_statsmodels_on_random_pvalues() -> None:
    """30 seeded vectors, with ties (values rounded to 2 digits). Few: statsmodels'
    multipletests runs gc.collect() at every call (40 ms here)."""
    rng = np.random.default_rng(7)
    for _ in range(30):
        pvalues = np.round(rng.random(int(rng.integers(1, 25))) ** 3, 2).tolist()
        expected = multipletests(pvalues, method="holm")[1].tolist()
        assert holm(pvalues) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), max_size=30), st.sampled_from([0.001, 0.01, 0.05, 0.2]))
def test_holm_rejects_as_the_step_down_procedure(pvalues: list[float], alpha: float) -> None:
    """Holm's definition: sorted ascending, reject the j-th (from 0) while every p up to
    it is at most alpha / (m - j); an adjusted p at most alpha exactly then (away from the
    boundaries, where (m - j) p and alpha may round apart)."""
    assume(all(abs(p * k - alpha) > 1e-12 for p in pvalues for k in range(1, len(pvalues) + 1)))
    adjusted = holm(pvalues)
    ordered = sorted(pvalues)
    rejected = 0
    while rejected < len(ordered) and ordered[rejected] <= alpha / (len(ordered) - rejected):
        rejected += 1
    assert sorted(p for p, q in zip(pvalues, adjusted, strict=True) if q <= alpha) == \
        ordered[:rejected]
    assert all(p <= q <= 1.0 for p, q in zip(pvalues, adjusted, strict=True))


@pytest.mark.parametrize(("observed", "split"), [
    ([50_000, 50_000], [0.5, 0.5]), ([52_000, 48_000], [0.5, 0.5]),
    ([50_210, 49_790], [1, 1]), ([33, 30, 41], [1, 1, 1]), ([9_000, 1_100], [0.9, 0.1]),
    ([2_400, 2_610, 4_990], [0.25, 0.25, 0.5]), ([1, 0], [0.5, 0.5]),
    ([10, 20, 30, 40, 50, 60, 70, 80], [1] * 8),
])
def test_srm_equals_scipy_chisquare(observed: list[int], split: list[float]) -> None:
    expected_counts = np.array(split) / sum(split) * sum(observed)
    expected = stats.chisquare(observed, expected_counts).pvalue
    assert srm(observed, split) == pytest.approx(expected, rel=1e-10, abs=1e-300)


def test_srm_flags_52_48_of_100_000_users() -> None:
    assert srm([52_000, 48_000], [0.5, 0.5]) < 0.001


def test_srm_p_values_of_a_fair_split_are_uniform() -> None:
    """300 fair 50/50 splits of 100,000 users: Kolmogorov-Smirnov against uniform, p > 0.01
    (the chi-square of one df is continuous enough at this size)."""
    rng = np.random.default_rng(6)
    values = [srm([int(n), 100_000 - int(n)], [0.5, 0.5])
              for n in rng.binomial(100_000, 0.5, size=300)]
    assert stats.kstest(values, "uniform").pvalue > 0.01


def test_srm_without_units_or_with_one_variant_is_one() -> None:
    assert srm([0, 0], [0.5, 0.5]) == 1.0
    assert srm([100], [1.0]) == 1.0
    with pytest.raises(ValueError, match="counts"):
        srm([1, 2], [1.0])
    with pytest.raises(ValueError, match="positive"):
        srm([1, 2], [1.0, 0.0])


# Helpers against SciPy.


@pytest.mark.parametrize("x", [-8.0, -3.0, -1.0, 0.0, 0.5, 1.96, 3.0, 8.0, 20.0, 37.0])
def test_two_sided_p_equals_scipy(x: float) -> None:
    assert abtest.two_sided_p(x) == pytest.approx(2 * stats.norm.sf(abs(x)), rel=1e-13)


@pytest.mark.parametrize("q", [1e-12, 0.001, 0.025, 0.3, 0.5, 0.8, 0.975, 0.9995])
def test_normal_quantile_equals_scipy(q: float) -> None:
    assert abtest.normal_quantile(q) == pytest.approx(stats.norm.ppf(q), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("a", [0.5, 1.0, 1.5, 3.5, 10.0, 60.0])
@pytest.mark.parametrize("x", [1e-6, 0.1, 0.9, 2.0, 7.0, 30.0, 100.0, 400.0])
def test_regularized_upper_gamma_equals_scipy(a: float, x: float) -> None:
    assert abtest.regularized_upper_gamma(a, x) == pytest.approx(
        special.gammaincc(a, x), rel=1e-12, abs=1e-300
    )


# Edge cases: one row each.


def test_no_comparison_without_a_denominator_or_with_too_few_buckets() -> None:
    """60 non-empty buckets (MIN_BUCKETS), or all of them when a variant has fewer."""
    assert abtest.MIN_BUCKETS == 60
    full = Buckets([1.0, 2.0] * 64, [4.0, 5.0] * 64)
    assert compare(Buckets([0.0] * 128, [0.0] * 128), full) is None
    assert compare(full, Buckets([0.0] * 128, [0.0] * 128)) is None
    few = Buckets([1.0] * 59 + [0.0] * 69, [3.0] * 59 + [0.0] * 69)
    assert compare(few, full) is None
    assert compare(few, full, min_buckets=59) is not None
    enough = Buckets([1.0] * 60 + [0.0] * 68, [3.0] * 60 + [0.0] * 68)
    assert compare(enough, full) is not None
    small = Buckets([1.0, 2.0] * 20, [4.0, 5.0] * 20)
    assert compare(small, full) is not None  # all of its 40 buckets
    assert compare(Buckets([1.0] * 39 + [0.0], [3.0] * 39 + [0.0]), full) is None
    single = Buckets([1.0, 0.0, 0.0], [5.0, 0.0, 0.0])
    assert compare(single, full, min_buckets=1) is None  # one bucket has no variance


def test_a_zero_control_has_no_relative_change() -> None:
    comparison = given_comparison(Buckets([0.0, 0.0, 0.0], [3.0, 4.0, 5.0]),
                                  Buckets([1.0, 0.0, 2.0], [3.0, 4.0, 5.0]), min_buckets=2)
    assert comparison.relative is None
    assert comparison.delta == pytest.approx(0.25)


def test_zero_variance_gives_point_intervals() -> None:
    same = given_comparison(Buckets([0.0, 0.0], [3.0, 4.0]), Buckets([0.0, 0.0], [5.0, 6.0]),
                            min_buckets=2)
    assert (same.delta, same.se, same.p, same.p_always, same.ci95, same.cs95) == (
        0.0, 0.0, 1.0, 1.0, (0.0, 0.0), (0.0, 0.0)
    )
    apart = given_comparison(Buckets([1.0, 2.0], [10.0, 20.0]),
                             Buckets([2.0, 4.0], [10.0, 20.0]), min_buckets=2)
    assert (apart.p, apart.p_always, apart.cs95) == (0.0, 0.0, (0.1, 0.1))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="numerators"):
        Buckets([1.0, 2.0], [1.0])
    many = Buckets([1.0, 2.0] * 20, [4.0, 5.0] * 20)
    with pytest.raises(ValueError, match="alpha"):
        compare(many, many, alpha=1.0)
    with pytest.raises(ValueError, match="tau"):
        compare(many, many, tau=0.0)


bucket_values = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 100)), min_size=3, max_size=40
).map(lambda pairs: Buckets([float(min(n, d)) for n, d in pairs], [float(d) for _, d in pairs]))


@settings(max_examples=200, deadline=None)
@given(bucket_values, bucket_values, st.floats(0.001, 0.4))
def test_the_sequence_holds_the_interval_and_excludes_0_exactly_when_p_always_is_below_alpha(
    control: Buckets, treatment: Buckets, alpha: float
) -> None:
    """For alpha <= 0.4, z_(1-alpha/2)^2 <= 2 log(1 / alpha) (Mills' ratio), so the
    confidence sequence is at least as wide as the fixed-horizon interval; likewise
    1 / Lambda >= exp(-z^2 / 2) >= the two-sided p."""
    comparison = compare(control, treatment, alpha=alpha, min_buckets=2)
    if comparison is None or comparison.se == 0.0:
        return
    (low, high), (cs_low, cs_high) = comparison.ci95, comparison.cs95
    slack = 1e-12 * (1 + abs(comparison.delta))
    assert cs_low <= low + slack and high <= cs_high + slack
    assert comparison.p_always >= comparison.p * (1 - 1e-12)
    if abs(comparison.p_always - alpha) > 1e-9:
        assert (comparison.p_always < alpha) == (not cs_low <= 0.0 <= cs_high)


# Simulated experiments: 128 buckets per variant, CTR of users who come back, watched after
# every minute for 60 minutes (tests/support/experiments.py).

STREAMS = 200
USERS = 2000


def band(rate: float, count: int, sds: float = 3.0) -> tuple[float, float]:
    spread = sds * math.sqrt(rate * (1 - rate) / count)
    return rate - spread, rate + spread


def test_aa_streams_the_always_valid_verdict_stays_within_alpha_the_naive_one_does_not() -> (
    None
):
    """200 A/A streams, 60 looks: the running always-valid p ever below 5% in at most 8% of
    them (5% + 3 binomial sd); the naive test repeated at every look at least 15% (it is
    about 35% in the bench); the fixed-horizon test at the last look within 3 binomial sd of
    5%."""
    runs = [stream(seed, USERS, 60, B) for seed in range(STREAMS)]
    always = np.mean([run.always_ever for run in runs])
    naive = np.mean([run.naive_ever for run in runs])
    final = np.mean([run.final.p < 0.05 for run in runs])
    assert always <= 0.08
    assert naive >= 0.15
    assert naive > always + 0.1
    low, high = band(0.05, STREAMS)
    assert low <= final <= high


def test_ab_streams_the_intervals_cover_the_true_lift() -> None:
    """200 A/B streams with a 5% relative CTR lift (true difference 0.05 x E[p]): the 95%
    interval at the last look covers it in 95% of them within 3 binomial sd, and every
    look's confidence sequence covers it in at least 92% (95% less 3 sd)."""
    truth = TRUE_CTR * 0.05
    runs = [stream(1000 + seed, USERS, 60, B, lift=0.05) for seed in range(STREAMS)]
    coverage = np.mean([run.final.ci95[0] <= truth <= run.final.ci95[1] for run in runs])
    low, high = band(0.95, STREAMS)
    assert low <= coverage <= high
    assert np.mean([run.sequence_covers for run in runs]) >= band(0.95, STREAMS)[0]
    assert np.mean([run.final.delta for run in runs]) == pytest.approx(truth, rel=0.2)
