"""Which queries to give the judges: a sample of the queries of a log, at random, the most
searched, or with probability proportional to their searches, stratified by class and slice
(docs/reference/cli.md, ``searchmon sample``). Pure: the candidates and a seeded random
generator in, the picks out."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """A query that may be picked: its key, its searches, and its stratum (its values of
    the stratifying dimensions, in order)."""

    query: str
    searches: int
    stratum: tuple[str, ...]


def pick_random(candidates: Sequence[Candidate], count: int,
                rng: random.Random) -> list[Candidate]:
    """``count`` of ``candidates``, each set of that size equally likely."""
    return rng.sample(list(candidates), min(count, len(candidates)))


def pick_top(candidates: Sequence[Candidate], count: int,
             rng: random.Random) -> list[Candidate]:
    """The ``count`` most searched (ties by query text)."""
    return sorted(candidates, key=lambda c: (-c.searches, c.query))[:count]


def pick_pps(candidates: Sequence[Candidate], count: int,
             rng: random.Random) -> list[Candidate]:
    """``count`` without replacement, with probability proportional to searches
    (Efraimidis and Spirakis 2006: the largest ``u^(1/w)`` of a uniform ``u`` per query and
    its searches ``w``; each next pick is proportional to searches among those left)."""
    keyed = [(math.log(1.0 - rng.random()) / max(c.searches, 1), c) for c in candidates]
    keyed.sort(key=lambda item: -item[0])
    return [candidate for _, candidate in keyed[:count]]


METHODS: dict[str, Callable[[Sequence[Candidate], int, random.Random], list[Candidate]]] = {
    "random": pick_random, "top": pick_top, "pps": pick_pps,
}
"""The sampling methods by name."""


def allocation(sizes: dict[tuple[str, ...], int], count: int,
               available: dict[tuple[str, ...], int]) -> dict[tuple[str, ...], int]:
    """How many of ``count`` picks each stratum gets: in proportion to its size (its
    searches) by largest remainder (Hamilton's method), never more than it has
    (``available``: what a stratum cannot take goes to the others by the same rule); then,
    when there are at least as many picks as strata, a stratum left with none takes one from
    the stratum with the most."""
    strata = sorted(sizes)
    given = dict.fromkeys(strata, 0)
    left = min(count, sum(available.values()))
    while left > 0:
        open_ = [s for s in strata if given[s] < available[s]]
        weights = {s: sizes[s] for s in open_}
        if not any(weights.values()):
            weights = dict.fromkeys(open_, 1)
        total = sum(weights.values())
        shares = {s: left * weights[s] / total for s in open_}
        whole = {s: min(math.floor(shares[s]), available[s] - given[s]) for s in open_}
        rest = left - sum(whole.values())
        for stratum in sorted(open_, key=lambda s: (math.floor(shares[s]) - shares[s],
                                                    -sizes[s], s)):
            if rest and given[stratum] + whole[stratum] < available[stratum]:
                whole[stratum] += 1
                rest -= 1
        for stratum, extra in whole.items():
            given[stratum] += extra
            left -= extra
    if count >= len(strata):
        for stratum in strata:
            donor = max(strata, key=lambda s: (given[s], sizes[s]))
            if not given[stratum] and available[stratum] and given[donor] > 1:
                given[donor] -= 1
                given[stratum] += 1
    return given


def sample(candidates: Sequence[Candidate], count: int, method: str,
           rng: random.Random) -> list[Candidate]:
    """``count`` queries of ``candidates`` by ``method`` within each stratum, the strata's
    shares by ``allocation``; in stratum order, then as picked."""
    strata: dict[tuple[str, ...], list[Candidate]] = {}
    for candidate in candidates:
        strata.setdefault(candidate.stratum, []).append(candidate)
    sizes = {s: sum(c.searches for c in members) for s, members in strata.items()}
    shares = allocation(sizes, count, {s: len(m) for s, m in strata.items()})
    picked: list[Candidate] = []
    for stratum in sorted(strata):
        picked += METHODS[method](strata[stratum], shares[stratum], rng)
    return picked
