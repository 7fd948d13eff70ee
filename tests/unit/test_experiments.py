"""Experiments through the pipeline: per-variant figures against an independent count, the
comparisons' deltas, the sample ratio test, units past the exact bound, checkpoints, and
team-draft interleaving."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from monitor.config import Config
from monitor.core.experiments import Units, unit_hash
from monitor.core.export import combine, export
from monitor.core.interleaving import credit
from monitor.core.pipeline import Pipeline
from monitor.serve.report import report
from monitor.state import codec
from monitor.state.checkpoint import restore_unit
from monitor.state.codec import UnitState
from tests.support.checkpoints import round_trip
from tests.support.events import click, conversion, line, query, stamp

RANKER = {"id": "ranker", "attribute": "ranker", "control": "A", "split": {"A": 0.5, "B": 0.5}}


def configured(*experiments: dict[str, Any]) -> Config:
    return Config.model_validate({"experiments": list(experiments)})


def traffic(users: int, ctr: dict[str, float], seed: int = 1, share_b: float = 0.5) -> tuple[
    list[bytes], dict[str, Counter[str]]
]:
    """Users in A or B (by ``share_b``), a few sessions each of one or two queries, clicked
    with the variant's probability; some conversions. Returns the lines and, counted apart,
    per variant: users, queries, clicked queries, sessions, abandoned sessions, conversions."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    counts: dict[str, Counter[str]] = {"A": Counter(), "B": Counter()}
    at = 0.0
    for u in range(users):
        variant = "B" if rng.random() < share_b else "A"
        counts[variant]["units"] += 1
        for s in range(rng.randint(1, 3)):
            session = f"u{u}s{s}"
            at += 0.5
            clicked_any = False
            for q in range(rng.randint(1, 2)):
                query_id = f"{session}q{q}"
                lines.append(query(query_id, at, session, query_id, ranker=variant,
                                   user_id=f"user-{u}"))
                counts[variant]["queries"] += 1
                if rng.random() < ctr[variant]:
                    lines.append(click(f"c{query_id}", at + 0.1, session, query_id))
                    counts[variant]["clicked_queries"] += 1
                    clicked_any = True
            counts[variant]["sessions"] += 1
            counts[variant]["abandoned_sessions"] += not clicked_any
            if clicked_any and rng.random() < 0.2:
                lines.append(conversion(f"v{session}", at + 0.2, session))
                counts[variant]["conversions"] += 1
    return lines, counts


def fed(config: Config, lines: list[bytes]) -> Pipeline:
    pipeline = Pipeline(config)
    for data in lines:
        assert pipeline.feed(data) is None
    pipeline.close()
    return pipeline


def test_per_variant_figures_equal_an_independent_count() -> None:
    lines, counts = traffic(2000, {"A": 0.5, "B": 0.5})
    result = report(fed(configured(RANKER), lines))["experiments"]["ranker"]
    assert result["unit"] == "user"
    for name in ("A", "B"):
        variant, want = result["variants"][name], counts[name]
        assert variant["units"] == want["units"] and not variant["units_approximate"]
        assert variant["queries"] == want["queries"]
        assert variant["sessions"] == want["sessions"]
        assert variant["ctr"] == pytest.approx(want["clicked_queries"] / want["queries"])
        assert variant["abandonment_rate"] == pytest.approx(
            want["abandoned_sessions"] / want["sessions"])
        assert variant["conversions_per_session"] == pytest.approx(
            want["conversions"] / want["sessions"])
        assert variant["time_to_first_click"] == pytest.approx(0.1)


def test_a_true_lift_is_detected_and_an_equal_one_is_not() -> None:
    lines, counts = traffic(4000, {"A": 0.40, "B": 0.48}, seed=2)
    result = report(fed(configured(RANKER), lines))["experiments"]["ranker"]
    ctr = next(c for c in result["comparisons"] if c["metric"] == "ctr")
    want = (counts["B"]["clicked_queries"] / counts["B"]["queries"]
            - counts["A"]["clicked_queries"] / counts["A"]["queries"])
    assert ctr["delta"] == pytest.approx(want)
    assert ctr["ci95"][0] < want < ctr["ci95"][1]
    assert ctr["cs95"][0] <= ctr["ci95"][0] and ctr["ci95"][1] <= ctr["cs95"][1]
    assert ctr["verdict"] == "better" and ctr["p"] < 0.001 and ctr["p_adjusted"] >= ctr["p"]
    abandonment = next(c for c in result["comparisons"] if c["metric"] == "abandonment_rate")
    assert abandonment["delta"] < 0 and abandonment["verdict"] == "better"
    same, _ = traffic(4000, {"A": 0.45, "B": 0.45}, seed=3)
    equal = report(fed(configured(RANKER), same))["experiments"]["ranker"]
    assert all(c["verdict"] == "inconclusive" for c in equal["comparisons"])


