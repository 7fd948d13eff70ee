"""Offline windows, the paired tests against SciPy, and regressions end to end."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pytest
import scipy.stats

from monitor.config import Config, OfflineConfig
from monitor.core.judged import OVERALL, SCORE_BUCKETS, SOURCES, Judged, Pending, Window
from monitor.core.pipeline import Pipeline
from monitor.core.stats import paired_t_p_value, sign_flip_p_value
from monitor.inputs.generate import Regression, Traffic, World, events

if TYPE_CHECKING:
    from monitor.offline.ranking import FloatArray, IntArray

# --- windows, with the events' own times as the clock -------------------------------------


def offline(**settings: object) -> Judged:
    return Judged(OfflineConfig.model_validate({"measures": ["P@2"], **settings}))


def test_time_windows_keep_what_is_inside_and_evict_the_rest() -> None:
    judged = offline(windows=["1h"], last_samples=[1])
    judged.judgment("s1", 0.0, 1, "a", ["d1", "d2"], {"d1": 1})  # P@2 = 0.5
    judged.judgment("s1", 1800.0, 1, "b", ["d1", "d2"], {"d1": 1, "d2": 1})  # P@2 = 1
    judged.advance(1800.0)
    judged.close()
    assert judged.time_mean("sample", 3600.0, 1, 0) == (0.75, 2)
    assert judged.time_mean("sample", 3600.0, OVERALL, 0) == (0.75, 2)
    judged.judgment("s2", 3700.0, 1, "c", ["d1", "d2"], {"d9": 1})  # P@2 = 0
    judged.advance(3700.0)
    judged.close()  # scores it; the clock is 3700: the entry at 0 s has left the hour
    assert judged.time_mean("sample", 3600.0, 1, 0) == (0.5, 2)
    judged.advance(3700.0 + 3601.0)
    judged.judgment("s3", 7301.0, 2, "d", ["d1"], {"d1": 1})
    judged.close()
    assert judged.time_mean("sample", 3600.0, 1, 0) == (0.0, 1), (
        "a bucket (1/60 of the window) leaves whole: 3700 s is in the bucket of 3701 s"
    )
    judged.advance(3700.0 + 3600.0 + 60.0)
    judged.judgment("s4", 7360.0, 2, "e", ["d1"], {"d1": 1})
    judged.close()
    assert judged.time_mean("sample", 3600.0, 1, 0) is None, "an empty window has no mean"
    assert judged.time_mean("sample", 3600.0, 2, 0) == (0.5, 2)


def test_a_window_holds_the_same_queries_whatever_order_they_were_scored_in() -> None:
    """Partitions read at different paces (catching up on a backlog, after a restart) hand
    the same live queries over in other orders, some behind a clock another partition moved
    on: each window ends with the queries of the buckets it keeps all the same."""
    times = [7.0 * i for i in range(180)]  # 0 to 1253 s; windows of 10 min: buckets of 10 s
    # the oldest bucket kept at 1253 s starts at 650 s: the queries at 651 and 658 s are
    # scored last in the second order, when 651 s is already more than 10 min behind
    late_first = [t for t in times if t >= 660.0] + [t for t in times if t < 660.0]
    means = []
    for order in (times, late_first):
        judged = offline(windows=["10m"])
        judged.store_qrels("a", {"d1": 1})
        for number, time in enumerate(order):
            judged.live_query(time, 1, "a", ["d1", "d2"] if number % 3 else ["d2", "d1"])
            judged.advance(time)
            judged.score_waiting()  # a batch of input each
        means.append(judged.time_mean("live", 600.0, 1, 0))
    assert means[0] is not None and means[1] is not None
    assert means[0][1] == means[1][1] == sum(t // 10 >= (1253 - 600) // 10 for t in times)
    assert means[0][0] == pytest.approx(means[1][0], rel=1e-12)


def test_sample_windows_and_completion_by_quiet_period_and_size() -> None:
    judged = offline(windows=["1h"], last_samples=[1, 2], sample_quiet="10m", sample_size=0)
    judged.judgment("s1", 0.0, 1, "a", ["d1", "d2"], {"d1": 1})
    judged.settle(500.0)
    assert "s1" in judged.open_samples
    judged.settle(601.0)
    assert "s1" not in judged.open_samples and judged.completed[-1].sample_id == "s1"
    judged.judgment("s2", 700.0, 1, "a", ["d1", "d2"], {"d1": 1, "d2": 1})
    judged.close()
    assert judged.samples_mean(1, 1, 0) == (1.0, 1)
    assert judged.samples_mean(2, 1, 0) == (0.75, 2)
    sized = offline(sample_size=2)
    sized.judgment("x", 0.0, 1, "a", ["d1"], {"d1": 1})
    assert "x" in sized.open_samples
    sized.judgment("x", 1.0, 1, "b", ["d1"], {"d1": 1})
    assert "x" not in sized.open_samples, "complete at sample_size queries"


def test_qrels_store_is_bounded_and_evicts_the_least_recently_updated() -> None:
    judged = offline(qrels_capacity=2)
    judged.store_qrels("A", {"d": 1})
    judged.store_qrels("b", {"d": 1})
    judged.store_qrels("a", {"d": 2})  # same normalised text as "A": updated, now newest
    judged.store_qrels("c", {"d": 1})
    assert list(judged.qrels) == ["a", "c"]


# --- the paired tests against SciPy -------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_paired_t_test_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 200))
    before = rng.random(n)
    after = np.clip(before + rng.normal(-0.02, 0.1, n), 0, 1)
    expected = scipy.stats.ttest_rel(after, before).pvalue
    assert paired_t_p_value(after - before) == pytest.approx(expected, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("n", [4, 9, 12])
def test_exact_sign_flip_test_matches_scipy(n: int) -> None:
    rng = np.random.default_rng(n)
    differences = rng.normal(0.05, 0.1, n)
    expected = scipy.stats.permutation_test(
        (differences,), np.mean, permutation_type="samples", n_resamples=10_000,
        alternative="two-sided",
    ).pvalue
    assert sign_flip_p_value(differences, 10_000, seed=0) == pytest.approx(expected)


def test_monte_carlo_sign_flip_test_is_close_to_scipy_and_seeded() -> None:
    rng = np.random.default_rng(5)
    differences = rng.normal(0.01, 0.1, 80)
    ours = sign_flip_p_value(differences, 20_000, seed=1)
    assert ours == sign_flip_p_value(differences, 20_000, seed=1)
    expected = scipy.stats.permutation_test(
        (differences,), np.mean, permutation_type="samples", n_resamples=20_000,
        alternative="two-sided", random_state=1,
    ).pvalue
    assert abs(ours - expected) < 0.02


# --- end to end -----------------------------------------------------------------------------

HOUR = 3600.0


def replay_generated(seed: int, regression: Regression | None) -> Pipeline:
    world = World.build(seed)
    traffic = Traffic(
        seed=seed, sessions_per_second=0.2, duration=3.2 * HOUR, judged_every=HOUR,
        judged_queries=300, malformed_rate=0.0, duplicate_rate=0.0, regression=regression,
    )
    pipeline = Pipeline(Config())
    for _, _, message in events(world, traffic):
        pipeline.feed(message)
    pipeline.close()
    return pipeline


def flags(pipeline: Pipeline) -> dict[tuple[str, str], bool | None]:
    names = pipeline.slices.classes.names
    judged = pipeline.judged
    return {
        ("all" if k == OVERALL else names[k], str(judged.specs[m])): v.regression
        for (k, m), v in judged.verdicts.items()
    }


def test_an_injected_regression_flags_its_class_only() -> None:
    start = Traffic().start
    pipeline = replay_generated(3, Regression("navigational", start + 2.5 * HOUR))
    verdicts = flags(pipeline)
    assert verdicts[("navigational", "nDCG@10")] is True
    for (klass, measure), flagged in verdicts.items():
        if klass not in ("navigational", "all"):
            assert flagged is False, (klass, measure)
    delta = pipeline.judged.verdicts
    navigational = pipeline.slices.classes.index["navigational"]
    assert delta[(navigational, 0)].comparison.delta < -0.1
    assert delta[(navigational, 0)].baseline_id == "sample-2"


@pytest.mark.slow
def test_no_false_alarm_without_a_change_across_20_seeds() -> None:
    alarms = 0
    verdicts = 0
    for seed in range(20):
        found = flags(replay_generated(100 + seed, None))
        alarms += sum(1 for flagged in found.values() if flagged)
        verdicts += sum(1 for flagged in found.values() if flagged is not None)
    print(f"false alarms: {alarms} in {verdicts} verdicts over 20 seeds")
    assert verdicts > 20 * 20
    assert alarms == 0


# --- live traffic scored against stored qrels --------------------------------------------


class Recording(Judged):
    """Judged that also keeps every scored query: the oracle of the bounded windows."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.scored: list[tuple[str, float, int, tuple[float, ...], float]] = []

    def _record(
        self, sources: IntArray, times: FloatArray, classes: IntArray, matrix: FloatArray
    ) -> None:
        for s, time, klass, values in zip(sources, times, classes, matrix.tolist(), strict=True):
            self.scored.append((SOURCES[s], float(time), int(klass), tuple(values), self.clock))
        super()._record(sources, times, classes, matrix)


