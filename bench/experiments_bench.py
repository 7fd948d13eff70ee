"""Benchmark: the statistics of A/B experiments (monitor/core/abtest.py) on simulated traffic.

Users of tests/support/experiments.py (returning users, heavy-tailed query counts, a CTR per
user), hashed into ``--buckets`` buckets per variant, watched after every simulated minute
for ``--minutes`` minutes. Prints:

1. A/A at the last look: the fixed-horizon false positive rate at alpha 5%, with the
   binomial 95% band of a true 5% rate over as many seeds; the rate at every look.
2. A/A watched at every look: how often the running always-valid p ever went below 5%,
   against the naive fixed-horizon test repeated at every look.
3. A/B with true CTR lifts: power of the fixed-horizon test at the last look, detection by
   the always-valid verdict (and when), coverage of the true lift by the 95% interval and by
   every look's confidence sequence.
4. The mixing scale tau: the units the always-valid test needs to cross its boundary,
   relative to a fixed-horizon test's estimate just reaching significance, by tau / true
   difference (analytic); simulated detection of one lift with tau fixed at fractions of
   the true CTR.
5. Why a comparison waits for ``MIN_BUCKETS`` non-empty buckets: the per-look false positive
   rate of a slow A/A ramp by the number of non-empty buckets.
6. What bucketing costs: the bucket variance against the user-level delta-method variance
   over hash salts, and the t quantile the normal one stands for.
7. Sample ratio mismatch: 52/48 of 100,000 users, and the p-values of fair 50/50 splits.

Run: ``PYTHONPATH=$PWD python bench/experiments_bench.py`` (two to three minutes with the
defaults).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import optimize, stats

from monitor.core import abtest
from monitor.core.abtest import Buckets, compare, srm
from tests.support.experiments import (
    TRUE_CTR,
    Stream,
    bucket_sums,
    cumulative_buckets,
    sessions,
    stream,
    user_totals,
)

ALPHA = 0.05


def rate(flags: list[bool]) -> str:
    """A rate with its Clopper-Pearson 95% interval."""
    hits, count = int(sum(flags)), len(flags)
    interval = stats.binomtest(hits, count).proportion_ci(0.95)
    return f"{hits / count:6.1%} ({hits}/{count}, 95% CI {interval.low:.1%}-{interval.high:.1%})"


def expected_band(probability: float, count: int) -> str:
    low = stats.binom.ppf(0.025, count, probability) / count
    high = stats.binom.ppf(0.975, count, probability) / count
    return f"{low:.1%}-{high:.1%}"


def streams(args: argparse.Namespace, lift: float, seeds: int, first_seed: int,
            tau: float | None = None) -> list[Stream]:
    return [stream(first_seed + seed, args.users, args.minutes, args.buckets, lift, ALPHA, tau)
            for seed in range(seeds)]


def null_streams(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    runs = streams(args, 0.0, args.seeds, 0)
    print(f"\n1-2. A/A: {args.seeds} seeds, {args.users:,} users per variant, "
          f"{args.buckets} buckets, {args.minutes} looks ({time.perf_counter() - started:.0f} s)")
    final = [run.final.p < ALPHA for run in runs]
    print(f"  fixed-horizon false positives at the last look: {rate(final)}; "
          f"a true 5% gives {expected_band(ALPHA, args.seeds)} (binomial 95%)")
    always = [run.always_ever for run in runs]
    naive = [run.naive_ever for run in runs]
    print(f"  ever 'different' in {args.minutes} looks, always-valid (running p): {rate(always)}")
    print(f"  ever 'different' in {args.minutes} looks, naive repeated fixed-horizon: "
          f"{rate(naive)}")
    print(f"  naive / always-valid: {np.mean(naive) / max(np.mean(always), 1e-9):.1f}x")
    print(f"  the 95% confidence sequence held 0 at every look in "
          f"{rate([run.sequence_covers for run in runs])}")


def lifted_streams(args: argparse.Namespace) -> None:
    print(f"\n3. A/B: true CTR lift, {args.seeds} seeds, {args.users:,} users per variant, "
          f"control CTR {TRUE_CTR:.4f}")
    for lift in (0.02, 0.05):
        truth = TRUE_CTR * lift
        runs = streams(args, lift, args.seeds, 100_000)
        minutes = [run.always_minute for run in runs if run.always_minute is not None]
        print(f"  lift {lift:.0%} (delta {truth:.5f}):")
        power = rate([r.final.p < ALPHA for r in runs])
        print(f"    fixed-horizon power at the last look: {power}")
        print(f"    always-valid detection by the last look: "
              f"{rate([r.always_ever for r in runs])}, median first look "
              f"{np.median(minutes) + 1 if minutes else float('nan'):.0f} of {args.minutes}")
        print(f"    95% interval covers the true lift: "
              f"{rate([r.final.ci95[0] <= truth <= r.final.ci95[1] for r in runs])}")
        print(f"    every look's 95% confidence sequence covers it: "
              f"{rate([r.sequence_covers for r in runs])}")
        print(f"    mean estimate {np.mean([r.final.delta for r in runs]):.5f}, mean se "
              f"{np.mean([r.final.se for r in runs]):.5f}, sd of estimates "
              f"{np.std([r.final.delta for r in runs]):.5f}")


def units_to_cross(ratio: float) -> float:
    """(delta / se)^2 at which the mixture boundary is crossed when the estimate equals the
    true difference delta, with tau = ratio x delta: u = f(u ratio^2)."""
    def excess(u: float) -> float:
        rho = u * ratio * ratio
        return u - (1 + 1 / rho) * (2 * math.log(1 / ALPHA) + math.log(1 + rho))
    return float(optimize.brentq(excess, 1e-9, 1e9))


def mixing_scale(args: argparse.Namespace) -> None:
    fixed = stats.norm.ppf(1 - ALPHA / 2) ** 2
    print("\n4. tau: units to cross the always-valid boundary when the estimate equals the "
          "true difference delta,\n   relative to a fixed-horizon test's estimate just "
          "reaching p = 5% (analytic)")
    for ratio in (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0):
        print(f"    tau / delta = {ratio:>4}: {units_to_cross(ratio) / fixed:.2f}x")
    print("   the default tau (5% of the metric) against relative differences of 0.5% to 20%:")
    for relative in (0.005, 0.01, 0.02, 0.05, 0.1, 0.2):
        ratio = abtest.DEFAULT_RELATIVE_TAU / relative
        print(f"    {relative:>5.1%}: {units_to_cross(ratio) / fixed:.2f}x "
              f"(best tau: {units_to_cross(1.0) / fixed:.2f}x)")
    seeds = max(args.seeds // 3, 50)
    lift = 0.05
    print(f"   simulated: lift {lift:.0%}, {seeds} seeds, tau fixed at a fraction of the true "
          "CTR (default: 5% of the pooled CTR at each look)")
    for fraction in (None, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5):
        tau = None if fraction is None else fraction * TRUE_CTR
        runs = streams(args, lift, seeds, 200_000, tau)
        minutes = [run.always_minute for run in runs if run.always_minute is not None]
        label = "default" if fraction is None else f"{fraction:.1%}"
        print(f"    tau {label:>7}: detected {rate([r.always_ever for r in runs])}, median "
              f"first look {np.median(minutes) + 1 if minutes else float('nan'):.0f}")
    null = streams(args, 0.0, seeds, 300_000, 0.005 * TRUE_CTR)
    print(f"    A/A with tau 0.5%: ever 'different' {rate([r.always_ever for r in null])}")


def minimum_buckets(args: argparse.Namespace) -> None:
    users, seeds = 400, args.seeds
    edges = [2, 5, 10, 20, 30, 45, 60, 80, 100, 120, args.buckets + 1]
    rejected = np.zeros(len(edges) - 1)
    looks = np.zeros(len(edges) - 1)
    for seed in range(seeds):
        rng = np.random.default_rng(400_000 + seed)
        held = []
        for _ in range(2):
            variant = sessions(rng, users, args.minutes)
            bucket = rng.integers(0, args.buckets, size=users)
            held.append(cumulative_buckets(variant, bucket, args.buckets, args.minutes))
        for minute in range(args.minutes):
            control = Buckets(held[0][0][minute], held[0][1][minute])
            treatment = Buckets(held[1][0][minute], held[1][1][minute])
            comparison = compare(control, treatment, ALPHA, min_buckets=2)
            if comparison is None:
                continue
            filled = min(int(np.count_nonzero(held[0][1][minute])),
                         int(np.count_nonzero(held[1][1][minute])))
            cell = int(np.searchsorted(edges, filled, side="right")) - 1
            rejected[cell] += comparison.p < ALPHA
            looks[cell] += 1
    print(f"\n5. A/A, {users} users per variant arriving over {args.minutes} minutes, {seeds} "
          "seeds: fixed-horizon false positives per look by non-empty buckets (fewer of both "
          f"variants); compare() waits for {abtest.MIN_BUCKETS}")
    for cell in range(len(edges) - 1):
        if looks[cell]:
            print(f"    {edges[cell]:>3}-{edges[cell + 1] - 1:<3} buckets: "
                  f"{rejected[cell] / looks[cell]:6.1%} of {int(looks[cell])} looks")


def bucketing_cost(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(500_000)
    clicks, queries = user_totals(sessions(rng, args.users, args.minutes))
    r = clicks.sum() / queries.sum()
    user_level = float(np.sum((clicks - r * queries) ** 2) / queries.sum() ** 2)
    ratios = []
    for _ in range(500):
        estimate = abtest.ratio(bucket_sums(clicks, queries,
                                            rng.integers(0, args.buckets, args.users),
                                            args.buckets))
        assert estimate is not None
        ratios.append(estimate.variance / user_level)
    df = 2 * (args.buckets - 1)
    print(f"\n6. Bucketing: {args.users:,} users in {args.buckets} buckets, 500 hash salts")
    print(f"    bucket variance / user-level variance: mean {np.mean(ratios):.3f}, sd "
          f"{np.std(ratios):.3f} (normal bucket sums: sd sqrt(2/{args.buckets - 1}) = "
          f"{math.sqrt(2 / (args.buckets - 1)):.3f})")
    print(f"    se from the buckets: relative sd {np.std(np.sqrt(ratios)):.3f}")
    t = stats.t.ppf(0.975, df)
    print(f"    t quantile with {df} df {t:.4f} vs normal 1.9600: intervals "
          f"{t / 1.959964 - 1:.2%} narrower than t ones; a normal-data rejection rate of "
          f"{2 * stats.t.sf(1.959964, df):.2%} at a nominal 5%")


def sample_ratio(args: argparse.Namespace) -> None:
    print("\n7. Sample ratio mismatch")
    print(f"    52,000 / 48,000 users against 50/50: p = {srm([52_000, 48_000], [0.5, 0.5]):.3g}")
    rng = np.random.default_rng(600_000)
    values = [srm([int(n), 100_000 - int(n)], [0.5, 0.5])
              for n in rng.binomial(100_000, 0.5, size=args.seeds)]
    counts, _ = np.histogram(values, bins=10, range=(0.0, 1.0))
    print(f"    {args.seeds} fair 50/50 splits of 100,000: KS against uniform p = "
          f"{stats.kstest(values, 'uniform').pvalue:.3f}; per decile {counts.tolist()}; "
          f"p < 0.001 in {np.mean(np.array(values) < 0.001):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--users", type=int, default=20_000, help="per variant")
    parser.add_argument("--minutes", type=int, default=60, help="looks, one a minute")
    parser.add_argument("--buckets", type=int, default=128)
    args = parser.parse_args()
    started = time.perf_counter()
    null_streams(args)
    lifted_streams(args)
    mixing_scale(args)
    minimum_buckets(args)
    bucketing_cost(args)
    sample_ratio(args)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