@pytest.mark.slow
def test_a_sample_ratio_mismatch_withholds_the_verdicts() -> None:
    lines, _ = traffic(20000, {"A": 0.4, "B": 0.6}, share_b=0.52, seed=4)
    pipeline = fed(configured(RANKER), lines)
    result = report(pipeline)["experiments"]["ranker"]
    assert result["srm"]["mismatch"] and result["srm"]["p"] < 0.001
    assert all(c["verdict"] is None for c in result["comparisons"])
    balanced, _ = traffic(20000, {"A": 0.4, "B": 0.6}, share_b=0.5, seed=4)
    fine = report(fed(configured(RANKER), balanced))["experiments"]["ranker"]
    assert not fine["srm"]["mismatch"]
    assert next(c for c in fine["comparisons"] if c["metric"] == "ctr")["verdict"] == "better"


def test_units_are_exact_up_to_the_bound_then_estimated() -> None:
    units = Units(cap=1000)
    for i in range(600):
        units.add(unit_hash(f"user-{i % 400}"))
    assert units.count() == 400 and not units.approximate
    assert units.registers is None  # the exact units count: no sketch kept, none written
    sketched = Units(cap=0)  # a sketch of every unit from the first
    for name in [*(f"user-{i % 400}" for i in range(600)), *(f"user-{i}" for i in range(20000))]:
        sketched.add(unit_hash(name))
    for i in range(20000):
        units.add(unit_hash(f"user-{i}"))
    estimate = units.count()
    assert units.approximate and abs(estimate - 20000) < 0.05 * 20000
    # the sketch begun at the first unit that did not fit holds the units counted before
    assert sketched.count() == estimate and units.registers is not None
    assert (units.registers == sketched.registers).all()


def test_session_units_and_several_experiments_at_once() -> None:
    font = {"id": "font", "attribute": "font", "control": "small",
            "split": {"small": 0.5, "large": 0.5}, "unit": "session"}
    lines = [query(f"q{i}", i, f"s{i % 50}", f"q{i}", ranker="AB"[i % 2],
                   font=("small", "large")[i % 5 == 0], user_id=f"u{i % 30}")
             for i in range(200)]
    result = report(fed(configured(RANKER, font), lines))["experiments"]
    # user j is always in the variant of j's parity; session k in large when k % 5 == 0
    assert {n: v["units"] for n, v in result["ranker"]["variants"].items()} == {
        "A": 15, "B": 15}
    font_units = {name: v["units"] for name, v in result["font"]["variants"].items()}
    assert font_units == {"small": 40, "large": 10}


def test_a_query_without_its_unit_or_variant_is_out_of_the_experiment() -> None:
    lines = [query("q1", 0, "s1", "q1", ranker="A"), query("q2", 1, "s2", "q2", user_id="u"),
             query("q3", 2, "s3", "q3", ranker="Z", user_id="u"),
             query("q4", 3, "s4", "q4", attributes={"ranker": "B"}, user_id="u")]
    result = report(fed(configured(RANKER), lines))["experiments"]["ranker"]
    assert {n: v["queries"] for n, v in result["variants"].items()} == {"A": 0, "B": 1}


