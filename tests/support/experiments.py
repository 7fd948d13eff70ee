"""Simulated users of an A/B experiment, bucketed as the daemon buckets them, for the tests of
``monitor.core.abtest`` and for ``bench/experiments_bench.py``.

A user arrives at a uniform minute of the experiment, has a session then, and comes back for
Poisson(1) more sessions at uniform minutes from then on; each session holds 1 + Poisson(rate)
queries, the rate Gamma-distributed across users (shape 0.5, mean 2: a few heavy users); each
query is clicked with the user's own probability, 0.9 x Beta(2, 5) (a treatment multiplies it by
1 + lift). Queries and click probability are independent, so the pooled CTR of a variant
is E[p] (``TRUE_CTR``) times 1 + lift: the true difference is ``TRUE_CTR * lift``. A user's
bucket is a uniform draw, as a salted hash would give.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.abtest import Buckets, Comparison, Running, compare, look

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

CTR_SCALE, CTR_A, CTR_B = 0.9, 2.0, 5.0
TRUE_CTR = CTR_SCALE * CTR_A / (CTR_A + CTR_B)
"""The pooled CTR of a variant without lift: E[p]."""


@dataclass(frozen=True)
class Sessions:
    """The sessions of one variant's users: who, when, queries and clicked queries."""

    user: IntArray
    minute: IntArray
    queries: FloatArray
    clicks: FloatArray
    users: int


def sessions(
    rng: np.random.Generator, users: int, minutes: int, lift: float = 0.0
) -> Sessions:
    """The sessions of ``users`` users of one variant over ``minutes`` minutes."""
    arrival = rng.integers(0, minutes, size=users)
    ctr = CTR_SCALE * rng.beta(CTR_A, CTR_B, size=users) * (1.0 + lift)
    rate = rng.gamma(0.5, 4.0, size=users)
    visits = 1 + rng.poisson(1.0, size=users)
    user = np.repeat(np.arange(users), visits)
    first = np.ones(len(user), dtype=bool)
    first[1:] = user[1:] != user[:-1]
    later = np.floor(rng.random(len(user)) * (minutes - arrival[user])).astype(np.int64)
    minute = arrival[user] + np.where(first, 0, later)
    queries = 1 + rng.poisson(rate[user])
    clicks = rng.binomial(queries, ctr[user])
    return Sessions(user, minute, queries.astype(np.float64), clicks.astype(np.float64), users)


def user_totals(variant: Sessions) -> tuple[FloatArray, FloatArray]:
    """Clicked queries and queries per user over the whole experiment."""
    clicks = np.bincount(variant.user, weights=variant.clicks, minlength=variant.users)
    queries = np.bincount(variant.user, weights=variant.queries, minlength=variant.users)
    return clicks.astype(np.float64), queries.astype(np.float64)


def bucket_sums(
    numerators: FloatArray, denominators: FloatArray, bucket: IntArray, buckets: int
) -> Buckets:
    """Per-unit sums added up per bucket."""
    return Buckets(
        np.bincount(bucket, weights=numerators, minlength=buckets).tolist(),
        np.bincount(bucket, weights=denominators, minlength=buckets).tolist(),
    )


def cumulative_buckets(
    variant: Sessions, bucket: IntArray, buckets: int, minutes: int
) -> tuple[FloatArray, FloatArray]:
    """Clicks and queries per bucket as the daemon holds them after each minute: arrays of
    shape (minutes, buckets), row m the sums of every session up to minute m."""
    cell = variant.minute * buckets + bucket[variant.user]
    size = minutes * buckets
    clicks = np.bincount(cell, weights=variant.clicks, minlength=size).reshape(minutes, buckets)
    queries = np.bincount(cell, weights=variant.queries, minlength=size).reshape(
        minutes, buckets
    )
    return np.cumsum(clicks, axis=0, dtype=np.float64), np.cumsum(queries, axis=0, dtype=np.float64)


@dataclass(frozen=True)
class Stream:
    """One simulated experiment watched after every minute."""

    final: Comparison
    """The comparison at the last look."""
    naive_ever: bool
    """The fixed-horizon p was below alpha at some look (the naive repeated test)."""
    always_ever: bool
    """The running always-valid p went below alpha."""
    always_minute: int | None
    """The first look at which it did."""
    sequence_covers: bool
    """Every look's confidence sequence held the true difference."""
    running: Running


def stream(
    seed: int,
    users: int,
    minutes: int,
    buckets: int,
    lift: float = 0.0,
    alpha: float = 0.05,
    tau: float | None = None,
) -> Stream:
    """An A/B (A/A without lift) experiment on CTR, ``users`` users per variant, compared
    after every minute with ``compare`` and folded with ``look``."""
    rng = np.random.default_rng(seed)
    held = []
    for variant_lift in (0.0, lift):
        variant = sessions(rng, users, minutes, variant_lift)
        bucket = rng.integers(0, buckets, size=users)
        held.append(cumulative_buckets(variant, bucket, buckets, minutes))
    (control_clicks, control_queries), (treatment_clicks, treatment_queries) = held
    truth = TRUE_CTR * lift
    running: Running | None = None
    naive_ever, covers, first = False, True, None
    comparison = None
    for minute in range(minutes):
        comparison = compare(
            Buckets(control_clicks[minute], control_queries[minute]),
            Buckets(treatment_clicks[minute], treatment_queries[minute]),
            alpha,
            tau,
        )
        if comparison is None:
            continue
        running = look(running, comparison)
        naive_ever |= comparison.p < alpha
        covers &= comparison.cs95[0] <= truth <= comparison.cs95[1]
        if first is None and running.p < alpha:
            first = minute
    if comparison is None or running is None:
        raise AssertionError("no look had enough buckets to compare")
    return Stream(comparison, naive_ever, running.p < alpha, first, covers, running)
