"""The most frequent queries in bounded memory, and what may be shown of them.

``SpaceSaving`` is the Space-Saving summary (Metwally, Agrawal and El Abbadi, "Efficient
computation of frequent and top-k elements in data streams", ICDT 2005): ``capacity``
counters, each an overestimate with a known error, so that every key's true count lies in
``[count - error, count]`` and a key not kept has a true count of at most the smallest kept
count (0 while the summary is not full). Summaries of two streams merge into a summary of
both (Agarwal et al., "Mergeable Summaries", PODS 2012).

``HeavyQueries`` adds to each kept query a bounded set of hashed session ids, a lower bound on
its distinct sessions, so that a query is published only once ``min_sessions`` sessions issued
it (k-anonymity). ``Redactions`` removes e-mail addresses and long digit runs and cuts what is
left before anything is kept, in time bounded by the cut (linear in the text at worst). All of
it is pure: no clock, no I/O; state is an explicit snapshot.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from monitor.core.snapshots import require, same_lengths
from monitor.core.states import HeavyQueriesState, SpaceSavingState
from monitor.inputs.events import session_hash

INT64 = range(-(2**63), 2**63)


@dataclass(frozen=True, slots=True)
class Item:
    """One kept key: its true count lies in ``[count - error, count]``."""

    key: str
    count: int
    error: int

    @property
    def lower(self) -> int:
        return self.count - self.error


class SpaceSaving:
    """Space-Saving over string keys with integer weights.

    Counts live in a dict (a hit is one dict update); a min-heap of ``(count, key)`` with
    lazy repair finds the key to evict: heap entries may be stale, but counts only grow, so a
    stale entry is an underestimate and is re-pushed with its current count when it reaches
    the top. The heap holds exactly one entry per kept key, so memory is ``O(capacity)``.
    Ties in count are broken by key, so the summary is a function of the stream alone.
    """

    __slots__ = ("_counts", "_errors", "_heap", "capacity")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity}")
        self.capacity = capacity
        self._counts: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, key: object) -> bool:
        return key in self._counts

    def add(self, key: str, weight: int = 1) -> str | None:
        """Count ``weight`` (>= 1) occurrences of ``key``; returns the key evicted, if any."""
        if weight < 1:
            raise ValueError(f"weight must be at least 1, not {weight}")
        counts = self._counts
        count = counts.get(key)
        if count is not None:
            counts[key] = count + weight
            return None
        if len(counts) < self.capacity:
            counts[key] = weight
            self._errors[key] = 0
            heapq.heappush(self._heap, (weight, key))
            return None
        minimum = self._minimum()
        victim = self._heap[0][1]
        del counts[victim]
        del self._errors[victim]
        counts[key] = minimum + weight
        self._errors[key] = minimum
        heapq.heapreplace(self._heap, (minimum + weight, key))
        return victim

    def _minimum(self) -> int:
        """The smallest kept count, after bringing the heap's top up to date."""
        heap, counts = self._heap, self._counts
        while True:
            stored, key = heap[0]
            current = counts[key]
            if current == stored:
                return stored
            heapq.heapreplace(heap, (current, key))

    def unseen_bound(self) -> int:
        """An upper bound on the true count of any key not kept."""
        return self._minimum() if len(self._counts) >= self.capacity else 0

    def item(self, key: str) -> Item:
        """The bounds of any key, kept or not (a key not kept has lower bound 0)."""
        count = self._counts.get(key)
        if count is None:
            bound = self.unseen_bound()
            return Item(key, bound, bound)
        return Item(key, count, self._errors[key])

    def top(self, n: int) -> list[Item]:
        """The ``n`` kept keys of largest count, by count descending then key."""
        errors = self._errors
        ranked = sorted(self._counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(n, 0)]
        return [Item(key, count, errors[key]) for key, count in ranked]

    def guaranteed(self, n: int) -> list[Item]:
        """The items of ``top(n)`` that are certainly in the true top ``n``.

        An item qualifies when its lower bound exceeds the (n+1)-th largest upper bound over
        all keys (the (n+1)-th kept count, or ``unseen_bound()``): every key outside
        ``top(n)`` then has a smaller true count. This certifies membership; the order of two
        certified items is certain only where their own bounds do not overlap.
        """
        ranked = self.top(n + 1)
        threshold = ranked[n].count if len(ranked) > n else self.unseen_bound()
        return [item for item in ranked[:n] if item.lower > threshold]

    def merge(self, other: SpaceSaving) -> SpaceSaving:
        """A summary of both streams (neither input changes)."""
        if other.capacity != self.capacity:
            raise ValueError(f"cannot merge capacities {self.capacity} and {other.capacity}")
        merged = SpaceSaving(self.capacity)
        merged.restore(merge_states(self.snapshot(), other.snapshot(), self.capacity))
        return merged

    def snapshot(self) -> SpaceSavingState:
        items = self.top(len(self._counts))
        return SpaceSavingState(
            [i.key for i in items], [i.count for i in items], [i.error for i in items]
        )

    def restore(self, state: SpaceSavingState) -> None:
        check_state(state, self.capacity)
        self._counts = dict(zip(state.keys, state.counts, strict=True))
        self._errors = dict(zip(state.keys, state.errors, strict=True))
        self._heap = list(zip(state.counts, state.keys, strict=True))
        heapq.heapify(self._heap)