def test_the_state_survives_a_checkpoint_and_partitions_add_up() -> None:
    lines, _ = traffic(600, {"A": 0.5, "B": 0.6}, seed=5)
    config = configured(RANKER)
    half = len(lines) // 2
    pipeline = Pipeline(config)
    for data in lines[:half]:
        pipeline.feed(data)
    checkpoint = codec.encode("unit", UnitState(
        "e", 0, half, 0.0, None, codec.fingerprint(config), pipeline.snapshot()))
    restored = restore_unit(checkpoint, "test", config)[1]
    assert export(restored).experiments == export(pipeline).experiments
    for data in lines[half:]:
        restored.feed(data)
        pipeline.feed(data)
    restored.close()
    pipeline.close()
    assert export(restored).experiments == export(pipeline).experiments
    other = configured({**RANKER, "split": {"A": 0.5, "C": 0.5}})
    moved = restore_unit(checkpoint, "test", other)[1]
    assert all(v.units == 0 for v in export(moved).experiments[0].variants)
    # two partitions, each user's events in one: the sums and units add up to the whole
    user = [int(json.loads(data)["session_id"][1:].split("s")[0]) % 2 for data in lines]
    parts = [fed(config, [d for d, u in zip(lines, user, strict=True) if u == k])
             for k in (0, 1)]
    added = combine([(export(p), 1) for p in parts]).experiments
    assert added == export(fed(config, lines)).experiments


def test_interleaved_queries_credit_the_ranker_of_the_clicked_results() -> None:
    rng = random.Random(7)
    lines: list[bytes] = []
    want: Counter[str] = Counter()
    for i in range(300):
        teams = ["A", "B", "B", "A", "A", "B"] if i % 2 else ["B", "A", "A", "B", "B", "A"]
        query_id = f"q{i}"
        lines.append(line({
            "type": "query", "event_id": query_id, "timestamp": stamp(i), "session_id": f"s{i}",
            "query_id": query_id, "query_text": "shoes", "result_teams": teams,
            "result_ids": [f"d{k}" for k in range(6)],
        }))
        clicked = sorted(rng.sample(range(1, 7), rng.randint(0, 2)))
        for k, position in enumerate(clicked):
            lines.append(click(f"c{i}.{k}", i + 0.1 + k, f"s{i}", query_id, position=position))
        outcome = credit(teams, clicked, "A", "B")
        if outcome is not None:
            want[outcome] += 1
    result = report(fed(Config(), lines))
    (pair,) = result["interleaving"]
    assert (pair["a"], pair["b"]) == ("A", "B")
    assert (pair["wins_a"], pair["wins_b"], pair["ties"]) == (want["a"], want["b"], want["tie"])
    assert pair["ci95"][0] <= pair["delta"] <= pair["ci95"][1]


def test_result_teams_must_name_a_team_per_result() -> None:
    pipeline = Pipeline(Config())
    rejected = pipeline.feed(line({
        "type": "query", "event_id": "q", "timestamp": stamp(0), "session_id": "s",
        "query_id": "q", "query_text": "shoes", "result_ids": ["d1", "d2"],
        "result_teams": ["A"],
    }))
    assert rejected is not None and "result_teams" in rejected.detail


def test_the_report_and_metrics_shape() -> None:
    lines, _ = traffic(300, {"A": 0.5, "B": 0.6}, seed=8)
    result = report(fed(configured(RANKER), lines))["experiments"]["ranker"]
    assert set(result) == {"unit", "variants", "srm", "comparisons"}
    assert set(result["srm"]) == {"p", "mismatch", "approximate"}
    for comparison in result["comparisons"]:
        assert {"metric", "control", "treatment", "delta", "relative", "ci95", "p",
                "p_adjusted", "cs95", "verdict"} <= set(comparison)
    json.dumps(result)


