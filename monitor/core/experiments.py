"""Experiments: per variant of each configured A/B test, the online figures summed per bucket
of randomization units (docs/concepts/experiments.md).

A query belongs to variant ``v`` of experiment ``e`` when its ``e.attribute`` (a top-level
field or an ``attributes`` key, as slice dimensions are read) is one of the experiment's
variants; its unit is its ``user_id`` (UBI: ``client_id``) or its session. Each unit is
hashed (64 bits) into one of ``buckets`` buckets of its variant, and per bucket the part
keeps the sums the comparisons need: queries, clicked and zero-result queries, sessions,
abandoned and successful sessions, conversions, and the time to first click with the
clicks it sums over. Whatever the number of units, that is ``9 x buckets`` numbers per
variant; the variance of a metric is taken over buckets (``monitor.core.abtest``).

Units are counted exactly, as sorted arrays of their hashes, up to ``max_units`` per
experiment (shared equally by its variants); beyond, a HyperLogLog sketch of 2^14 registers
(about 0.8% error) counts them and the figures say the count is approximate.

Pure: no clock, no I/O. Queries and sessions wait here for their outcome (clicked or not,
abandoned or successful) by id, as the query lists' open queries do.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:
    import numpy as np
else:
    from monitor.lazy import numpy as np

from monitor.config import ExperimentConfig
from monitor.core.abtest import Buckets, compare, holm, srm
from monitor.core.interleaving import (
    Preference,
    PreferenceState,
    bootstrap_interval,
    credit,
    delta,
)
from monitor.core.snapshots import Float, Int, Layout, Migration, require

if TYPE_CHECKING:
    from monitor.core.export import ExperimentFigures, InterleavingFigures

METRICS = (
    "queries", "clicked_queries", "zero_result_queries", "sessions", "abandoned_sessions",
    "successful_sessions", "conversions", "first_click_seconds", "first_clicks",
)
"""The sums kept per bucket, in this order."""
QUERIES, CLICKED, ZERO, SESSIONS, ABANDONED, SUCCESSFUL, CONVERSIONS, FIRST_SECONDS, FIRSTS = (
    range(len(METRICS))
)

HLL_BITS = 14
"""HyperLogLog registers: 2^14 (16 KiB per variant), a standard error of about 0.8%."""
MERGE_AT = 65536
"""Unit hashes gathered before they are merged into the sorted array of a variant."""
MAX_PAIRS = 20
"""Pairs of interleaved rankers counted at most (their names come from the events)."""
MAX_RANKER_CHARS = 100
"""The longest ranker name an interleaved pair is counted under (a label value)."""
Assignment = tuple[int, int, int]
"""(experiment index, variant index, bucket) of a query or session."""


def unit_hash(unit: str) -> int:
    """A unit's 64-bit hash (stable across processes and restarts)."""
    return int.from_bytes(hashlib.blake2b(unit.encode(), digest_size=8).digest(), "little")


