"""Realistic synthetic search traffic and judged samples, seeded and reproducible.

A hidden world: a universe of queries in several classes with Zipf-like popularity (head,
torso, tail), each with a pool of documents of hidden graded relevance, and a ranker that
orders them with some noise. Users arrive in sessions of a few queries, scan results under a
cascade click model (examination falls with position, clicks and satisfaction follow the
hidden relevance), dwell long when satisfied, sometimes convert, and reformulate when not.
Judged samples label the served rankings with the same hidden relevance. Each session
belongs to a slice (a platform, a locale, an experiment variant, drawn from a mix) which
its query events carry as ``attributes``. A scenario can inject a regression: from a given
time, the rankings of one class, of one slice, or of one class within one slice are
shuffled, which moves their online and offline metrics the way a ranking bug would.

The slices are drawn from a random stream of their own: the rest of the traffic (queries,
clicks, times, ids) is the same for a given seed whatever the mix, and as it was before
queries carried attributes.

Experiments, when asked for: sessions belong to users (a geometric number of sessions each),
and each user is assigned to a variant of an A/B experiment by a hash of the user and the
experiment; a variant can carry a true effect on the click-through rate, built so that its
size is known exactly. Or the result lists are team-draft interleavings of two rankers, and
the clicks carry a true preference of known size. Users, effects and interleavings draw from
random streams of their own too: without them the stream is byte for byte as before, and
users and assignments alone only add fields to it.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import random
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from math import isfinite
from typing import NamedTuple

# class -> (share of queries, terms range, zero-result probability, relevance profile, converts)
CLASS_PROFILES: dict[str, tuple[float, tuple[int, int], float, str, float]] = {
    "navigational": (0.30, (1, 2), 0.005, "single", 0.02),
    "informational": (0.35, (3, 7), 0.02, "graded", 0.0),
    "product": (0.25, (2, 4), 0.03, "graded", 0.25),
    "local": (0.10, (2, 4), 0.05, "sparse", 0.05),
}
WORDS = (
    "cheap", "flights", "berlin", "hotel", "weather", "python", "tutorial", "pizza", "near",
    "me", "best", "laptop", "2026", "running", "shoes", "how", "to", "cook", "rice", "train",
    "tickets", "paris", "museum", "opening", "hours", "news", "football", "score", "bank",
    "login", "mortgage", "rates", "recipe", "vegan", "cake", "phone", "case", "wireless",
    "headphones", "jobs", "remote", "garden", "tools", "coffee", "maker", "sale", "insurance",
    "car", "rental", "dentist", "open", "sunday", "movie", "times", "kids", "toys", "camping",
    "tent", "translate", "spanish",
)
ATTRACTIVENESS = (0.05, 0.25, 0.55, 0.85)  # click probability once examined, by grade
SATISFACTION = (0.05, 0.35, 0.65, 0.9)  # stop after the click, by grade
JUDGE_NOISE = 0.1  # probability that a judged label is off by one grade
RESULTS_PER_PAGE = 10
POOL = 30
EXAMINATION = tuple(0.95 ** (position - 1) * (0.9 if position == 1 else 0.8)
                    for position in range(1, RESULTS_PER_PAGE + 1))
"""The probability to examine the result at each position (1 first), having examined those
above it without being satisfied: the cascade's position bias."""
ATTRIBUTES_KEY = b',"attributes":{'  # the last key of a query event that has a slice
USER_KEY = b',"user_id":"'  # the last key of other events, before attributes in a query's
USER_SESSIONS = 3.0
"""A user's sessions on average: after each session the user comes back with probability
1 - 1 / USER_SESSIONS, so the number of sessions is geometric."""
RETURN_AFTER = (60.0, 600.0)
"""The least and the mean time (seconds) from the start of a user's session to the next."""


@dataclass(frozen=True, slots=True)
class Mix:
    """A dimension of the slices and how its values are drawn: each session gets one value,
    with a probability proportional to its weight. Prints as it is written on the command
    line (``ios:0.3,android:0.3,web:0.4``)."""

    dimension: str
    values: tuple[str, ...]
    weights: tuple[float, ...]

    def draw(self, rng: random.Random) -> str:
        return rng.choices(self.values, self.weights)[0]

    def drawn(self) -> tuple[str, ...]:
        """The values that can be drawn (a weight of 0 is never drawn)."""
        return tuple(v for v, w in zip(self.values, self.weights, strict=True) if w > 0)

    def __str__(self) -> str:
        return ",".join(f"{v}:{w:g}" for v, w in zip(self.values, self.weights, strict=True))


DEFAULT_MIXES = (
    Mix("platform", ("ios", "android", "web"), (0.3, 0.3, 0.4)),
    Mix("locale", ("en-US", "de-DE", "fr-FR", "ja-JP"), (0.5, 0.2, 0.15, 0.15)),
    Mix("variant", ("control", "treatment"), (0.5, 0.5)),
)
"""The slices of generated sessions unless told otherwise."""
MIX_SYNTAX = "name:weight,... (ios:0.3,android:0.3,web:0.4; weights are relative)"
SLICE_SYNTAX = "dimension=value,... (platform=ios,locale=de-DE)"