def check_state(state: SpaceSavingState, capacity: int) -> None:
    """Refuse a snapshot that no Space-Saving summary of ``capacity`` could have."""
    size = same_lengths("space-saving", state.keys, state.counts, state.errors)
    require(size <= capacity, f"space-saving: {size} keys, more than capacity {capacity}")
    require(len(set(state.keys)) == size, "space-saving: repeated keys")
    require(
        all(c in INT64 and e in INT64 for c, e in zip(state.counts, state.errors, strict=True)),
        "space-saving: a count or error outside 64 bits",
    )
    require(
        all(c >= 1 and c >= e >= 0 for c, e in zip(state.counts, state.errors, strict=True)),
        "space-saving: not every count >= 1 and count >= error >= 0",
    )
    # An error is the minimum count at the key's admission, and the minimum never falls.
    smallest = min(state.counts, default=0) if size == capacity else 0
    require(
        all(e <= smallest for e in state.errors),
        "space-saving: an error above the smallest count (or an error while not full)",
    )


def merge_states(
    first: SpaceSavingState, second: SpaceSavingState, capacity: int
) -> SpaceSavingState:
    """The summary of two streams from the summaries of each (Agarwal et al. 2012).

    Counts and errors of common keys add; a key kept on one side only may have occurred up to
    the other side's unseen bound times there, which is added to both its count and its error.
    The ``capacity`` largest counts are kept. Every merged count is at least the sum of the two
    unseen bounds, so a key kept by neither stays below the merged unseen bound.
    """
    check_state(first, capacity)
    check_state(second, capacity)

    def unseen(state: SpaceSavingState) -> int:
        return min(state.counts) if len(state.keys) == capacity else 0

    def kept(state: SpaceSavingState) -> dict[str, tuple[int, int]]:
        return dict(zip(state.keys, zip(state.counts, state.errors, strict=True), strict=True))

    kept_first, kept_second = kept(first), kept(second)
    missing_first = (unseen(first),) * 2
    missing_second = (unseen(second),) * 2
    counts: dict[str, int] = {}
    errors: dict[str, int] = {}
    for key in kept_first.keys() | kept_second.keys():
        count_first, error_first = kept_first.get(key, missing_first)
        count_second, error_second = kept_second.get(key, missing_second)
        counts[key] = count_first + count_second
        errors[key] = error_first + error_second
    ranked = sorted(counts, key=lambda k: (-counts[k], k))[:capacity]
    return SpaceSavingState(ranked, [counts[k] for k in ranked], [errors[k] for k in ranked])


