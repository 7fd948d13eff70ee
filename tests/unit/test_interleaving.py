"""Team-draft interleaving credit, Δ_AB and its bootstrap (monitor.core.interleaving).

Checked against bearloga/interleaved-python, the Python port of the interleaving functions
of Wikimedia's R package: its three simulated example files and the figures its
``Experiment`` gives on them are in tests/data/interleaving (README there: source, commit,
licence, and how the figures were produced).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from math import comb
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.core.interleaving import (
    Outcome,
    Preference,
    PreferenceState,
    TeamClicks,
    bootstrap_interval,
    credit,
    delta,
    outcome,
    session_credit,
    team_clicks,
)
from monitor.core.snapshots import StateError

DATA = Path(__file__).resolve().parents[1] / "data" / "interleaving"
REFERENCE: dict[str, Any] = json.loads((DATA / "reference_results.json").read_text())
FILES = sorted(REFERENCE)

INTERVAL_TOLERANCE = 0.005
"""How far our 1,000-round percentile bounds may be from the reference's 1,000-round bounds.
Both are Monte Carlo estimates of the same bootstrap quantiles with different random
streams: one 2.5% quantile of 1,000 rounds has a standard error of about
sqrt(0.025 * 0.975 / 1000) / density = 0.0013 on these data (bootstrap sd 0.010 to 0.0155),
so the difference of two has about 0.0019, and the reference's own bounds move by up to
0.004 from one seed to another (reference_results.json)."""

SLOTS = 20
"""Results per page of the simulated searches (clicked positions are 1 to 20)."""


def clicks_by_search(name: str) -> dict[str, list[tuple[int, str]]]:
    """The (position, team) of each click, by search, in file order; a search without clicks
    (a lone ``serp`` row) has an empty list."""
    searches: dict[str, list[tuple[int, str]]] = defaultdict(list)
    with (DATA / name).open(newline="") as lines:
        for row in csv.DictReader(lines):
            searches[row["search_id"]]
            if row["event"] == "click":
                searches[row["search_id"]].append((int(row["position"]), row["ranking_function"]))
    return dict(searches)


def result_teams(clicks: list[tuple[int, str]], filler: str) -> list[str]:
    """The ``result_teams`` of a simulated search: the files give the team of the clicked
    results only, so every other slot gets ``filler`` (which must not matter)."""
    teams = [filler] * SLOTS
    for position, team in clicks:
        teams[position - 1] = team
    return teams


def preference_of(name: str, filler: str = "A") -> Preference:
    preference = Preference()
    for clicks in clicks_by_search(name).values():
        teams = result_teams(clicks, filler)
        preference.add(credit(teams, [position for position, _ in clicks], "A", "B"))
    return preference


def counts_of(name: str) -> tuple[int, int, int]:
    """The file's (wins_a, wins_b, ties), read off the snapshot as the figures are."""
    state = preference_of(name).snapshot()
    return state.wins_a, state.wins_b, state.ties


# -- the credit of one query -------------------------------------------------------------------

ABAB = ["A", "B", "A", "B"]


@pytest.mark.parametrize(
    ("teams", "clicked", "expected"),
    [
        (ABAB, [1], "a"),
        (ABAB, [2], "b"),
        (ABAB, [1, 2], "tie"),
        (ABAB, [1, 3, 2], "a"),
        (ABAB, [4, 2, 1], "b"),
        (ABAB, [], None),  # no click: not counted (Chapelle et al. count queries with clicks)
        (ABAB, [1, 1, 1, 2], "tie"),  # a result clicked again counts once
        (ABAB, [5], None),  # past the list: credits no one
        (ABAB, [0, -1], None),  # positions are 1-based
        (ABAB, [5, 2], "b"),
        (["A", "C", "B"], [2], None),  # a result of neither team credits no one
        (["A", "C", "B"], [2, 3], "b"),
        ([], [1], None),
    ],
)
def test_credit_table(teams: list[str], clicked: list[int], expected: Outcome | None) -> None:
    assert credit(teams, clicked, "A", "B") == expected


@pytest.mark.parametrize(
    ("clicked_teams", "expected"),
    [
        (["A"], "a"),
        (["B"], "b"),
        (["A", "B"], "tie"),
        (["A", "B", "A"], "a"),
    ],
)
def test_credit_agrees_with_the_reference_outcome_table(
    clicked_teams: list[str], expected: Outcome
) -> None:
    """The rows of the reference's ``test_outcome_determination`` (tests/test_utils.py):
    the teams of the clicked results, one click per result."""
    assert credit(clicked_teams, range(1, len(clicked_teams) + 1), "A", "B") == expected