def parse_mix(dimension: str, text: str) -> Mix:
    """``name:weight,...`` as the mix of ``dimension``; ``ValueError`` saying what is wrong
    and what is accepted. Weights are relative (they need not add up to 1), at least one of
    them positive; a name appears once."""
    values: list[str] = []
    weights: list[float] = []
    for item in text.split(","):
        name, colon, weight = item.strip().rpartition(":")
        if not colon or not name.strip():
            raise ValueError(f"{item.strip()!r} is not name:weight; expected {MIX_SYNTAX}")
        try:
            number = float(weight)
        except ValueError:
            number = float("nan")
        if not isfinite(number) or number < 0:
            raise ValueError(f"the weight of {name.strip()!r} ({weight.strip()!r}) is not a "
                             f"number >= 0; expected {MIX_SYNTAX}")
        if name.strip() in values:
            raise ValueError(f"{name.strip()!r} is given twice; expected {MIX_SYNTAX}")
        values.append(name.strip())
        weights.append(number)
    if not any(weights):
        raise ValueError(f"every weight is 0; expected {MIX_SYNTAX}")
    return Mix(dimension, tuple(values), tuple(weights))


def parse_slice(texts: Sequence[str], mixes: Sequence[Mix]) -> tuple[tuple[str, str], ...]:
    """``dimension=value`` pairs (each text comma-separated) naming a slice of ``mixes``, in
    the order given; ``ValueError`` for a pair that is not one, a dimension not in the mixes
    or given twice, or a value its mix never draws (no session would be in the slice)."""
    by_dimension = {mix.dimension: mix for mix in mixes}
    pairs: dict[str, str] = {}
    for text in texts:
        for item in text.split(","):
            dimension, equals, value = (part.strip() for part in item.partition("="))
            if not equals or not dimension or not value:
                raise ValueError(f"{item.strip()!r} is not dimension=value; expected "
                                 f"{SLICE_SYNTAX}")
            mix = by_dimension.get(dimension)
            if mix is None:
                raise ValueError(f"no dimension {dimension!r} (the dimensions: "
                                 f"{', '.join(by_dimension) or 'none'})")
            if value not in mix.drawn():
                raise ValueError(f"{dimension} {value!r} is never drawn (the {dimension} mix: "
                                 f"{mix})")
            if dimension in pairs:
                raise ValueError(f"{dimension} is given twice (a session has one {dimension})")
            pairs[dimension] = value
    return tuple(pairs.items())


EXPERIMENT_SYNTAX = "id:attribute:variant=share,... (exp-7:ranker:A=0.5,B=0.5; shares add up to 1)"
EFFECT_SYNTAX = "[experiment:]variant:ctr=change (B:ctr=+0.02)"
EFFECT_MEASURES = ("ctr",)
INTERLEAVE_SYNTAX = "first:second (A:B), the rankers' names"
PREFERENCE_SYNTAX = "ranker=size (B=0.1; size from 0 to below 0.5)"


@dataclass(frozen=True, slots=True)
class Experiment:
    """An A/B experiment: each user is assigned one of ``variants`` with probability ``shares``
    (adding up to 1; unequal shares make a sample ratio mismatch when the analysis expects an
    even split), and every query of the user carries the variant as ``attributes[attribute]``.
    Prints as it is written on the command line (``exp-7:ranker:A=0.5,B=0.5``)."""

    id: str
    attribute: str
    variants: tuple[str, ...]
    shares: tuple[float, ...]

    def variant(self, user_id: str) -> str:
        """The variant of ``user_id``: the first 8 bytes of SHA-256 of ``id:user_id``, as a
        fraction of 2^64, against the cumulative shares in the order given. The same user
        gets the same variant in every run; two experiments assign independently."""
        digest = hashlib.sha256(f"{self.id}:{user_id}".encode()).digest()
        point = int.from_bytes(digest[:8], "big") / 2**64 * sum(self.shares)
        total = 0.0
        for name, share in zip(self.variants, self.shares, strict=True):
            total += share
            if point < total:
                return name
        return self.variants[-1]  # not reached: point < sum(shares), the last total

    def mix(self) -> Mix:
        """The experiment as a dimension of the slices (for ``--regression-slice``)."""
        return Mix(self.attribute, self.variants, self.shares)

    def __str__(self) -> str:
        split = ",".join(f"{v}={w:g}" for v, w in zip(self.variants, self.shares, strict=True))
        return f"{self.id}:{self.attribute}:{split}"


def parse_experiment(text: str) -> Experiment:
    """``id:attribute:variant=share,...`` as an experiment; ``ValueError`` saying what is wrong
    and what is accepted. At least two variants, each named once, shares >= 0 adding up to 1."""
    parts = [part.strip() for part in text.split(":", 2)]
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"{text.strip()!r} is not id:attribute:split; expected "
                         f"{EXPERIMENT_SYNTAX}")
    identifier, attribute, split = parts
    variants: list[str] = []
    shares: list[float] = []
    for item in split.split(","):
        name, equals, share = (part.strip() for part in item.partition("="))
        if not equals or not name:
            raise ValueError(f"{item.strip()!r} is not variant=share; expected "
                             f"{EXPERIMENT_SYNTAX}")
        number = _number(share)
        if not isfinite(number) or not 0 <= number <= 1:
            raise ValueError(f"the share of {name!r} ({share!r}) is not a number from 0 to 1; "
                             f"expected {EXPERIMENT_SYNTAX}")
        if name in variants:
            raise ValueError(f"variant {name!r} is given twice; expected {EXPERIMENT_SYNTAX}")
        variants.append(name)
        shares.append(number)
    if len(variants) < 2:
        raise ValueError(f"one variant ({variants[0]!r}); expected {EXPERIMENT_SYNTAX}")
    if abs(sum(shares) - 1) > 1e-6:
        raise ValueError(f"the shares add up to {sum(shares):g}, not 1; expected "
                         f"{EXPERIMENT_SYNTAX}")
    return Experiment(identifier, attribute, tuple(variants), tuple(shares))