class HeavyQueries:
    """Frequent queries with a k-anonymity test: ``distinct(query) >= min_sessions``.

    Per kept query a set of at most ``min_sessions`` hashed session ids is kept, started when
    the query is admitted and dropped when it is evicted. ``distinct(query)`` is therefore a
    lower bound: at most ``min(true distinct sessions, min_sessions)``; sessions before the
    query's admission are not counted, and a hash collision (CRC-32) can only merge two
    sessions into one. A query it certifies was issued by at least ``min_sessions`` sessions.
    Memory: ``capacity`` counters and at most ``capacity * min_sessions`` ints.
    """

    __slots__ = ("_sessions", "counts", "min_sessions")

    def __init__(self, capacity: int, min_sessions: int) -> None:
        if min_sessions < 1:
            raise ValueError(f"min_sessions must be at least 1, not {min_sessions}")
        self.counts = SpaceSaving(capacity)
        self.min_sessions = min_sessions
        self._sessions: dict[str, set[int]] = {}

    def add(self, query: str, session: str, weight: int = 1) -> None:
        self.add_sessions(query, weight, (session_hash(session),))

    def add_sessions(self, query: str, weight: int, sessions: Iterable[int]) -> str | None:
        """``weight`` occurrences of ``query`` by ``sessions`` (hashed) at once; returns the
        query evicted, if any."""
        evicted = self.counts.add(query, weight)
        if evicted is not None:
            del self._sessions[evicted]
        known = self._sessions.get(query)
        if known is None:
            known = self._sessions[query] = set()
        limit = self.min_sessions
        for session in sessions:
            if len(known) >= limit:
                break
            known.add(session)
        return evicted

    def distinct(self, query: str) -> int:
        """A lower bound on the distinct sessions that issued ``query``, at most min_sessions."""
        return len(self._sessions.get(query, ()))

    def anonymous_top(self, n: int) -> list[Item]:
        """The ``n`` largest counts among the queries issued by ``min_sessions`` sessions."""
        ranked = self.counts.top(len(self.counts))
        return [i for i in ranked if self.distinct(i.key) >= self.min_sessions][: max(n, 0)]

    def merge(self, other: HeavyQueries) -> HeavyQueries:
        """Both streams: counts as ``SpaceSaving.merge``, session sets united and capped."""
        if other.min_sessions != self.min_sessions:
            raise ValueError(
                f"cannot merge min_sessions {self.min_sessions} and {other.min_sessions}"
            )
        capacity = self.counts.capacity
        if other.counts.capacity != capacity:
            raise ValueError(f"cannot merge capacities {capacity} and {other.counts.capacity}")
        merged = HeavyQueries(capacity, self.min_sessions)
        merged.restore(merge_many([self.snapshot(), other.snapshot()], capacity,
                                  self.min_sessions))
        return merged

    def snapshot(self) -> HeavyQueriesState:
        counts = self.counts.snapshot()
        return HeavyQueriesState(counts, [sorted(self._sessions[k]) for k in counts.keys])

    def restore(self, state: HeavyQueriesState) -> None:
        counts = state.counts
        check_state(counts, self.counts.capacity)
        require(
            len(state.sessions) == len(counts.keys), "heavy queries: sessions not one per key"
        )
        for key, count, error, sessions in zip(
            counts.keys, counts.counts, counts.errors, state.sessions, strict=True
        ):
            # none: a query only searched by UBI records that name no user
            require(
                len(sessions) <= min(self.min_sessions, count - error)
                and len(set(sessions)) == len(sessions)
                and all(s in INT64 for s in sessions),
                f"heavy queries: sessions of {key!r} not 0..min(min_sessions, count - error)"
                " distinct 64-bit ints",
            )
        self.counts.restore(counts)
        self._sessions = {k: set(s) for k, s in zip(counts.keys, state.sessions, strict=True)}