class Units:
    """The distinct units of one variant: exact up to ``cap``, then a HyperLogLog (built from
    the exact units when the first one does not fit: until then it is theirs, derivable)."""

    __slots__ = ("cap", "exact", "overflowed", "pending", "registers")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.overflowed = False
        """Whether a unit did not fit in ``exact``: the count is the sketch's from then on."""
        self.exact = np.zeros(0, dtype=np.uint64)
        self.pending: list[int] = []
        self.registers: np.ndarray | None = None
        """The HyperLogLog registers, once ``overflowed`` (None before: ``exact`` counts)."""

    def add(self, hashed: int) -> None:
        self.pending.append(hashed)
        if len(self.pending) >= MERGE_AT:
            self.merge()

    def merge(self) -> None:
        if not self.pending:
            return
        hashes = np.unique(np.array(self.pending, dtype=np.uint64))
        self.pending = []
        if self.registers is not None:
            self._sketch(hashes)
        exact = self.exact
        if len(exact) < self.cap:  # the new ones inserted in order: O(n + m log n)
            at = np.searchsorted(exact, hashes)
            known = np.zeros(len(hashes), dtype=bool)
            inside = at < len(exact)
            known[inside] = exact[at[inside]] == hashes[inside]
            fresh = hashes[~known]
            room = self.cap - len(exact)
            if len(fresh) > room:
                self.overflowed = True
                fresh = fresh[:room]
            self.exact = np.insert(exact, np.searchsorted(exact, fresh), fresh)
        else:
            at = np.searchsorted(exact, hashes)
            inside = at < len(exact)
            if not inside.all() or (exact[at[inside]] != hashes[inside]).any():
                self.overflowed = True
        if self.overflowed and self.registers is None:  # every unit so far, then these
            self.registers = np.zeros(1 << HLL_BITS, dtype=np.uint8)
            self._sketch(self.exact)
            self._sketch(hashes)

    def _sketch(self, hashes: np.ndarray) -> None:
        """Count ``hashes`` into the HyperLogLog registers."""
        assert self.registers is not None
        index = (hashes >> np.uint64(64 - HLL_BITS)).astype(np.int64)
        rest = (hashes << np.uint64(HLL_BITS)) | np.uint64(1 << (HLL_BITS - 1))
        # rank: leading zeros of the remaining bits, plus one
        ranks = (64 - np.floor(np.log2(rest.astype(np.float64))).astype(np.int64)).astype(
            np.uint8
        )
        np.maximum.at(self.registers, index, ranks)

    @property
    def approximate(self) -> bool:
        return self.overflowed

    def count(self) -> int:
        self.merge()
        if self.registers is None:
            return len(self.exact)
        registers = self.registers.astype(np.float64)
        m = float(len(registers))
        estimate = 0.7213 / (1 + 1.079 / m) * m * m / float(np.sum(2.0 ** -registers))
        zeros = int(np.count_nonzero(self.registers == 0))
        if estimate <= 2.5 * m and zeros:
            estimate = m * float(np.log(m / zeros))
        return max(round(estimate), len(self.exact))


@dataclass(frozen=True)
class VariantState:
    sums: list[list[Float]]
    """Per metric of ``METRICS``, per bucket."""
    units: str
    """The exact units' hashes: little-endian uint64, base64."""
    registers: str
    """The HyperLogLog registers, base64, when ``approximate`` (else empty: the exact units
    say them; version 1 wrote them always, and they are not read)."""
    approximate: bool = False
    """Whether some unit did not fit in the exact ones."""


@dataclass(frozen=True)
class InterleavedState:
    """The preferences of each pair of interleaved rankers, and the interleaved queries
    waiting for their outcome: their pair, the team of each result, the positions clicked."""

    pairs: list[list[str]]
    counts: list[PreferenceState]
    open_ids: list[str]
    open_pairs: list[Int]
    open_teams: list[list[str]]
    open_clicks: list[list[Int]]


def _same(document: Any) -> Any:
    """Version 1 reads as version 2: registers it wrote for exact counts are left unread."""
    return document


@dataclass(frozen=True)
class ExperimentsState:
    """Per experiment (in configuration order, by id) and variant its sums and units; the
    queries and sessions waiting for their outcome with their assignments; interleaving."""

    ids: list[str]
    variants: list[list[str]]
    state: list[list[VariantState]]
    open_queries: dict[str, list[list[Int]]]
    open_sessions: dict[str, list[list[Int]]]
    interleaved: InterleavedState | None = None
    open_session_times: dict[str, list[float | None]] = field(default_factory=dict)
    """Per open session, the event time of each assignment's query (``open_sessions``); None
    or absent (older states): no query is earlier."""
    open_conversions: dict[str, Int] = field(default_factory=dict)
    """Conversions of the open sessions, counted when they close."""