@dataclass(frozen=True, slots=True)
class Effect:
    """The true effect of a variant of an experiment: every query with results of its users
    is clicked with probability ``p + ctr`` instead of ``p``, its probability under the click
    model (``click_probability``). Prints as written (``exp-7:B:ctr=+0.02``)."""

    experiment: str
    variant: str
    ctr: float

    def __str__(self) -> str:
        return f"{self.experiment}:{self.variant}:ctr={self.ctr:+g}"


def ctr_effect_range() -> tuple[float, float]:
    """The CTR changes that are exact for every query: no list's click probability falls
    below 0 or rises above 1 (a list of irrelevant results is clicked the least, one of
    perfect results the most)."""
    least = click_probability([ATTRACTIVENESS[0]] * RESULTS_PER_PAGE)
    most = click_probability([ATTRACTIVENESS[-1]] * RESULTS_PER_PAGE)
    return -least, 1 - most


def parse_effect(text: str, experiments: Sequence[Experiment]) -> Effect:
    """``[experiment:]variant:ctr=change`` as the effect of a variant of one of
    ``experiments`` (the experiment may be left out when one has the variant); ``ValueError``
    for anything else, or a change outside ``ctr_effect_range``."""
    head, colon, change = text.strip().rpartition(":")
    measure, equals, size = (part.strip() for part in change.partition("="))
    names = [part.strip() for part in head.split(":")]
    if not colon or not equals or not all(names) or len(names) > 2:
        raise ValueError(f"{text.strip()!r} is not variant:ctr=change; expected {EFFECT_SYNTAX}")
    if measure not in EFFECT_MEASURES:
        raise ValueError(f"no effect on {measure!r} (effects: {', '.join(EFFECT_MEASURES)})")
    variant = names[-1]
    having = [e for e in experiments if variant in e.variants
              and (len(names) == 1 or e.id == names[0])]
    if len(having) != 1:
        known = "; ".join(str(e) for e in experiments) or "none: give --experiment"
        which = "no experiment" if not having else "more than one experiment"
        raise ValueError(f"{which} with variant {':'.join(names)!r} (the experiments: {known})")
    number = _number(size)
    low, high = ctr_effect_range()
    if not low <= number <= high:
        raise ValueError(f"the change {size!r} is not a number from {low:.3f} to {high:.3f} "
                         "(beyond, some lists' click probability would leave 0..1)")
    return Effect(having[0].id, variant, number)


@dataclass(frozen=True, slots=True)
class Interleaving:
    """Team-draft interleaving of two rankers, named ``rankers`` (the first: the world's
    ranker, the one the other traffic is served; the second: another of the same quality),
    and the true preference: ``delta``, the Δ of the first over the second (negative: the
    second is preferred), which the clicks have in expectation in every impression."""

    rankers: tuple[str, str]
    delta: float = 0.0


def parse_interleaving(text: str) -> Interleaving:
    """``first:second`` as an interleaving of the two rankers so named, without preference;
    ``ValueError`` saying what is wrong and what is accepted."""
    names = tuple(name.strip() for name in text.split(":"))
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise ValueError(f"{text.strip()!r} is not two rankers; expected {INTERLEAVE_SYNTAX}")
    return Interleaving((names[0], names[1]))


def parse_preference(text: str, interleaving: Interleaving) -> Interleaving:
    """``ranker=size`` as the preference of ``interleaving``: the Δ of the named ranker over
    the other is ``size``; ``ValueError`` saying what is wrong and what is accepted."""
    first, second = interleaving.rankers
    name, equals, size = (part.strip() for part in text.partition("="))
    if not equals or name not in (first, second):
        raise ValueError(f"{text.strip()!r} does not name {first!r} or {second!r}; expected "
                         f"{PREFERENCE_SYNTAX}")
    number = _number(size)
    if not 0 <= number < 0.5:
        raise ValueError(f"the size {size!r} is not a number from 0 to below 0.5; expected "
                         f"{PREFERENCE_SYNTAX}")
    return Interleaving(interleaving.rankers, number if name == first else -number)


def _number(text: str) -> float:
    """``text`` as a float, NaN when it is none."""
    try:
        return float(text)
    except ValueError:
        return float("nan")