def merge_many(
    states: Sequence[HeavyQueriesState], capacity: int, min_sessions: int
) -> HeavyQueriesState:
    """The summary of the streams of ``states`` at once (``merge_states`` over any number of
    summaries, ``HeavyQueries.merge``'s session sets), for summaries this process made: plain
    data in, plain data out, nothing re-checked.

    A key's count (error) is the sum over the summaries of its count (error) where kept and
    of that summary's unseen bound where not; the ``capacity`` largest are kept. Every merged
    count is at least the sum of the unseen bounds, so a key kept nowhere stays below the
    merged unseen bound, and every error stays below the smallest merged count."""
    unseen = [min(s.counts.counts) if len(s.counts.keys) == capacity else 0 for s in states]
    base = sum(unseen)
    counts: dict[str, int] = {}
    errors: dict[str, int] = {}
    sessions: dict[str, set[int]] = {}
    for state, bound in zip(states, unseen, strict=True):
        part = state.counts
        for key, count, error, hashed in zip(
            part.keys, part.counts, part.errors, state.sessions, strict=True
        ):
            # each key starts from every summary's unseen bound; a summary keeping it
            # replaces its bound by its count
            counts[key] = counts.get(key, base) + count - bound
            errors[key] = errors.get(key, base) + error - bound
            known = sessions.get(key)
            if known is None:
                sessions[key] = set(hashed)
            else:  # each holds at most min_sessions: the smallest of the union stay
                known.update(hashed)
    ranked = sorted(counts, key=lambda k: (-counts[k], k))[:capacity]
    return HeavyQueriesState(
        SpaceSavingState(ranked, [counts[k] for k in ranked], [errors[k] for k in ranked]),
        [_capped(sessions[k], min_sessions) for k in ranked],
    )


def _capped(sessions: Iterable[int], limit: int) -> list[int]:
    """At most ``limit`` of ``sessions``: the smallest, so that merging is deterministic."""
    return sorted(sessions)[:limit]


class Redaction(NamedTuple):
    """A pattern to find and what replaces each match."""

    pattern: re.Pattern[str]
    replacement: str


AT_SIGNS = "@\uff20\ufe6b"
"""``@``, the full-width at sign (U+FF20) and the small one (U+FE6B)."""
DOTS = ".\uff0e\u3002\uff61"
"""What separates the labels of a domain name (IDNA, RFC 3490 section 3.1): ``.``, the
full-width full stop (U+FF0E), the ideographic one (U+3002) and its half-width form
(U+FF61)."""
LOCAL_MARKS = "+-'%" + DOTS
"""What an address's local part may hold besides letters, digits and ``_``."""
DASHES = (
    "-\u058a\u05be\u1400\u1806\u2010\u2011\u2012\u2013\u2014\u2015\u2e17\u2e1a\u2e3a\u2e3b"
    "\u2e40\u2e5d\u301c\u3030\u30a0\ufe31\ufe32\ufe58\ufe63\uff0d\U00010ead\u2212"
)
"""Every dash of Unicode (category Pd: hyphens, en and em dashes, the full-width hyphen-minus...)
and the minus sign (U+2212)."""
SEPARATORS = DASHES + "_\uff3f/\uff0f.\uff0e()\uff08\uff09"
"""The marks written between the digit groups of one number: dashes, underscores, slashes,
dots and parentheses (and their full-width forms)."""

_LOCAL = rf"[\w{re.escape(LOCAL_MARKS)}]"
_DOMAIN = rf"(?>[\w-]+(?:[{re.escape(DOTS)}][\w-]+)+)"
_SEPARATOR = rf"\s{{0,3}}(?:[{re.escape(SEPARATORS)}]\s{{0,3}})?"