def test_the_teams_are_named_by_the_caller() -> None:
    teams = ["bm25", "ltr", "ltr"]
    assert credit(teams, [2, 3], "ltr", "bm25") == "a"
    assert credit(teams, [2, 3], "bm25", "ltr") == "b"
    assert team_clicks(teams, [1, 2, 3], "bm25", "ltr") == TeamClicks(1, 2)


def test_two_teams_of_one_name_are_a_mistake() -> None:
    with pytest.raises(ValueError, match="differ"):
        credit(["A"], [1], "A", "A")


@given(
    st.lists(st.sampled_from(["A", "B", "C"]), max_size=12),
    st.lists(st.integers(-2, 14), max_size=20),
)
def test_swapping_the_teams_mirrors_the_outcome(teams: list[str], clicked: list[int]) -> None:
    mirror: dict[Outcome | None, Outcome | None] = {"a": "b", "b": "a", "tie": "tie", None: None}
    assert credit(teams, clicked, "B", "A") == mirror[credit(teams, clicked, "A", "B")]
    assert credit(teams, clicked, "A", "B") == credit(teams, reversed(clicked), "A", "B")


@pytest.mark.parametrize(
    ("queries", "expected"),
    [
        ([TeamClicks(2, 0), TeamClicks(0, 1)], "a"),
        ([TeamClicks(1, 0), TeamClicks(0, 1)], "tie"),
        ([TeamClicks(0, 0), TeamClicks(0, 0)], None),
        ([], None),
        # Clicks are pooled over the session, not query outcomes: by queries B would win
        # two to one, by clicks A wins three to two.
        ([TeamClicks(3, 0), TeamClicks(0, 1), TeamClicks(0, 1)], "a"),
    ],
)
def test_session_credit_pools_the_clicks_of_its_queries(
    queries: list[TeamClicks], expected: Outcome | None
) -> None:
    assert session_credit(queries) == expected


def test_outcome_of_clicks() -> None:
    assert outcome(TeamClicks(0, 0)) is None
    assert outcome(TeamClicks(1, 1)) == "tie"
    assert outcome(TeamClicks(2, 1)) == "a"
    assert outcome(TeamClicks(0, 1)) == "b"


# -- Δ_AB ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wins_a", "wins_b", "ties", "expected"),
    [
        # The reference's test_preference_calculation (tests/test_utils.py), as counts:
        (1, 0, 0, 0.5),  # ['A']
        (0, 1, 0, -0.5),  # ['B']
        (1, 1, 0, 0.0),  # ['A', 'B']
        (1, 1, 1, 0.0),  # ['A', 'B', 'Draw']
        (4, 1, 1, 0.25),  # ['A', 'B', 'Draw', 'A', 'A', 'A']
        (1, 4, 1, -0.25),  # ['A', 'B', 'Draw', 'B', 'B', 'B']
        # By hand:
        (0, 0, 5, 0.0),  # only ties: no preference
        (3, 1, 0, 0.25),  # (3 + 0) / 4 - 0.5
        (2, 1, 1, 0.125),  # (2 + 0.5) / 4 - 0.5
    ],
)
def test_delta_table(wins_a: int, wins_b: int, ties: int, expected: float) -> None:
    assert delta(wins_a, wins_b, ties) == pytest.approx(expected, abs=1e-15)


def test_delta_of_nothing_is_absent() -> None:
    assert delta(0, 0, 0) is None
    assert bootstrap_interval(0, 0, 0) is None


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_delta_is_within_its_range_and_antisymmetric(wins_a: int, wins_b: int, ties: int) -> None:
    value = delta(wins_a, wins_b, ties)
    if wins_a + wins_b + ties == 0:
        assert value is None
        return
    mirrored = delta(wins_b, wins_a, ties)
    assert value is not None and mirrored is not None
    assert -0.5 <= value <= 0.5
    assert value == pytest.approx(-mirrored, abs=1e-12)


# -- the bootstrap ------------------------------------------------------------------------------


def test_the_bootstrap_is_deterministic_for_a_seed() -> None:
    assert bootstrap_interval(40, 25, 10, seed=7) == bootstrap_interval(40, 25, 10, seed=7)
    assert bootstrap_interval(40, 25, 10, seed=7) != bootstrap_interval(40, 25, 10, seed=8)


