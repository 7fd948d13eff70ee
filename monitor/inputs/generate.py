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
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
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
ATTRIBUTES_KEY = b',"attributes":{'  # the last key of a query event that has a slice


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

    @property
    def regressions(self) -> tuple[Regression, ...]:
        return (*((self.regression,) if self.regression is not None else ()),
                *self.more_regressions)

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
            for item in _session(world, traffic, rng, session_id, attributes, next_session,
                                 counter):
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


def _session(
    world: World, traffic: Traffic, rng: random.Random, session_id: str,
    attributes: dict[str, str], start: float, counter: Iterator[int],
) -> Iterator[tuple[float, int, str, bytes]]:
    time, ids = start, traffic.ids
    query = world.pick(rng)
    for _ in range(1 + min(int(rng.expovariate(0.8)), 6)):
        query_id = f"q{ids}{next(counter):010d}"
        results = world.served(query, time, traffic.regressions, rng, attributes)
        event: dict[str, object] = {
            "type": "query", "event_id": f"e{ids}{next(counter):010d}", "timestamp": rfc3339(time),
            "session_id": session_id, "query_id": query_id, "query_text": query.text,
            "result_ids": list(results), "result_count": len(results) * 37 if results else 0,
            "query_class": query.klass, "latency_ms": round(rng.lognormvariate(3.5, 0.6), 1),
        }
        if attributes:
            event["attributes"] = attributes  # last: see _malformed
        yield time, next(counter), session_id, _dump(event)
        satisfied = False
        click_time = time
        for position, doc in enumerate(results, start=1):
            if rng.random() > 0.95 ** (position - 1) * (0.9 if position == 1 else 0.8):
                break  # stops examining
            grade = query.relevance[doc]
            if rng.random() >= ATTRACTIVENESS[grade]:
                continue
            click_time += rng.uniform(2.0, 15.0)
            satisfied = rng.random() < SATISFACTION[grade]
            dwell = rng.uniform(30.0, 240.0) if satisfied else rng.uniform(2.0, 25.0)
            click = {
                "type": "click", "event_id": f"e{ids}{next(counter):010d}",
                "timestamp": rfc3339(click_time), "session_id": session_id,
                "query_id": query_id, "doc_id": doc, "position": position,
                "dwell_ms": round(dwell * 1000),
            }
            yield click_time, next(counter), session_id, _dump(click)
            click_time += dwell
            if satisfied:
                if rng.random() < CLASS_PROFILES[query.klass][4]:
                    conversion = {
                        "type": "conversion", "event_id": f"e{ids}{next(counter):010d}",
                        "timestamp": rfc3339(click_time), "session_id": session_id,
                        "query_id": query_id, "doc_id": doc, "value": round(rng.uniform(5, 200), 2),
                    }
                    yield click_time, next(counter), session_id, _dump(conversion)
                break
        if satisfied or rng.random() < 0.3:
            return
        # reformulate: usually a query of the same class, soon after
        time = max(time, click_time) + rng.uniform(3.0, 50.0)
        same = [world.pick(rng) for _ in range(5)]
        query = next((q for q in same if q.klass == query.klass), same[0])


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
        # the cut is drawn within the line as it was before queries carried attributes: the
        # same draw, so that the messages after it stay as they were for a given seed
        return line[: rng.randrange(1, max(2, _unsliced_length(line) - 1))]
    if kind == 1:
        return line.replace(b'"type":"', b'"type":"bogus_', 1)  # unknown type
    if kind == 2:
        return line.replace(b'Z"', b'"', 1)  # naive timestamp
    if kind == 3:
        return line.replace(b'"session_id"', b'"session"', 1)  # missing field
    return b"\x00\xff garbage"


def _unsliced_length(line: bytes) -> int:
    """The length of ``line`` without its ``attributes``, its last key when it has them."""
    at = line.rfind(ATTRIBUTES_KEY)
    return len(line) if at < 0 else at + 1


def _dump(event: dict[str, object]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()