@dataclass(frozen=True, slots=True)
class SimQuery:
    text: str
    klass: str
    zero_result: bool
    relevance: dict[str, int]
    ranking: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Regression:
    """From ``start`` (epoch seconds) until ``end`` (None: the end of the traffic), results
    of class ``klass`` (None: of every class) are shuffled in the sessions that have every
    one of ``attributes`` (``(("platform", "ios"),)``; none: in every session). A regression
    confined to a slice leaves judged samples alone: they belong to no slice."""

    klass: str | None
    start: float
    end: float | None = None
    attributes: tuple[tuple[str, str], ...] = ()

    def active(self, klass: str, time: float,
               attributes: Mapping[str, str] | None = None) -> bool:
        """Whether a query of ``klass`` at ``time`` in a session of ``attributes`` (None: a
        judged sample's query, which has no slice) is served shuffled results."""
        if self.klass is not None and klass != self.klass:
            return False
        if self.attributes and (attributes is None or any(
            attributes.get(dimension) != value for dimension, value in self.attributes
        )):
            return False
        return time >= self.start and (self.end is None or time < self.end)


@dataclass
class World:
    """The hidden truth behind generated traffic."""

    seed: int
    queries: list[SimQuery] = field(default_factory=list)
    cumulative: list[float] = field(default_factory=list)

    @classmethod
    def build(cls, seed: int, size: int = 2000, zipf: float = 1.07) -> World:
        rng = random.Random(seed)
        world = cls(seed)
        names = list(CLASS_PROFILES)
        shares = [CLASS_PROFILES[n][0] for n in names]
        total = 0.0
        for i in range(size):
            klass = rng.choices(names, shares)[0]
            _, (lo, hi), zero_p, profile, _ = CLASS_PROFILES[klass]
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
            text = f"{text} {i}" if rng.random() < 0.5 else f"{i} {text}"
            docs = [f"d{i}-{j}" for j in range(POOL)]
            relevance = {doc: _grade(rng, profile, j) for j, doc in enumerate(docs)}
            # a decent ranker: relevance plus noise
            ranking = sorted(docs, key=lambda d: -(relevance[d] + rng.gauss(0, 0.9)))
            world.queries.append(SimQuery(
                text, klass, rng.random() < zero_p, relevance,
                tuple(ranking[:RESULTS_PER_PAGE]),
            ))
            total += 1.0 / (i + 1) ** zipf
            world.cumulative.append(total)
        return world

    def pick(self, rng: random.Random) -> SimQuery:
        return self.queries[bisect_left(self.cumulative, rng.random() * self.cumulative[-1])]

    def served(self, query: SimQuery, time: float, regressions: Sequence[Regression],
               rng: random.Random, attributes: Mapping[str, str] | None = None,
               ) -> tuple[str, ...]:
        """The results served for ``query`` at ``time`` in a session of ``attributes``
        (None: a judged sample's), shuffled while one of ``regressions`` is active."""
        if query.zero_result:
            return ()
        if any(r.active(query.klass, time, attributes) for r in regressions):
            pool = list(query.relevance)
            return tuple(rng.sample(pool, RESULTS_PER_PAGE))
        return query.ranking


def _grade(rng: random.Random, profile: str, position: int) -> int:
    if profile == "single":
        return 3 if position == 0 else rng.choices((0, 1), (0.85, 0.15))[0]
    if profile == "sparse":
        return rng.choices((0, 1, 2, 3), (0.8, 0.1, 0.06, 0.04))[0]
    return rng.choices((0, 1, 2, 3), (0.5, 0.25, 0.15, 0.1))[0]


def click_probability(attractiveness: Sequence[float]) -> float:
    """The probability that the cascade clicks at least one result of a list whose results
    are clicked, once examined, with probabilities ``attractiveness`` (in order):
    ``sum_k EXAMINATION[k] * a_k * prod_{j<k} EXAMINATION[j] * (1 - a_j)``. Satisfaction does
    not enter: it ends the scan after a click."""
    return sum(first_click(attractiveness))


def first_click(attractiveness: Sequence[float]) -> list[float]:
    """The probability that the cascade's first click is at each position of the list."""
    found = []
    unclicked = 1.0
    for examined, attractive in zip(EXAMINATION, attractiveness, strict=False):
        found.append(unclicked * examined * attractive)
        unclicked *= examined * (1 - attractive)
    return found


def examination_probabilities(grades: Sequence[int]) -> list[float]:
    """The probability that the cascade examines the result at each position of a list whose
    results have hidden ``grades`` (in order), for a query without a true effect or an
    interleaving preference: position 1 is examined with ``EXAMINATION[0]``, and position
    ``k + 1`` when ``k`` was, its result did not both attract and satisfy, and the scan goes
    on (``EXAMINATION[k]``). The truth that the position bias of a click model estimates."""
    found = []
    reached = 1.0
    for examined, grade in zip(EXAMINATION, grades, strict=False):
        reached *= examined
        found.append(reached)
        reached *= 1 - ATTRACTIVENESS[grade] * SATISFACTION[grade]
    return found


def true_grades(world: World) -> dict[tuple[str, str], int]:
    """The hidden grade of every (query text, document) pair of ``world``: what clicks are
    drawn from (``ATTRACTIVENESS``, ``SATISFACTION``) and judges label (``JUDGE_NOISE``)."""
    return {(query.text, doc): grade for query in world.queries
            for doc, grade in query.relevance.items()}