EMAIL = Redaction(
    re.compile(
        rf"(?<!{_LOCAL}){_LOCAL}++[{AT_SIGNS}]{_DOMAIN}(?:{_LOCAL}++[{AT_SIGNS}]{_DOMAIN})*+"
    ),
    "<email>",
)
"""An address: a local part, an at sign, two or more labels joined by dots. Found in time
linear in the text: an attempt starts only where a word of local-part characters starts (one
from each of its characters would read the rest of the word each time, quadratic in its
length), and no quantifier gives back what it took (possessive, atomic). An address that
starts where the previous one ends, inside the same word, is taken by the repeated tail; the
two go as one."""
DIGITS = Redaction(re.compile(rf"\d(?:{_SEPARATOR}\d){{5,}}+"), "<digits>")
"""Six or more digits, each two separated by nothing, up to three blanks, or one of
``SEPARATORS`` with up to three blanks either side: phone, card and account numbers; fewer
digits (``iphone 15``, ``2024 tax``, ``size 10 5``) stay. A digit is any decimal digit of
Unicode (``\\d``: ASCII, full-width, Arabic-Indic...), as people type numbers in their own
script. Linear: an attempt that fails has read at most five digits and what separates them."""
DEFAULT_REDACTIONS: tuple[Redaction, ...] = (EMAIL, DIGITS)

_SPLIT = re.compile(rf"[^\s\d{re.escape(SEPARATORS)}]\s")
"""Where a text may be cut for the built-in redactions: between a character that is not a
blank, a digit or one of ``SEPARATORS`` and a blank. No address holds a blank, and in a number
a blank follows a digit, a blank or a separator, so no match of either crosses the cut (nor
after the other has replaced its matches: ``<email>``, ``<digits>`` end in ``>``), and
redacting the two parts gives what redacting the whole gives."""


def redact(text: str, redactions: Sequence[Redaction] = DEFAULT_REDACTIONS) -> str:
    """``text`` with every match of each redaction replaced, in order."""
    for redaction in redactions:
        text = redaction.pattern.sub(redaction.replacement, text)
    return text


@dataclass(frozen=True)
class Redactions:
    """What is kept of a text: the built-in redactions (``EMAIL``, ``DIGITS``, whose matches
    never cross a ``_SPLIT``), then the patterns given, cut at ``length`` characters.

    The result is the whole text redacted and cut, but a long text is read only as far as
    needed (``built_in_prefix``), so a cut never shows part of an address or a number that
    the whole text would hide, and the time is that of reading about ``2 * length``
    characters; at most linear in the text, for one without splits (a mebibyte in well under
    a second). The patterns given are arbitrary regular expressions: they see only the first
    ``2 * length`` characters the built-in redactions kept, so their time is bounded whatever
    the text (a pattern with nested repetition can still take exponential time on those), and
    a match not within them is not found."""

    built_in: tuple[Redaction, ...] = DEFAULT_REDACTIONS
    patterns: tuple[Redaction, ...] = ()
    length: int = 200

    def apply(self, text: str) -> str:
        window = 2 * self.length
        kept = self.built_in_prefix(text, window)[:window]
        return redact(kept, self.patterns)[: self.length]

    def built_in_prefix(self, text: str, size: int) -> str:
        """The start of ``redact(text, self.built_in)``, at least ``size`` characters of it
        (all of it when shorter): ``text`` is redacted a piece at a time, each from a split to
        the first split at least ``size`` characters further, until that many are kept.
        Redacting pieces split there gives what redacting the whole gives."""
        kept: list[str] = []
        kept_size = start = 0
        while start < len(text) and kept_size < size:
            end = len(text)
            if end - start > size:
                split = _SPLIT.search(text, start + size - 1)
                if split is not None:
                    end = split.start() + 1
            piece = redact(text[start:end], self.built_in)
            kept.append(piece)
            kept_size += len(piece)
            start = end
        return "".join(kept)