def test_a_session_counts_in_each_experiment_by_its_first_query_there_in_event_time() -> None:
    """Sessions whose queries are in one experiment, the other or both, switching variant,
    with conversions before, between and after them; the lines shuffled within the allowed
    lateness, and restored from a checkpoint half-way: per experiment and variant, the
    sessions and conversions of an independent count, the same for every order."""
    layout = {"id": "layout", "attribute": "layout", "control": "old",
              "split": {"old": 0.5, "new": 0.5}, "unit": "session"}
    rank = {**RANKER, "unit": "session"}
    rng = random.Random(3)
    events: list[tuple[float, bytes]] = []
    sessions: dict[str, Counter[str]] = {"ranker": Counter(), "layout": Counter()}
    conversions: dict[str, Counter[str]] = {"ranker": Counter(), "layout": Counter()}
    for s in range(300):
        at = s * 4000.0
        session = f"s{s}"
        first: dict[str, str] = {}
        converted = 0
        for n in range(rng.randint(1, 4)):
            at += rng.uniform(1, 20)
            if rng.random() < 0.3:
                events.append((at, conversion(f"{session}v{n}", at, session)))
                converted += 1
                continue
            given: dict[str, Any] = {}
            if rng.random() < 0.7:
                given["ranker"] = rng.choice("AB")
            if rng.random() < 0.5:
                given["layout"] = rng.choice(["old", "new"])
            for name, attribute in (("ranker", "ranker"), ("layout", "layout")):
                if attribute in given:
                    first.setdefault(name, given[attribute])
            events.append((at, query(f"{session}q{n}", at, session, f"{session}q{n}", **given)))
        for name, variant in first.items():  # (a session in an experiment has a query)
            sessions[name][variant] += 1
            conversions[name][variant] += converted
    config = configured(rank, layout)
    in_order = [data for _, data in events]
    shuffled = [data for _, data in sorted(events, key=lambda e: e[0] + rng.uniform(0, 60))]
    results = []
    for lines in (in_order, shuffled):
        pipeline = Pipeline(config)
        for n, data in enumerate(lines):
            if n == len(lines) // 2:
                pipeline = round_trip(pipeline)
            assert pipeline.feed(data) is None
        pipeline.close()
        results.append(report(pipeline)["experiments"])
    for result in results:
        for name in ("ranker", "layout"):
            variants = result[name]["variants"]
            assert {v: variants[v]["sessions"] for v in variants} == {
                v: sessions[name][v] for v in variants}, name
            for v in variants:
                expected = (conversions[name][v] / sessions[name][v]
                            if sessions[name][v] else None)
                found = variants[v]["conversions_per_session"]
                assert (found is None) == (expected is None)
                assert found is None or abs(found - expected) < 1e-12, (name, v)
    assert results[0] == results[1]


def test_open_sessions_of_a_state_without_their_times_restore_and_checkpoint_again() -> None:
    """A state written before the sessions' assignment times were kept: its open sessions
    keep their assignments, and the next checkpoint reads back (no time is written as -inf)."""
    from dataclasses import replace

    from monitor.state.checkpoint import restore_unit
    from monitor.state.codec import UnitState

    config = configured({**RANKER, "unit": "session"})
    pipeline = Pipeline(config)
    for n in range(5):
        assert pipeline.feed(query(f"q{n}", n, f"s{n}", f"q{n}", ranker="AB"[n % 2])) is None
    state = pipeline.snapshot()
    assert state.experiments is not None and state.experiments.open_sessions
    older = replace(state, experiments=replace(state.experiments, open_session_times={}))

    def restored(snapshot: Any) -> Pipeline:
        data = codec.encode("unit", UnitState("e", 0, 5, 0.0, None, codec.fingerprint(config),
                                              snapshot))
        return restore_unit(data, "test", config)[1]

    again = restored(restored(older).snapshot())
    assert set(again.experiments.sessions) == set(pipeline.experiments.sessions)
    again.close()
    pipeline.close()
    assert export(again).experiments == export(pipeline).experiments


def test_a_ubi_conversion_counts_for_the_session_of_its_query_and_is_not_kept() -> None:
    """A UBI conversion names its query: it counts in the experiment of that query's
    session, and nothing of it stays once the session closes."""
    config = configured({**RANKER, "attribute": "ranker", "unit": "session"})
    pipeline = Pipeline(config)
    record = {"user_query": "shoes", "query_id": "u1", "client_id": "c1", "timestamp": stamp(0),
              "query_response_hit_ids": ["d1"], "query_attributes": {"ranker": "A"}}
    purchase = {"action_name": "purchase", "query_id": "u1", "client_id": "c1",
                "session_id": "browser-9", "timestamp": stamp(5),
                "event_attributes": {"object": {"object_id": "d1"}}}
    for message in (record, purchase):
        assert pipeline.feed(json.dumps(message).encode()) is None
    pipeline.close()
    variants = report(pipeline)["experiments"]["ranker"]["variants"]
    assert variants["A"]["sessions"] == 1 and variants["A"]["conversions_per_session"] == 1.0
    assert not pipeline.experiments.conversions and not pipeline.experiments.sessions