def team_outcomes(attractiveness: Sequence[float], satisfaction: Sequence[float],
                  teams: Sequence[int]) -> tuple[float, float, float]:
    """The probabilities that the cascade, on a list whose results belong to ``teams`` (0:
    the first ranker, 1: the second), clicks more results of the first team (it wins), more of
    the second, or as many of each and at least one (a tie). The rest: no click."""
    size = min(len(teams), len(EXAMINATION))
    # by the clicks of team 0 less those of team 1 (index: that + size), at least one click:
    scanning = [0.0] * (2 * size + 1)  # the probability of still scanning
    ended = [0.0] * (2 * size + 1)  # of having stopped
    unclicked = 1.0  # still scanning, no click yet
    for position in range(size):
        examined, attractive = EXAMINATION[position], attractiveness[position]
        satisfying, step = satisfaction[position], 1 if teams[position] == 0 else -1
        moved = [0.0] * (2 * size + 1)
        for index in range(size - position, size + position + 1):
            probability = scanning[index]
            if probability:
                ended[index] += probability * (1 - examined)
                moved[index] += probability * examined * (1 - attractive)
                clicked = probability * examined * attractive
                ended[index + step] += clicked * satisfying
                moved[index + step] += clicked * (1 - satisfying)
        clicked = unclicked * examined * attractive
        ended[size + step] += clicked * satisfying
        moved[size + step] += clicked * (1 - satisfying)
        unclicked *= examined * (1 - attractive)
        scanning = moved
    for index, probability in enumerate(scanning):
        ended[index] += probability
    return sum(ended[size + 1:]), sum(ended[:size]), ended[size]


def team_draft(first: Sequence[str], second: Sequence[str], coin: Callable[[], bool],
               length: int = RESULTS_PER_PAGE) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The team-draft interleaving of two rankings (Radlinski, Kurup and Joachims, CIKM
    2008): the team with fewer picks, or on a tie the one ``coin`` names (True: the first),
    adds its best result not yet in the list. The results, and each one's team (0: the
    first ranking's, 1: the second's). A team out of results leaves the picks to the other."""
    rankings = (first, second)
    shown: list[str] = []
    teams: list[int] = []
    taken: set[str] = set()
    picks = [0, 0]
    cursors = [0, 0]
    while len(shown) < length:
        chosen = 0 if picks[0] < picks[1] or (picks[0] == picks[1] and coin()) else 1
        for team in (chosen, 1 - chosen):
            ranking = rankings[team]
            while cursors[team] < len(ranking) and ranking[cursors[team]] in taken:
                cursors[team] += 1
            if cursors[team] < len(ranking):
                break
        else:
            break  # both out of results
        doc = rankings[team][cursors[team]]
        shown.append(doc)
        teams.append(team)
        taken.add(doc)
        picks[team] += 1
    return tuple(shown), tuple(teams)


class Users:
    """Who the sessions belong to. A session is the next one of the user longest due back,
    if one is due, else the first of a new user (``u<ids><number>``); after each session its
    user comes back with probability 1 - 1 / ``USER_SESSIONS`` (a geometric number of
    sessions), ``RETURN_AFTER`` later, keeping the slice of their first session. Users who
    would come back after the end of the traffic do not, so short runs have fewer sessions
    per user."""

    def __init__(self, rng: random.Random, ids: str) -> None:
        self.rng = rng
        self.ids = ids
        self.due: list[tuple[float, str, dict[str, str]]] = []  # a user is due once at most
        self.numbers = itertools.count(1)

    def visit(self, time: float, attributes: dict[str, str]) -> tuple[str, dict[str, str]]:
        """The user of a session starting at ``time``, and the user's slice (``attributes``,
        the session's own draw, for a new user)."""
        if self.due and self.due[0][0] <= time:
            _, user, attributes = heapq.heappop(self.due)
        else:
            user = f"u{self.ids}{next(self.numbers):08d}"
        if self.rng.random() >= 1 / USER_SESSIONS:
            least, mean = RETURN_AFTER
            back = time + least + self.rng.expovariate(1 / (mean - least))
            heapq.heappush(self.due, (back, user, attributes))
        return user, attributes