@dataclass
class Experiments:
    """The experiments of ``[[experiments]]``: per variant, per bucket sums and the units."""

    VERSION: ClassVar[int] = 2
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {1: _same}
    """Version 2 writes the HyperLogLog registers only once a variant's count is approximate
    (version 1 always did; they are not read otherwise)."""

    configs: list[ExperimentConfig]
    sums: list[list[np.ndarray[Any, np.dtype[np.float64]]]] = field(default_factory=list)
    """Per experiment, per variant: a (metrics x buckets) array."""
    units: list[list[Units]] = field(default_factory=list)
    variant_index: list[dict[str, int]] = field(default_factory=list)
    queries: dict[str, list[Assignment]] = field(default_factory=dict)
    """Queries whose outcome (clicked or not) is not known yet, with their assignments."""
    sessions: dict[str, list[Assignment]] = field(default_factory=dict)
    """Open sessions of the experiments: per experiment one assignment, that of the
    session's first query in the experiment in event time (whatever the order of arrival)."""
    session_times: dict[str, list[float]] = field(default_factory=dict)
    """The event time of each assignment's query in ``sessions``."""
    conversions: dict[str, int] = field(default_factory=dict)
    """Conversions per open session, before or after its queries: counted when it closes."""
    pairs: dict[tuple[str, str], Preference] = field(default_factory=dict)
    """Team-draft interleaving: per pair of rankers (in name order), the queries' outcomes."""
    interleaved: dict[str, tuple[tuple[str, str], list[str], list[int]]] = field(
        default_factory=dict
    )
    """Interleaved queries waiting for their outcome: pair, teams, positions clicked."""

    @property
    def active(self) -> bool:
        """Whether the sessions must tell this part about queries, clicks and sessions."""
        return bool(self.configs or self.pairs or self.interleaved)

    def interleave(self, query_id: str, teams: list[str]) -> None:
        """A query whose results two rankers contributed (team-draft interleaving)."""
        names = sorted(set(teams))
        if len(names) != 2 or max(map(len, names)) > MAX_RANKER_CHARS:
            return  # one ranker, or more than two (or a name no label may hold): no preference
        pair = (names[0], names[1])
        if pair not in self.pairs:
            if len(self.pairs) >= MAX_PAIRS:
                return  # ranker names come from the events: the pairs stay bounded
            self.pairs[pair] = Preference()
        self.interleaved[query_id] = (pair, teams, [])

    def clicked(self, query_id: str, position: int) -> None:
        waiting = self.interleaved.get(query_id)
        if waiting is not None and position:
            waiting[2].append(position)

    @classmethod
    def from_config(cls, configs: Sequence[ExperimentConfig]) -> Experiments:
        self = cls(list(configs))
        for config in configs:
            names = config.variants
            self.variant_index.append({name: i for i, name in enumerate(names)})
            self.sums.append([np.zeros((len(METRICS), config.buckets)) for _ in names])
            self.units.append([Units(config.max_units // len(names)) for _ in names])
        return self

    def searched(
        self, values: Sequence[str], query_id: str, session_id: str, user: str | None,
        zero: bool, time: float,
    ) -> None:
        """An accepted query at event ``time`` with its values of the experiments' attributes
        (in the order of ``configs``): counted in each experiment it is in, and remembered
        until its outcome is known; its session's variant in each experiment is that of its
        first query in the experiment."""
        assigned: list[Assignment] = []
        for e, (config, value) in enumerate(zip(self.configs, values, strict=True)):
            v = self.variant_index[e].get(value)
            if v is None:
                continue
            unit = user if config.unit == "user" else session_id
            if not unit:
                continue  # no user id: not in the experiment
            hashed = unit_hash(unit)
            b = hashed % config.buckets
            row = self.sums[e][v]
            row[QUERIES, b] += 1
            if zero:
                row[ZERO, b] += 1
            self.units[e][v].add(hashed)
            assigned.append((e, v, b))
        if assigned:
            self.queries[query_id] = assigned
            self._assign(session_id, assigned, time)

    def _assign(self, session_id: str, assigned: list[Assignment], time: float) -> None:
        """The session takes a query's assignments in the experiments it has none in yet,
        and in those where the query is earlier in event time than the one it has."""
        known = self.sessions.get(session_id)
        if known is None:
            self.sessions[session_id] = list(assigned)
            self.session_times[session_id] = [time] * len(assigned)
            return
        times = self.session_times[session_id]
        for assignment in assigned:
            at = next((i for i, a in enumerate(known) if a[0] == assignment[0]), None)
            if at is None:
                known.append(assignment)
                times.append(time)
            elif time < times[at]:
                known[at] = assignment
                times[at] = time

    def found_results(self, query_id: str) -> None:
        """A query counted as zero-result had results after all."""
        for e, v, b in self.queries.get(query_id, ()):
            self.sums[e][v][ZERO, b] -= 1

    def first_click(self, query_id: str, seconds: float) -> None:
        for e, v, b in self.queries.get(query_id, ()):
            row = self.sums[e][v]
            row[FIRST_SECONDS, b] += seconds
            row[FIRSTS, b] += 1

    def finished(self, query_id: str, clicked: bool) -> None:
        """A query left its session's memory: whether it got a click is final (and, when it
        was interleaved, which ranker won it)."""
        if self.interleaved:
            waiting = self.interleaved.pop(query_id, None)
            if waiting is not None:
                (first, second), teams, positions = waiting
                self.pairs[(first, second)].add(credit(teams, positions, first, second))
        assigned = self.queries.pop(query_id, None)
        if assigned and clicked:
            for e, v, b in assigned:
                self.sums[e][v][CLICKED, b] += 1

    def converted(self, session_id: str) -> None:
        """A conversion applied to the session (in event time, its session resolved): counted
        for its variants when it closes (its first query may come later)."""
        self.conversions[session_id] = self.conversions.get(session_id, 0) + 1

    def closed(self, session_id: str, clicked: bool, successful: bool, queried: bool) -> (
        None
    ):
        """A session closed: one with a query counts for the variants it was assigned."""
        conversions = self.conversions.pop(session_id, 0)
        if not queried:
            return  # (a session without a query is not counted; its queries, if any
            # arrived, belong to a later session of the same id)
        self.session_times.pop(session_id, None)
        for e, v, b in self.sessions.pop(session_id, ()):
            row = self.sums[e][v]
            row[SESSIONS, b] += 1
            if not clicked:
                row[ABANDONED, b] += 1
            if successful:
                row[SUCCESSFUL, b] += 1
            row[CONVERSIONS, b] += conversions

    def snapshot(self) -> ExperimentsState:
        state = []
        for sums, units in zip(self.sums, self.units, strict=True):
            variants = []
            for array, counted in zip(sums, units, strict=True):
                counted.merge()
                variants.append(VariantState(
                    [list(map(float, row)) for row in array],
                    base64.b64encode(counted.exact.astype("<u8").tobytes()).decode(),
                    base64.b64encode(counted.registers.tobytes()).decode()
                    if counted.registers is not None else "",
                    counted.approximate,
                ))
            state.append(variants)
        return ExperimentsState(
            [c.id for c in self.configs], [list(c.variants) for c in self.configs], state,
            {q: [list(a) for a in assigned] for q, assigned in self.queries.items()},
            {s: [list(a) for a in assigned] for s, assigned in self.sessions.items()},
            InterleavedState(
                [list(pair) for pair in self.pairs],
                [preference.snapshot() for preference in self.pairs.values()],
                list(self.interleaved), [list(self.pairs).index(w[0])
                                         for w in self.interleaved.values()],
                [list(w[1]) for w in self.interleaved.values()],
                [list(w[2]) for w in self.interleaved.values()],
            ),
            {s: [t if math.isfinite(t) else None for t in times]
             for s, times in self.session_times.items()},
            dict(self.conversions),
        )

    @classmethod
    def restore(cls, layout: Layout, state: ExperimentsState | None) -> Experiments:
        """The experiments of ``state`` that the configuration still has (same id,
        variants and buckets); others start anew, and those it no longer has are dropped."""
        self = cls.from_config(layout.config.experiments)
        if state is None:
            return self
        interleaved = state.interleaved
        if interleaved is not None:
            require(len(interleaved.pairs) == len(interleaved.counts)
                    and len(interleaved.pairs) <= MAX_PAIRS
                    and all(len(pair) == 2 for pair in interleaved.pairs),
                    "experiments: interleaved pairs")
            pairs = [(pair[0], pair[1]) for pair in interleaved.pairs]
            self.pairs = {pair: Preference.restore(counts)
                          for pair, counts in zip(pairs, interleaved.counts, strict=True)}
            columns = (interleaved.open_ids, interleaved.open_pairs, interleaved.open_teams,
                       interleaved.open_clicks)
            require(len({len(c) for c in columns}) == 1, "experiments: interleaved columns")
            for query_id, at, teams, clicks in zip(*columns, strict=True):
                require(0 <= at < len(pairs), "experiments: an interleaved query's pair")
                self.interleaved[query_id] = (pairs[at], list(teams), list(clicks))
        require(len(state.ids) == len(state.variants) == len(state.state),
                "experiments: columns of different lengths")
        moved: dict[int, int] = {}
        for old, (name, variants, kept) in enumerate(zip(state.ids, state.variants,
                                                         state.state, strict=True)):
            e = next((i for i, c in enumerate(self.configs) if c.id == name), None)
            if e is None or list(self.configs[e].variants) != variants:
                continue
            buckets = self.configs[e].buckets
            require(len(kept) == len(variants), "experiments: variants of other lengths")
            for v, variant in enumerate(kept):
                array = np.array(variant.sums, dtype=np.float64)
                if array.shape != (len(METRICS), buckets):
                    break
                self.sums[e][v] = array
                units = self.units[e][v]
                units.exact = np.frombuffer(base64.b64decode(variant.units),
                                            dtype="<u8").astype(np.uint64)
                units.overflowed = variant.approximate
                if variant.approximate:
                    registers = np.frombuffer(base64.b64decode(variant.registers),
                                              dtype=np.uint8)
                    require(len(registers) == 1 << HLL_BITS, "experiments: HyperLogLog size")
                    units.registers = registers.copy()
            else:
                moved[old] = e
        for source, target in ((state.open_queries, self.queries),
                               (state.open_sessions, self.sessions)):
            for key, assigned in source.items():
                given = state.open_session_times.get(key) if target is self.sessions else None
                if given is None or len(given) != len(assigned):
                    given = [None] * len(assigned)
                times = [float("-inf") if t is None else t for t in given]
                found = [(moved[a[0]], a[1], a[2], t) for a, t in zip(assigned, times,
                                                                      strict=True)
                         if len(a) == 3 and a[0] in moved
                         and 0 <= a[2] < self.configs[moved[a[0]]].buckets
                         and 0 <= a[1] < len(self.configs[moved[a[0]]].variants)]
                if found:
                    target[key] = [(e, v, b) for e, v, b, _ in found]
                    if target is self.sessions:
                        self.session_times[key] = [t for _, _, _, t in found]
        self.conversions = {key: n for key, n in state.open_conversions.items() if n > 0}
        return self


class Measure(NamedTuple):
    """A metric of an experiment: the ratio of two sums per bucket, and which way is
    better."""

    name: str
    numerator: int
    denominator: int
    higher_is_better: bool


MEASURES = (
    Measure("ctr", CLICKED, QUERIES, True),
    Measure("zero_result_rate", ZERO, QUERIES, False),
    Measure("abandonment_rate", ABANDONED, SESSIONS, False),
    Measure("session_success_rate", SUCCESSFUL, SESSIONS, True),
    Measure("conversions_per_session", CONVERSIONS, SESSIONS, True),
    Measure("time_to_first_click", FIRST_SECONDS, FIRSTS, False),
)
"""The metrics compared, each defined here once."""
GUARDRAILS = ("ctr", "zero_result_rate", "abandonment_rate")
"""The metrics on which a significantly worse treatment pages (SearchExperimentGuardrail)."""
ALPHA = 0.05
SRM_ALPHA = 0.001
"""A sample ratio mismatch below this p-value withholds the experiment's verdicts."""


def analyse(figures: ExperimentFigures) -> dict[str, Any]:
    """One experiment as the report, the page and ``/metrics`` show it: per variant its
    figures, the sample ratio test, and each treatment against the control per metric
    (fixed-horizon interval and p-value, Holm-adjusted; the always-valid confidence
    sequence and the verdict it supports, withheld under a sample ratio mismatch)."""
    variants = figures.variants
    arrays = [np.array(v.sums, dtype=np.float64) for v in variants]
    out: dict[str, Any] = {"unit": figures.unit, "variants": {}}
    for variant, array in zip(variants, arrays, strict=True):
        totals = array.sum(axis=1) if array.size else np.zeros(len(METRICS))
        entry: dict[str, Any] = {
            "units": variant.units, "units_approximate": variant.approximate,
            "queries": int(totals[QUERIES]), "sessions": int(totals[SESSIONS]),
        }
        for measure in MEASURES:
            denominator = totals[measure.denominator]
            entry[measure.name] = (float(totals[measure.numerator] / denominator)
                                   if denominator else None)
        out["variants"][variant.name] = entry
    observed = [v.units for v in variants]
    p_srm = srm(observed, [v.share for v in variants]) if sum(observed) else 1.0
    mismatch = p_srm < SRM_ALPHA
    out["srm"] = {"p": p_srm, "mismatch": mismatch,
                  "approximate": any(v.approximate for v in variants)}
    comparisons: list[dict[str, Any]] = []
    control = variants[0].name if variants else ""
    for variant, array in zip(variants[1:], arrays[1:], strict=True):
        for measure in MEASURES:
            found = compare(
                Buckets(arrays[0][measure.numerator], arrays[0][measure.denominator]),
                Buckets(array[measure.numerator], array[measure.denominator]),
                alpha=ALPHA,
            )
            if found is None:
                continue
            verdict: str | None = "inconclusive"
            if found.cs95[0] > 0 or found.cs95[1] < 0:
                verdict = "better" if (found.delta > 0) == measure.higher_is_better else "worse"
            comparisons.append({
                "metric": measure.name, "control": control, "treatment": variant.name,
                "control_value": found.control, "treatment_value": found.treatment,
                "delta": found.delta, "relative": found.relative,
                "ci95": [found.ci95[0], found.ci95[1]], "p": found.p,
                "cs95": [found.cs95[0], found.cs95[1]], "p_always_valid": found.p_always,
                "verdict": None if mismatch else verdict,
            })
    for comparison, adjusted in zip(comparisons, holm([c["p"] for c in comparisons]),
                                    strict=True):
        comparison["p_adjusted"] = adjusted
    out["comparisons"] = comparisons
    return out


def preference(figures: InterleavingFigures) -> dict[str, Any]:
    """One interleaved pair as the report, the page and ``/metrics`` show it: its counts,
    Δ_AB (positive: ``a`` preferred) and its 95% bootstrap interval (Chapelle et al. 2012)."""
    counts = (figures.wins_a, figures.wins_b, figures.ties)
    interval = bootstrap_interval(*counts) if min(counts) >= 0 else None
    return {
        "a": figures.a, "b": figures.b, "wins_a": figures.wins_a, "wins_b": figures.wins_b,
        "ties": figures.ties, "queries": sum(counts), "delta": delta(*counts),
        "ci95": list(interval) if interval is not None else None,
    }