def test_a_narrower_level_gives_a_narrower_interval() -> None:
    wide = bootstrap_interval(40, 25, 10, seed=3, level=0.95)
    narrow = bootstrap_interval(40, 25, 10, seed=3, level=0.8)
    estimate = delta(40, 25, 10)
    assert wide is not None and narrow is not None and estimate is not None
    assert wide[0] <= narrow[0] <= estimate <= narrow[1] <= wide[1]


def test_one_kind_of_outcome_has_no_spread() -> None:
    assert bootstrap_interval(12, 0, 0) == (0.5, 0.5)
    assert bootstrap_interval(0, 0, 3) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"rounds": 0}, "rounds"),
        ({"level": 1.0}, "level"),
        ({"level": 0.0}, "level"),
    ],
)
def test_bootstrap_settings_are_checked(arguments: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        bootstrap_interval(3, 2, 1, **arguments)


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        bootstrap_interval(3, -2, 1)


def test_resampling_the_counts_is_resampling_the_queries() -> None:
    """The multinomial draw and the resampling of queries one by one (what the reference
    does, with sklearn's ``resample``) give the same distribution: with many rounds their
    quantiles agree within Monte Carlo error."""
    outcomes = np.array([0.5] * 395 + [-0.5] * 342 + [0.0] * 138)  # interleaved_no-pref
    rng = np.random.default_rng(11)
    rounds = 20_000
    indices = rng.integers(0, len(outcomes), size=(rounds, len(outcomes)))
    by_query = np.quantile(outcomes[indices].mean(axis=1), [0.025, 0.975])
    by_counts = bootstrap_interval(395, 342, 138, rounds=rounds, seed=12)
    assert by_counts is not None
    assert by_counts == pytest.approx(tuple(by_query), abs=0.0015)


def test_the_bootstrap_agrees_with_the_normal_approximation_on_many_queries() -> None:
    """Δ_AB is the mean of a per-query score (+1/2 a win of A, -1/2 of B, 0 a tie), so for
    many queries the interval is close to Δ ± 1.96 sd / sqrt(n)."""
    wins_a, wins_b, ties = 5200, 4700, 2100
    n = wins_a + wins_b + ties
    estimate = delta(wins_a, wins_b, ties)
    assert estimate is not None
    sd = np.sqrt((wins_a + wins_b) / (4 * n) - estimate**2)
    interval = bootstrap_interval(wins_a, wins_b, ties, rounds=20_000, seed=5)
    assert interval == pytest.approx(
        (estimate - 1.96 * sd / np.sqrt(n), estimate + 1.96 * sd / np.sqrt(n)), abs=0.0008
    )


# -- the accumulator ----------------------------------------------------------------------------


def test_preference_counts_outcomes_and_ignores_queries_without_clicks() -> None:
    preference = Preference()
    outcomes: list[Outcome | None] = ["a", "a", None, "tie", "b", None, "a"]
    for result in outcomes:
        preference.add(result)
    assert preference.snapshot() == PreferenceState(wins_a=3, wins_b=1, ties=1)


@given(st.lists(st.sampled_from(["a", "b", "tie", None])), st.integers(0, 100))
def test_snapshots_restore_and_add_up(outcomes: list[Outcome | None], cut: int) -> None:
    whole, first, second = Preference(), Preference(), Preference()
    for index, result in enumerate(outcomes):
        whole.add(result)
        (first if index < cut else second).add(result)
    assert first.snapshot() + second.snapshot() == whole.snapshot()
    restored = Preference.restore(whole.snapshot())
    assert restored.snapshot() == whole.snapshot()
    restored.add("a")
    assert restored.wins_a == whole.wins_a + 1


def test_a_snapshot_with_a_negative_count_does_not_restore() -> None:
    with pytest.raises(StateError, match="non-negative"):
        Preference.restore(PreferenceState(wins_a=1, wins_b=-1, ties=0))


def test_the_state_stays_three_counts() -> None:
    preference = Preference()
    for index in range(30_000):
        preference.add(("a", "b", "tie")[index % 3])
    assert preference.snapshot() == PreferenceState(10_000, 10_000, 10_000)
    assert vars(preference) == {"wins_a": 10_000, "wins_b": 10_000, "ties": 10_000}


# -- the reference implementation's data --------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_counts_and_delta_match_the_reference_exactly(name: str) -> None:
    expected = REFERENCE[name]
    searches = clicks_by_search(name)
    assert len(searches) == expected["searches"]
    counts = counts_of(name)
    assert counts == (expected["wins_a"], expected["wins_b"], expected["ties"])
    assert sum(counts) == expected["searches_with_clicks"]
    assert delta(*counts) == expected["preference_statistic"]


@pytest.mark.parametrize("name", FILES)
def test_the_teams_of_unclicked_results_do_not_matter(name: str) -> None:
    assert preference_of(name, filler="A").snapshot() == preference_of(name, "B").snapshot()


def test_the_reference_data_clicks_each_result_at_most_once() -> None:
    """So counting a re-clicked result once (our convention) and every click (the
    reference's) agree on these files."""
    for name in FILES:
        for clicks in clicks_by_search(name).values():
            positions = [position for position, _ in clicks]
            assert len(positions) == len(set(positions))
            assert all(1 <= position <= SLOTS for position in positions)


@pytest.mark.parametrize("name", FILES)
def test_intervals_match_the_reference_within_monte_carlo_error(name: str) -> None:
    expected = REFERENCE[name]
    ours = bootstrap_interval(expected["wins_a"], expected["wins_b"], expected["ties"],
                              rounds=1000, seed=0)
    assert ours is not None
    for theirs in expected["conf_int"]:
        if theirs["n"] != 1000:
            continue
        assert ours[0] == pytest.approx(theirs["lower"], abs=INTERVAL_TOLERANCE), theirs
        assert ours[1] == pytest.approx(theirs["upper"], abs=INTERVAL_TOLERANCE), theirs


def test_the_readme_figures_of_the_reference() -> None:
    """The reference's README: 906 searches, 74.3% (70.0%, 77.9%) on its [-1, 1] scale
    (twice Δ_AB) for interleaved_a-pref, bootstrapped with seed 42."""
    counts = counts_of("interleaved_a-pref.csv")
    estimate, interval = delta(*counts), bootstrap_interval(*counts, seed=0)
    assert estimate is not None and interval is not None
    assert sum(counts) == 906
    assert round(200 * estimate, 1) == 74.3
    assert 200 * interval[0] == pytest.approx(70.0, abs=200 * INTERVAL_TOLERANCE)
    assert 200 * interval[1] == pytest.approx(77.9, abs=200 * INTERVAL_TOLERANCE)


def generator_delta(p_a: float) -> float:
    """The true Δ_AB of the simulation that made the example files (Wikimedia's R
    ``fake_interleaved_data``): a search has 1 to 10 events, uniformly, the first a page
    view and the rest clicks, each on A with probability ``p_a``; with 2, 4, 6 or 8 clicks,
    one search in 200 alternates A and B (a tie). Searches without clicks are not counted."""
    total = 0.0
    for k in range(1, 10):
        wins = sum(comb(k, j) * p_a**j * (1 - p_a) ** (k - j) for j in range(k + 1) if 2 * j > k)
        ties = sum(comb(k, j) * p_a**j * (1 - p_a) ** (k - j) for j in range(k + 1) if 2 * j == k)
        if k % 2 == 0:
            wins, ties = 0.995 * wins, 0.995 * ties + 0.005
        total += (wins + ties / 2 - 0.5) / 9
    return total


@pytest.mark.parametrize(("name", "p_a"), [("interleaved_a-pref.csv", 0.75),
                                           ("interleaved_b-pref.csv", 0.25)])
def test_the_interval_covers_the_simulated_preference(name: str, p_a: float) -> None:
    interval = bootstrap_interval(*counts_of(name), seed=0)
    assert interval is not None
    assert interval[0] <= generator_delta(p_a) <= interval[1]


def test_the_no_preference_file_is_on_the_edge_of_significance() -> None:
    """The simulation has no preference (true Δ_AB 0), but its draw leans to A: Δ_AB 0.030,
    about two standard errors. Its 95% interval starts at 0 in both implementations (the
    reference: -0.0011 with seed 42, 0.0 with seed 0)."""
    assert generator_delta(0.5) == pytest.approx(0.0, abs=1e-15)
    interval = bootstrap_interval(*counts_of("interleaved_no-pref.csv"), seed=0)
    assert interval is not None
    assert abs(interval[0]) <= INTERVAL_TOLERANCE
    assert interval[1] > 0.05