class Interleaver:
    """The interleaved result lists of ``interleaving`` and the clicks' preference.

    The first ranker serves what the other traffic is served (the world's ranking, shuffled
    under a regression); the second ranks the same pool by relevance plus a noise of its own,
    fixed per query (a ranker as good). The preference: a query whose expected outcome over
    the coin flips of the team draft and the clicks favours the first ranker by more than
    ``delta`` (``E[wins_A - wins_B] > 2 delta E[clicked]``) has some of its users ignore the
    first ranker's results (they click only the second's), in the share that makes the two
    equal; and the other way round. So every query has the preference ``delta`` in
    expectation, whatever the two lists."""

    def __init__(self, world: World, interleaving: Interleaving, rng: random.Random) -> None:
        self.world = world
        self.interleaving = interleaving
        self.rng = rng
        self.seconds: dict[str, tuple[str, ...]] = {}
        self.plans: dict[str, tuple[int, float]] = {}

    def interleave(self, query: SimQuery, first: tuple[str, ...],
                   ) -> tuple[tuple[str, ...], tuple[int, ...], int | None]:
        """The team-draft interleaving of ``first`` (the first ranker's list) and the second
        ranker's list for ``query``, and the team whose results this impression's user does
        not click, if any; nothing for a query without results."""
        if not first:
            return (), (), None
        second = self.second(query)
        plan = self.plans.get(query.text) if first == query.ranking else None
        if plan is None:
            plan = self.plan(query, first, second)
            if first == query.ranking:  # not shuffled by a regression: the same every time
                self.plans[query.text] = plan
        results, teams = team_draft(first, second, lambda: self.rng.random() < 0.5)
        ignored, share = plan
        return results, teams, ignored if self.rng.random() < share else None

    def second(self, query: SimQuery) -> tuple[str, ...]:
        """The second ranker's list for ``query``: relevance plus a noise of its own."""
        found = self.seconds.get(query.text)
        if found is None:
            noise = random.Random(f"second ranker {self.world.seed} {query.text}")
            ranked = sorted(query.relevance,
                            key=lambda doc: -(query.relevance[doc] + noise.gauss(0, 0.9)))
            found = self.seconds[query.text] = tuple(ranked[:RESULTS_PER_PAGE])
        return found

    def plan(self, query: SimQuery, first: Sequence[str], second: Sequence[str],
             ) -> tuple[int, float]:
        """The team whose results some users ignore, and the share of them: the expectations
        are exact, over the 2^5 equally likely coin flips of the team draft."""
        delta = self.interleaving.delta
        excess = 0.0
        kept = [0.0, 0.0]  # by the team ignored: the click probability of the other's alone
        coin_flips = list(itertools.product((True, False), repeat=(RESULTS_PER_PAGE + 1) // 2))
        for flips in coin_flips:
            results, teams = team_draft(first, second, iter(flips).__next__)
            attractiveness = [ATTRACTIVENESS[query.relevance[doc]] for doc in results]
            satisfaction = [SATISFACTION[query.relevance[doc]] for doc in results]
            wins, losses, ties = team_outcomes(attractiveness, satisfaction, teams)
            excess += (wins - losses - 2 * delta * (wins + losses + ties)) / len(coin_flips)
            for ignored in (0, 1):
                kept[ignored] += click_probability([
                    0.0 if team == ignored else attractive
                    for attractive, team in zip(attractiveness, teams, strict=True)
                ]) / len(coin_flips)
        ignored = 0 if excess > 0 else 1
        # a clicked impression of a user who ignores a team is a win of the other: it moves
        # wins - losses - 2 delta clicked by 1 + 2 delta (A ignored) or 1 - 2 delta (B ignored)
        pull = kept[ignored] * (1 + 2 * delta if ignored == 0 else 1 - 2 * delta)
        return ignored, abs(excess) / (abs(excess) + pull)


@dataclass
class Traffic:
    """Parameters of a generated stream."""

    seed: int = 1
    start: float = 1_790_000_000.0  # epoch seconds
    sessions_per_second: float = 20.0
    duration: float = 3600.0
    malformed_rate: float = 0.001
    duplicate_rate: float = 0.001
    regression: Regression | None = None
    more_regressions: tuple[Regression, ...] = ()
    """Regressions besides ``regression`` (the demo's: one class, and one slice)."""
    mixes: tuple[Mix, ...] = DEFAULT_MIXES
    """The slices' dimensions and how their values are drawn per session; none: query
    events carry no ``attributes``."""
    judged_every: float = 0.0  # seconds of event time between judged samples; 0: none
    judged_queries: int = 200
    qrels: bool = False  # start with qrels messages for the judged queries (live evaluation)
    tag: str | None = None
    """What the event, query and session ids start with; None: the seed and the start
    (``run_tag``), so that two runs into one daemon share no id. ``""``: the ids of the
    first releases, which the committed checkpoints of ``tests/data`` were written from."""
    users: bool = False
    """Sessions belong to users (``Users``) and every event of a session carries ``user_id``,
    as with an experiment; False and no experiment: events carry no ``user_id``."""
    experiments: tuple[Experiment, ...] = ()
    """Each user's variant of each experiment, in ``attributes`` (winning over a mix of the
    same dimension)."""
    effects: tuple[Effect, ...] = ()
    """True effects of variants of ``experiments``: a user's query is clicked with the sum of
    the changes of the user's variants added to its probability (kept within 0..1)."""
    interleaving: Interleaving | None = None
    """Result lists interleaved from two rankers, each result's ranker in ``result_teams``."""

    @property
    def regressions(self) -> tuple[Regression, ...]:
        return (*((self.regression,) if self.regression is not None else ()),
                *self.more_regressions)

    def ctr_change(self, attributes: Mapping[str, str]) -> float:
        """The CTR change of the queries of a session of ``attributes``: the sum of the
        effects of its variants."""
        if not self.effects:
            return 0.0
        attribute = {experiment.id: experiment.attribute for experiment in self.experiments}
        return sum(effect.ctr for effect in self.effects
                   if attributes.get(attribute[effect.experiment]) == effect.variant)

    @property
    def ids(self) -> str:
        return run_tag(self.seed, self.start) if self.tag is None else self.tag


def run_tag(seed: int, start: float) -> str:
    """The ids' prefix of a run: its seed and start, in hexadecimal."""
    return f"{seed:x}.{int(start):x}-"


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Message(NamedTuple):
    """A generated message: its event time, its Kafka key, the JSON line, and whether it is
    judged (``judgment`` or ``qrels``: for the judgments topic) or a search-log event."""

    time: float
    key: str
    line: bytes
    judged: bool


def events(world: World, traffic: Traffic) -> Iterator[tuple[float, str, bytes]]:
    """(event time, session key, JSON line) in time order; the key is the Kafka message key."""
    for message in messages(world, traffic):
        yield message.time, message.key, message.line


def messages(world: World, traffic: Traffic) -> Iterator[Message]:
    """The generated messages in time order, each saying which topic it is for."""
    rng = random.Random(traffic.seed)
    slices = random.Random(f"slices {traffic.seed}")  # its own stream: see the module's doc
    users = (Users(random.Random(f"users {traffic.seed}"), traffic.ids)
             if traffic.users or traffic.experiments else None)
    variation = _Variation(
        random.Random(f"effects {traffic.seed}"),
        None if traffic.interleaving is None else Interleaver(
            world, traffic.interleaving, random.Random(f"interleaving {traffic.seed}")),
    )
    counter = itertools.count()
    heap: list[tuple[float, int, str, bytes]] = []
    next_session = traffic.start
    next_sample = traffic.start + traffic.judged_every if traffic.judged_every else float("inf")
    end = traffic.start + traffic.duration
    sample_number = 0
    tag = traffic.ids
    # the last session message and its key: a duplicate is keyed like its original, so that
    # in Kafka it lands in the original's partition, where the consumer recognises it
    previous: tuple[str, bytes] | None = None
    if traffic.qrels:
        for index in _judged_set(world, traffic):
            query = world.queries[index]
            yield Message(traffic.start, f"qrels-{index}", _dump({
                "type": "qrels", "timestamp": rfc3339(traffic.start), "query_text": query.text,
                "query_class": query.klass, "labels": query.relevance,
            }), True)
    while True:
        if next_session < end and (not heap or next_session <= heap[0][0]):
            session_id = f"s{tag}{next(counter):09d}-{traffic.seed}"
            attributes = {mix.dimension: mix.draw(slices) for mix in traffic.mixes}
            user = None
            if users is not None:
                user, attributes = users.visit(next_session, attributes)
                attributes = attributes | {experiment.attribute: experiment.variant(user)
                                           for experiment in traffic.experiments}
            visit = _Visit(session_id, user, attributes, traffic.ctr_change(attributes))
            for item in _session(world, traffic, rng, visit, next_session, counter, variation):
                heapq.heappush(heap, item)
            next_session += rng.expovariate(traffic.sessions_per_second)
            continue
        if not heap:
            return
        time, _, key, line = heapq.heappop(heap)
        while next_sample <= time:
            sample_number += 1
            for judged in _judged_sample(world, traffic, rng, sample_number, next_sample):
                yield Message(next_sample, f"sample-{sample_number}", judged, True)
            next_sample += traffic.judged_every
        yield Message(time, key, line, False)
        if rng.random() < traffic.duplicate_rate and previous is not None:
            yield Message(time, *previous, False)
        if rng.random() < traffic.malformed_rate:
            yield Message(time, key, _malformed(rng, line), False)
        previous = key, line


class _Visit(NamedTuple):
    """A session as the experiments see it: its id, its user (None: traffic without users),
    its slice, and the change of the click probability of its queries (``Traffic.ctr_change``)."""

    session_id: str
    user: str | None
    attributes: dict[str, str]
    ctr_change: float


class _Variation(NamedTuple):
    """The random stream the effects draw from, and the interleaver (None: no interleaving)."""

    effects: random.Random
    interleaver: Interleaver | None


def _session(
    world: World, traffic: Traffic, rng: random.Random, visit: _Visit, start: float,
    counter: Iterator[int], variation: _Variation,
) -> Iterator[tuple[float, int, str, bytes]]:
    time, ids = start, traffic.ids
    session_id, attributes = visit.session_id, visit.attributes
    interleaver = variation.interleaver
    query = world.pick(rng)
    for _ in range(1 + min(int(rng.expovariate(0.8)), 6)):
        query_id = f"q{ids}{next(counter):010d}"
        results = world.served(query, time, traffic.regressions, rng, attributes)
        teams: tuple[int, ...] = ()
        ignored = None
        if interleaver is not None:
            results, teams, ignored = interleaver.interleave(query, results)
        event: dict[str, object] = {
            "type": "query", "event_id": f"e{ids}{next(counter):010d}", "timestamp": rfc3339(time),
            "session_id": session_id, "query_id": query_id, "query_text": query.text,
            "result_ids": list(results),
        }
        if interleaver is not None:
            event["result_teams"] = [interleaver.interleaving.rankers[team] for team in teams]
        event |= {
            "result_count": len(results) * 37 if results else 0, "query_class": query.klass,
            "latency_ms": round(rng.lognormvariate(3.5, 0.6), 1),
        }
        if visit.user is not None:
            event["user_id"] = visit.user
        if attributes:
            event["attributes"] = attributes  # last: see _malformed
        yield time, next(counter), session_id, _dump(event)
        attractiveness = [ATTRACTIVENESS[query.relevance[doc]] for doc in results]
        if ignored is not None:  # the interleaving's preference: see Interleaver
            attractiveness = [0.0 if team == ignored else attractive
                              for attractive, team in zip(attractiveness, teams, strict=True)]
        # a true effect: a query whose click probability is p gets p + change (Effect)
        change = visit.ctr_change if results else 0.0
        scanned = not (change < 0 and variation.effects.random()
                       < -change / click_probability(attractiveness))
        satisfied = clicked = False
        click_time = time
        for position, doc in enumerate(results if scanned else (), start=1):
            if rng.random() > EXAMINATION[position - 1]:
                break  # stops examining
            if rng.random() >= attractiveness[position - 1]:
                continue
            clicked = True
            found, click_time, satisfied = _click(rng, traffic, counter, visit, query,
                                                  query_id, position, doc, click_time)
            yield from found
            if satisfied:
                break
        if change > 0 and not clicked and (
            variation.effects.random() < change / (1 - click_probability(attractiveness))
        ):
            position = variation.effects.choices(range(1, len(results) + 1),
                                                 first_click(attractiveness))[0]
            found, click_time, satisfied = _click(rng, traffic, counter, visit, query,
                                                  query_id, position, results[position - 1],
                                                  click_time)
            yield from found
        if satisfied or rng.random() < 0.3:
            return
        # reformulate: usually a query of the same class, soon after
        time = max(time, click_time) + rng.uniform(3.0, 50.0)
        same = [world.pick(rng) for _ in range(5)]
        query = next((q for q in same if q.klass == query.klass), same[0])


def _click(
    rng: random.Random, traffic: Traffic, counter: Iterator[int], visit: _Visit,
    query: SimQuery, query_id: str, position: int, doc: str, time: float,
) -> tuple[list[tuple[float, int, str, bytes]], float, bool]:
    """A click on ``doc`` at ``position`` a few seconds after ``time``, and a conversion when
    it satisfies: their messages, the time the user is back on the results, and whether the
    click satisfied."""
    ids, grade = traffic.ids, query.relevance[doc]
    time += rng.uniform(2.0, 15.0)
    satisfied = rng.random() < SATISFACTION[grade]
    dwell = rng.uniform(30.0, 240.0) if satisfied else rng.uniform(2.0, 25.0)
    click: dict[str, object] = {
        "type": "click", "event_id": f"e{ids}{next(counter):010d}",
        "timestamp": rfc3339(time), "session_id": visit.session_id,
        "query_id": query_id, "doc_id": doc, "position": position,
        "dwell_ms": round(dwell * 1000),
    }
    if visit.user is not None:
        click["user_id"] = visit.user
    found = [(time, next(counter), visit.session_id, _dump(click))]
    time += dwell
    if satisfied and rng.random() < CLASS_PROFILES[query.klass][4]:
        conversion: dict[str, object] = {
            "type": "conversion", "event_id": f"e{ids}{next(counter):010d}",
            "timestamp": rfc3339(time), "session_id": visit.session_id,
            "query_id": query_id, "doc_id": doc, "value": round(rng.uniform(5, 200), 2),
        }
        if visit.user is not None:
            conversion["user_id"] = visit.user
        found.append((time, next(counter), visit.session_id, _dump(conversion)))
    return found, time, satisfied


def _judged_sample(
    world: World, traffic: Traffic, rng: random.Random, number: int, time: float
) -> Iterator[bytes]:
    """A fixed set of queries judged again: served rankings, labels with judge noise."""
    ids = traffic.ids
    for index in _judged_set(world, traffic):
        query = world.queries[index]
        ranking = world.served(query, time, traffic.regressions, rng)
        judged = sorted(set(ranking) | set(rng.sample(list(query.relevance), 10)))
        labels = {doc: _judge(rng, query.relevance[doc]) for doc in judged}
        yield _dump({
            "type": "judgment", "sample_id": f"sample-{number}", "timestamp": rfc3339(time),
            "query_id": f"j{ids}{number}-{index}", "query_text": query.text,
            "query_class": query.klass, "ranking": list(ranking), "labels": labels,
        })


def _judged_set(world: World, traffic: Traffic) -> list[int]:
    """The fixed set of queries the judges label in every sample: the most popular half,
    then a random rest (head queries matter most, tail ones keep the set honest)."""
    size = min(traffic.judged_queries, len(world.queries))
    head = list(range(size // 2))
    rest = random.Random(traffic.seed * 7919).sample(range(size // 2, len(world.queries)),
                                                    size - len(head))
    return sorted(head + rest)


def _judge(rng: random.Random, grade: int) -> int:
    """A judge who disagrees with the hidden truth by one grade now and then."""
    if rng.random() < JUDGE_NOISE:
        return min(3, max(0, grade + rng.choice((-1, 1))))
    return grade


def _malformed(rng: random.Random, line: bytes) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:  # truncated
        # the cut is drawn within the line as it was before events carried attributes and
        # user ids: the same draw, so that the messages after it stay as they were
        return line[: rng.randrange(1, max(2, _unsliced_length(line) - 1))]
    if kind == 1:
        return line.replace(b'"type":"', b'"type":"bogus_', 1)  # unknown type
    if kind == 2:
        return line.replace(b'Z"', b'"', 1)  # naive timestamp
    if kind == 3:
        return line.replace(b'"session_id"', b'"session"', 1)  # missing field
    return b"\x00\xff garbage"


def _unsliced_length(line: bytes) -> int:
    """The length of ``line`` without its ``attributes`` and its ``user_id``, its last keys
    when it has them (in this order)."""
    end = len(line)
    for key in (ATTRIBUTES_KEY, USER_KEY):
        at = line.rfind(key, 0, end)
        end = end if at < 0 else at
    return end if end == len(line) else end + 1


def _dump(event: dict[str, object]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()