def test_bounded_windows_hold_the_means_of_the_queries_inside_on_generated_traffic() -> None:
    """Two hours of traffic with live qrels and hourly samples: every window mean equals the
    mean over the scored queries themselves, by the documented rule (a query counts while its
    bucket of length/60 does not lie before clock - length, whenever it was scored)."""
    config = Config.model_validate({"offline": {"windows": ["10m", "1h", "24h"]}})
    pipeline = Pipeline(config)
    recording = Recording(config.offline)
    pipeline.judged = recording
    stream = events(World.build(8), Traffic(
        seed=8, duration=2 * 3600.0, sessions_per_second=2.0, qrels=True,
        judged_every=3600.0, judged_queries=80,
    ))
    checked = 0
    for number, (_, _, message) in enumerate(stream):
        pipeline.feed(message)
        if number % 5000 != 4999:
            continue
        recording._flush()
        for (source, length), window in recording.time_windows.items():
            width = length / 60
            first = (recording.clock - length) // width
            for klass in {k for *_, k, _, _ in recording.scored} | {OVERALL}:
                for m in range(len(recording.specs)):
                    inside = [
                        values[m] for s, time, k, values, _ in recording.scored
                        if s == source and time // width >= first
                        and klass in (k, OVERALL) and not math.isnan(values[m])
                    ]
                    found = window.mean(klass, m)
                    if not inside:
                        assert found is None
                        continue
                    assert found is not None and found[1] == len(inside)
                    assert found[0] == pytest.approx(sum(inside) / len(inside), rel=1e-9)
                    # Against the exact window of earlier versions (every query with time >=
                    # clock - length): the buckets add at most the queries of one bucket at the
                    # edge, k of n, which moves a mean of scores in [0, 1] by at most k / n.
                    exact = [
                        values[m] for s, time, k, values, clock in recording.scored
                        if s == source and time >= clock - length
                        and time >= recording.clock - length and klass in (k, OVERALL)
                        and not math.isnan(values[m])
                    ]
                    extra = len(inside) - len(exact)
                    assert 0 <= extra <= len(inside)
                    if exact:
                        assert abs(found[0] - sum(exact) / len(exact)) <= (
                            extra / len(inside) + 1e-12
                        )
                    checked += 1
            assert len(window.buckets) <= 61
    assert checked > 100


