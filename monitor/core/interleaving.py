"""Team-draft interleaving: the credit of one interleaved query, the preference Δ_AB between
two rankers and its bootstrap interval (docs/concepts/experiments.md#interleaving).

Pure: plain values in, plain values out; no clock, no I/O. The pipeline decides when a query
(or a session) is complete and calls ``credit`` (or ``session_credit``), then adds the outcome
to a ``Preference``.

The unit of the statistic is the query (Chapelle, Joachims, Radlinski and Yue 2012, "Large-
scale validation and analysis of interleaved search evaluation", ACM TOIS 30(1)): a query
with credited clicks is won by A, won by B or tied; a query without one is no evidence and is
not counted. Δ_AB is a function of the three counts only, and the bootstrap resamples the
units with replacement; resampling n units from the counts (wins_a, wins_b, ties) is the
multinomial draw Multinomial(n; wins_a / n, wins_b / n, ties / n), so the three counts are
the whole state the bootstrap needs: a ``Preference`` is three integers whatever the traffic.
With sessions as the unit (``session_credit``: the credited clicks of a session's queries
added up, as Wikimedia's analyses do when they group by session), the same holds at the
session level.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
else:
    from monitor.lazy import numpy as np

from monitor.core.snapshots import require

Outcome = Literal["a", "b", "tie"]
"""What one unit (a query, or a session) says: A won, B won, or neither."""


@dataclass(frozen=True, slots=True)
class TeamClicks:
    """The credited clicks of one query (or one session): on results of team A, of team B."""

    a: int = 0
    b: int = 0

    def __add__(self, other: TeamClicks) -> TeamClicks:
        return TeamClicks(self.a + other.a, self.b + other.b)


def team_clicks(
    teams: Sequence[str], clicked_positions: Iterable[int], a: str, b: str
) -> TeamClicks:
    """The clicks of one query credited to team ``a`` and team ``b``.

    ``teams[i]`` is the team of the result at position ``i + 1`` (the query's
    ``result_teams``); positions are 1-based. A position counts once however often it was
    clicked (a second click on the same result is no new preference). A click outside the
    list, or on a result of neither team, credits no one.
    """
    if a == b:
        raise ValueError(f"the two teams must differ, both are {a!r}")
    on_a = on_b = 0
    for position in set(clicked_positions):
        if 1 <= position <= len(teams):
            team = teams[position - 1]
            if team == a:
                on_a += 1
            elif team == b:
                on_b += 1
    return TeamClicks(on_a, on_b)


def outcome(clicks: TeamClicks) -> Outcome | None:
    """More credited clicks on A: ``"a"``; on B: ``"b"``; as many, at least one: ``"tie"``;
    none: None (not counted)."""
    if clicks.a > clicks.b:
        return "a"
    if clicks.b > clicks.a:
        return "b"
    return "tie" if clicks.a else None


def credit(
    teams: Sequence[str], clicked_positions: Iterable[int], a: str, b: str
) -> Outcome | None:
    """The outcome of one team-draft interleaved query (Radlinski, Kurup and Joachims 2008):
    the team whose results got more of its clicks wins; as many is a tie; a query with no
    credited click is None and is not counted. See ``team_clicks`` for what counts."""
    return outcome(team_clicks(teams, clicked_positions, a, b))


def session_credit(queries: Iterable[TeamClicks]) -> Outcome | None:
    """The outcome of a session: its queries' credited clicks added up, then decided as one
    query's (a session with no credited click is None)."""
    return outcome(sum(queries, TeamClicks()))


def delta(wins_a: int, wins_b: int, ties: int) -> float | None:
    """Δ_AB = (wins_a + ties / 2) / (wins_a + wins_b + ties) - 0.5 (Chapelle et al. 2012),
    in [-0.5, 0.5]: positive when A is preferred, 0 without a preference. None with no unit
    counted (a mean over nothing is absent, not 0). Twice Δ_AB is the [-1, 1] scale some
    reports use."""
    total = wins_a + wins_b + ties
    if total == 0:
        return None
    return (wins_a + ties / 2) / total - 0.5


def bootstrap_interval(
    wins_a: int, wins_b: int, ties: int, rounds: int = 1000, seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of Δ_AB at ``level`` (two-sided, equal tails).

    Each round resamples the n = wins_a + wins_b + ties units with replacement, drawn as one
    multinomial of the three counts (the same distribution as resampling the units one by
    one), and computes Δ_AB; the bounds are the ``(1 - level) / 2`` and ``(1 + level) / 2``
    quantiles of the ``rounds`` values (linear interpolation, numpy's default). Deterministic
    for a seed (numpy's ``default_rng``). None with no unit counted.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1, not {level}")
    if min(wins_a, wins_b, ties) < 0:
        raise ValueError(f"counts cannot be negative: {wins_a}, {wins_b}, {ties}")
    total = wins_a + wins_b + ties
    if total == 0:
        return None
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(total, np.array([wins_a, wins_b, ties]) / total, size=rounds)
    deltas = (draws[:, 0] + draws[:, 2] / 2) / total - 0.5
    tail = (1.0 - level) / 2
    low, high = np.quantile(deltas, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass(frozen=True, slots=True)
class PreferenceState:
    """A ``Preference`` as plain data; merging partitions or replicas adds these up."""

    wins_a: int = 0
    wins_b: int = 0
    ties: int = 0

    def __add__(self, other: PreferenceState) -> PreferenceState:
        return PreferenceState(
            self.wins_a + other.wins_a, self.wins_b + other.wins_b, self.ties + other.ties
        )


class Preference:
    """The outcomes of one interleaving experiment (one pair of teams) counted by unit.

    Its state is three counts, whatever the number of queries: they describe the outcome
    distribution completely, so Δ_AB and its bootstrap need nothing else (module docstring).
    """

    def __init__(self) -> None:
        self.wins_a = 0
        self.wins_b = 0
        self.ties = 0

    def add(self, outcome: Outcome | None) -> None:
        """Count one unit's outcome; None (no credited click) counts nothing."""
        if outcome == "a":
            self.wins_a += 1
        elif outcome == "b":
            self.wins_b += 1
        elif outcome == "tie":
            self.ties += 1

    def snapshot(self) -> PreferenceState:
        return PreferenceState(self.wins_a, self.wins_b, self.ties)

    @classmethod
    def restore(cls, state: PreferenceState) -> Preference:
        """The accumulator with ``state``'s counts; a negative count is a ``StateError``."""
        counts = (state.wins_a, state.wins_b, state.ties)
        require(all(isinstance(count, int) and count >= 0 for count in counts),
                f"interleaving counts must be non-negative integers: {counts}")
        preference = cls()
        preference.wins_a, preference.wins_b, preference.ties = counts
        return preference