@pytest.mark.parametrize("seed", range(4))
def test_the_drift_of_a_batch_is_what_its_queries_add_one_by_one(seed: int) -> None:
    """The live drift of a scored batch, its repeated keys placed once and their scores
    added in one ``np.bincount`` per window, is exactly (the same floats, the same keys in the
    same order) what its queries added one at a time in order give: keys with queries of two
    classes, queries across a bucket boundary, queries too old for the windows, NaN scores,
    keys redaction shows as one (``k1`` and ``k7`` are both shown ``K1``; of one class,
    unless a query's class flips), a batch adding to the cells of the one before."""
    rng = np.random.default_rng(seed)

    def shown(key: str) -> str:
        return f"K{int(key[1:]) % 6}"

    def judged() -> Judged:
        offline_state = offline(windows=["1h", "2h"], measures=["P@2", "RR"])
        offline_state.show = shown
        offline_state.clock = 7200.0
        return offline_state

    batched, one_by_one = judged(), judged()
    for round_, (spread, flips) in enumerate([(60.0, 0.0), (600.0, 0.02), (9000.0, 0.1)]):
        drawn = rng.integers(0, 12, 200)
        keys = [f"k{int(k)}" for k in drawn]
        times = 7200.0 * round_ + 1000.0 - rng.uniform(0.0, spread, 200)
        classes = [1 + int(k) % 2 + int(flip) for k, flip in
                   zip(drawn, rng.random(200) < flips, strict=True)]
        rows = [Pending("live", float(t), c, k, None, [], {}) for k, t, c in
                zip(keys, times, classes, strict=True)]
        # scores whose sums round differently in another order (NaN: skipped)
        matrix = np.where(rng.random((200, 2)) < 0.2, np.nan, rng.random((200, 2)))
        # two batches: the second adds to the cells of the first
        batched._drift_batch(rows[:120], matrix[:120])
        batched._drift_batch(rows[120:], matrix[120:])
        valid = ~np.isnan(matrix)
        addends = np.hstack([np.where(valid, matrix, 0.0), valid.astype(np.float64)])
        for i, row in enumerate(rows):
            one_by_one._drift(row, addends[i].tolist(), shown(row.key))
        assert any(len(keys) > 3 for keys in batched.drift.values()), "keys kept"
        for length in batched.drift:  # after each round: a later one evicts what it held
            # the same keys in the same order, each with its class and buckets in order
            assert [(key, klass, list(buckets.items())) for key, (klass, buckets) in
                    batched.drift[length].items()] == [
                (key, klass, list(buckets.items())) for key, (klass, buckets) in
                one_by_one.drift[length].items()
            ]
        for state in (batched, one_by_one):
            state.clock = 7200.0 * (round_ + 1)


@pytest.mark.parametrize("seed", range(4))
def test_a_window_adds_each_cell_of_a_batch_as_the_sum_of_its_rows_in_order(seed: int) -> None:
    """``Window.add_batch``: per (bucket, class or OVERALL, measure), the sum of its rows'
    scores in their order (NaN skipped, as 0.0) added to the cell, and their count; a cell
    no valid score reached is not made. The same floats as adding the rows one by one to a
    running total from 0.0 (across buckets, classes, and cells that exist before)."""
    rng = np.random.default_rng(seed)
    window, expected = Window(3600.0), Window(3600.0)
    for _ in range(3):
        n = int(rng.integers(1, 300))
        times = rng.uniform(0.0, 600.0, n)
        classes = rng.integers(0, 4, n)
        matrix = rng.choice([0.0, 0.1, 0.3, 1.0 / 3.0, 0.7, np.nan], (n, 3))
        valid = ~np.isnan(matrix)
        window.add_batch(times, classes, matrix, valid)
        totals: dict[tuple[int, int, int], list[float]] = {}
        for time, klass, row in zip(times.tolist(), classes.tolist(), matrix.tolist(),
                                    strict=True):
            for k in (klass, OVERALL):
                for m, value in enumerate(row):
                    cell = totals.setdefault((int(time // window.width), k, m), [0.0, 0])
                    if not math.isnan(value):
                        cell[0] += value
                        cell[1] += 1
        for (number, k, m), (total, count) in totals.items():
            if count:
                bucket = expected.buckets.setdefault(number, {})
                before = bucket.get((k, m))
                if before is None:
                    bucket[(k, m)] = [total, float(count)]
                else:
                    before[0] += total
                    before[1] += count
    assert sorted(window.buckets) == sorted(expected.buckets)
    for number, cells in window.buckets.items():
        assert cells == expected.buckets[number], number


@pytest.mark.parametrize("seed", range(4))
def test_the_score_histograms_of_a_batch_are_its_rows_counted_in_order(seed: int) -> None:
    """``_record``: per (source, class or OVERALL, measure), each valid score counted in its
    bucket (``le`` bounds 0.0, 0.1, ..., 1.0, then +Inf), the sum of the scores in the
    batch's order from 0.0 added to the histogram's sum, NaN skipped and counted; a
    histogram no valid score reached is not made."""
    rng = np.random.default_rng(seed)
    judged = offline(measures=["P@2", "RR", "AP"])
    counts: dict[tuple[str, int, int], list[int]] = {}
    sums: dict[tuple[str, int, int], float] = {}
    skipped = 0
    for _ in range(3):
        n = int(rng.integers(1, 300))
        sources = rng.integers(0, len(SOURCES), n)
        classes = rng.integers(0, 5, n)
        matrix = rng.choice([0.0, 0.05, 0.1, 0.25, 1.0 / 3.0, 0.95, 1.0, np.nan], (n, 3))
        judged._record(sources, np.zeros(n), classes, matrix)
        batch: dict[tuple[str, int, int], float] = {}
        for source, klass, row in zip(sources.tolist(), classes.tolist(), matrix.tolist(),
                                      strict=True):
            for m, value in enumerate(row):
                if math.isnan(value):
                    skipped += 1
                    continue
                bucket = next(i for i, bound in enumerate([*SCORE_BUCKETS, math.inf])
                              if value <= bound)
                for k in (klass, OVERALL):
                    key = (SOURCES[source], k, m)
                    counts.setdefault(key, [0] * (len(SCORE_BUCKETS) + 1))[bucket] += 1
                    batch[key] = batch.get(key, 0.0) + value
        for key, total in batch.items():
            sums[key] = sums.get(key, 0.0) + total
    assert judged.histograms == counts
    assert judged.histogram_sums == sums
    assert judged.skipped == skipped


def test_the_drift_of_a_batch_with_a_time_beyond_exact_integers_is_placed_as_one_by_one() -> None:
    """A time numpy could not cast to a 64-bit bucket exactly (2**53 and beyond) is placed
    with Python's integers, as ``_drift`` places it."""
    batched, one_by_one = offline(windows=["1h"]), offline(windows=["1h"])
    for state in (batched, one_by_one):
        state.show = str.upper
        state.clock = 1e20
    rows = [Pending("live", t, 1, k, None, [], {}) for t, k in
            [(1e20, "a"), (1e20, "a"), (1e20 + 1e5, "b"), (2.0**53, "c")]]
    matrix = np.array([[0.5], [1.0], [0.25], [np.nan]])
    batched._drift_batch(rows, matrix)
    valid = ~np.isnan(matrix)
    addends = np.hstack([np.where(valid, matrix, 0.0), valid.astype(np.float64)])
    for i, row in enumerate(rows):
        one_by_one._drift(row, addends[i].tolist(), row.key.upper())
    assert batched.drift[3600.0] and list(batched.drift[3600.0].items()) == list(
        one_by_one.drift[3600.0].items()
    )
    assert all(type(index) is int for _, buckets in batched.drift[3600.0].values()
               for index in buckets)
