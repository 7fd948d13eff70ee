"""Which queries: the top lists per query class over rolling windows, bounded and private.

Per window (``[query_lists] windows``), per time bucket of a quarter of the window and per
query class, a ``Tally`` keeps three Space-Saving summaries (``monitor.heavy``) of
``capacity`` counters each:

- ``searches``: every accepted query, on arrival, with a bounded set of hashed session ids
  per kept query (the k-anonymity test: a query is shown once ``min_sessions`` distinct
  sessions issued it in the window);
- ``zero_results``: the queries that found nothing, on arrival;
- ``outcomes``: every query once its outcome is known (it left its session's memory: the
  session closed, or it was older than ``recent_queries``), with the number of those that got
  a click. A kept query's count minus its error is exactly the searches counted since it was
  kept; its clicks are counted over the same searches, so ``clicked / (count - error)`` is
  the click-through rate of those searches, and ``count - error - clicked`` the searches
  without a click.

A window is the merge of its buckets (a window of length L covers between L and L + L/4 of
event time); the overall lists merge the classes. Text is normalised (case-folded, blanks
collapsed) and redacted before anything is kept. Pure: no clock, no I/O.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar
from zlib import crc32

from monitor.config import QueryListsConfig
from monitor.core.classes import normalise
from monitor.core.heavy import (
    DIGITS,
    EMAIL,
    HeavyQueries,
    Redaction,
    Redactions,
    merge_many,
)
from monitor.core.snapshots import Layout, Migration, require, same_lengths
from monitor.core.states import (
    BucketState,
    HeavyQueriesState,
    PublicSummary,
    PublicTally,
    QueryListsState,
    TallyState,
)
from monitor.inputs.ubi import ONE_QUERY_SESSION

log = logging.getLogger(__name__)

BUCKETS = 4
"""Time buckets per window."""
MAX_KEY = 200
"""Characters of a query kept (normalised, redacted): a longer one is cut there."""
MEMO_TEXT = 2 * MAX_KEY
"""The longest text whose key is memoised: the memo holds none of the long texts an event
may carry (up to a mebibyte each); theirs are made anew each time."""
MEMO_CHARS = 2**20
MEMO_TEXTS = 65536
"""The characters of text and the texts the memo holds at most (then it starts over): with
their keys, about 12 MB at worst (65,536 short texts and their keys, each a Python string;
or 2^20 characters of text at four bytes a character, and keys no longer than their text)."""
LISTS = ("searches", "zero_results", "no_clicks", "low_ctr")
BUILT_IN = {"email": EMAIL, "digits": DIGITS}


def redactions(config: QueryListsConfig) -> Redactions:
    """The built-in redactions, then the configured patterns (each match ``<redacted>``),
    keys cut at ``MAX_KEY``: the patterns see the first ``2 * MAX_KEY`` characters."""
    return Redactions(
        tuple(BUILT_IN[name] for name in config.redact),
        tuple(Redaction(re.compile(p), "<redacted>") for p in config.redact_patterns),
        MAX_KEY,
    )


def settings_digest(config: QueryListsConfig) -> str:
    """The settings the lists' state is laid out by: lists kept under others start anew.
    (``dimensions`` is the slices' part: ``Slices.lists_restarted``.)"""
    settings = config.model_dump(mode="json", exclude={
        "enabled", "top", "min_searches", "dimensions",
    })
    return hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:16]


class Tally:
    """One class in one time bucket of one window."""

    __slots__ = ("clicked", "outcomes", "searches", "zero")

    def __init__(self, capacity: int, min_sessions: int) -> None:
        self.searches = HeavyQueries(capacity, min_sessions)
        self.zero = HeavyQueries(capacity, min_sessions)
        self.outcomes = HeavyQueries(capacity, min_sessions)
        self.clicked: dict[str, int] = {}

    def snapshot(self) -> TallyState:
        outcomes = self.outcomes.snapshot()
        return TallyState(
            self.searches.snapshot(), self.zero.snapshot(), outcomes,
            [self.clicked.get(key, 0) for key in outcomes.counts.keys],
        )

    @staticmethod
    def restore(state: TallyState, capacity: int, min_sessions: int) -> Tally:
        tally = Tally(capacity, min_sessions)
        check_tally(state, capacity)
        tally.searches.restore(state.searches)
        tally.zero.restore(state.zero)
        tally.outcomes.restore(state.outcomes)
        tally.clicked = {
            k: n for k, n in zip(state.outcomes.counts.keys, state.clicked, strict=True) if n
        }
        return tally


def check_tally(state: TallyState, capacity: int) -> None:
    outcomes = state.outcomes.counts
    same_lengths("query lists: clicks", outcomes.keys, state.clicked)
    require(
        all(0 <= n <= c - e for n, c, e in zip(
            state.clicked, outcomes.counts, outcomes.errors, strict=True
        )),
        "query lists: more clicked searches than searches",
    )


BATCH_KEYS = 4096
"""Distinct queries a batch gathers before it is added to the summaries."""


SESSIONS_AT = 3
"""Where a batch entry's session hashes begin (after its count, its flagged count and the
flagged sessions)."""


class _Batch:
    """Queries of one class gathered while their times stay in the same buckets of every
    window, added to those buckets' tallies at once: one weighted Space-Saving update per
    distinct query instead of one per search (the summaries' guarantees hold for weighted
    updates). ``counts``: key -> [searches, zero-result searches or clicked ones, the hashed
    sessions of the zero-result ones (a set, or None), then the distinct hashed sessions
    (each at most ``min_sessions``)]."""

    __slots__ = ("counts", "high", "low", "tallies")

    def __init__(self, low: float, high: float, tallies: list[Tally]) -> None:
        self.low, self.high, self.tallies = low, high, tallies
        self.counts: dict[str, list[Any]] = {}


def _lists_1_to_2(document: Any) -> Any:
    """Version 1 (before the lists existed) kept none: they start empty."""
    return None


class QueryLists:
    """The query lists of one pipeline.

    Arrivals and outcomes are gathered in a ``_Batch`` per class; a batch goes to the tallies
    when a time outside its buckets comes, when it holds ``BATCH_KEYS`` queries, and before
    the tallies are read or snapshotted."""

    VERSION: ClassVar[int] = 2
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {1: _lists_1_to_2}

    def __init__(self, config: QueryListsConfig) -> None:
        self.config = config
        self._capacity = config.capacity
        self._min_sessions = config.min_sessions
        self._redactions = redactions(config)
        self._windows = [(length, length / BUCKETS) for length in config.windows]
        self.buckets: dict[float, dict[int, dict[int, Tally]]] = {
            length: {} for length in config.windows
        }
        """Window length -> bucket index (event time // (length / 4)) -> class -> tally."""
        self._first: dict[float, int] = dict.fromkeys(config.windows, -(2**62))
        """Per window: the oldest bucket still kept."""
        self.open: dict[str, str] = {}
        """Queries whose outcome is not known yet: query id -> key."""
        self._arrivals: dict[int, _Batch] = {}
        self._outcomes: dict[int, _Batch] = {}
        self.of: Sequence[int] = range(2**31)
        """Per slice index: the index the lists of its queries are kept under (set by the
        pipeline: ``Slices.lists``; alone, the slice's own); the lists' indexes are those."""
        self._keys: dict[str, str] = {}
        """A bounded memo of text (up to ``MEMO_TEXT`` chars; ``MEMO_CHARS`` and
        ``MEMO_TEXTS`` in all) -> key (normalising and redacting costs a few us)."""
        self._memo_chars = 0
        """The characters of the texts in the memo."""

    def key(self, text: str) -> str:
        """``text`` as the lists keep it: normalised, redacted, at most ``MAX_KEY`` chars."""
        key = self._keys.get(text)
        if key is None:
            key = self._redactions.apply(normalise(text))
            if len(text) <= MEMO_TEXT:
                self._memo_chars += len(text)
                if self._memo_chars > MEMO_CHARS or len(self._keys) >= MEMO_TEXTS:
                    self._keys.clear()
                    self._memo_chars = len(text)
                self._keys[text] = key
        return key

    def searched(
        self, klass: int, time: float, query_id: str, text: str, session_id: str, zero: bool
    ) -> None:
        """An accepted query, on arrival."""
        key = self._keys.get(text) or self.key(text)  # the memo, without a call when it knows
        self.open[query_id] = key
        self._gather(self._arrivals, True, self.of[klass], time, key, session_id, zero)

    def found_results(self, klass: int, time: float, text: str) -> None:
        """A search counted as zero-result had results after all: it leaves the zero-result
        list, if its batch is still open (within the smallest window of its arrival, unless
        the batch filled up; once merged into the summaries it stays)."""
        batch = self._arrivals.get(self.of[klass])
        if batch is None or not batch.low <= time < batch.high:
            return
        entry = batch.counts.get(self._keys.get(text) or self.key(text))
        if entry is not None and entry[1]:
            entry[1] -= 1
            if not entry[1]:
                entry[2] = None

    def finished(
        self, query_id: str, klass: int, time: float, session_id: str, clicked: bool
    ) -> None:
        """A query left its session's memory: whether it got a click is final."""
        key = self.open.pop(query_id, None)
        if key is not None:
            self._gather(self._outcomes, False, self.of[klass], time, key, session_id, clicked)

    def _gather(
        self, batches: dict[int, _Batch], arrivals: bool, klass: int, time: float, key: str,
        session_id: str, flag: bool,
    ) -> None:
        """One search (``arrivals``) or outcome into its class's batch; ``flag``: it found
        nothing, or it got a click."""
        batch = batches.get(klass)
        if batch is None or not batch.low <= time < batch.high:
            batch = self._batch(batches, klass, time, arrivals)
        entry = batch.counts.get(key)
        # a UBI query that names no user (neither session nor client) adds no session
        anonymous = session_id.startswith(ONE_QUERY_SESSION)
        # crc32(session_id.encode()) is ``monitor.inputs.events.session_hash``, inlined: per query
        if entry is None:
            # one list per query: its count, flagged count, the flagged sessions (a set once
            # one is, and only for arrivals: the zero-result list's k-anonymity), then its
            # distinct session hashes inline (few objects held per batch)
            if anonymous:
                batch.counts[key] = [1, 1 if flag else 0, None]
            else:
                session = crc32(session_id.encode())
                batch.counts[key] = [
                    1, 1 if flag else 0, {session} if flag and arrivals else None, session
                ]
            if len(batch.counts) >= BATCH_KEYS:
                self._flush(batch, arrivals)
            return
        entry[0] += 1
        if flag:
            entry[1] += 1
        if anonymous:
            return
        limit = self._min_sessions
        session = -1  # hashed once, when needed
        if len(entry) < limit + SESSIONS_AT:
            session = crc32(session_id.encode())
            if session not in entry[SESSIONS_AT:]:
                entry.append(session)
        if flag and arrivals:  # the sessions that found nothing
            flagged = entry[2]
            if flagged is None or len(flagged) < limit:
                if session < 0:
                    session = crc32(session_id.encode())
                if flagged is None:
                    entry[2] = {session}
                else:
                    flagged.add(session)

    def _batch(self, batches: dict[int, _Batch], klass: int, time: float, arrivals: bool) -> (
        _Batch
    ):
        """A new batch for ``klass`` at ``time``, the class's previous one flushed."""
        old = batches.get(klass)
        if old is not None:
            self._flush(old, arrivals)
        low, high = float("-inf"), float("inf")
        for _, width in self._windows:
            index = time // width
            low, high = max(low, index * width), min(high, (index + 1) * width)
        batch = batches[klass] = _Batch(low, high, list(self._find(klass, time)))
        return batch

    def _flush(self, batch: _Batch, arrivals: bool) -> None:
        counts, batch.counts = batch.counts, {}
        for tally in batch.tallies:
            if arrivals:
                searches, zero = tally.searches, tally.zero
                for key, entry in counts.items():
                    # a set of them, as it was built (the summaries keep the same ones)
                    searches.add_sessions(key, entry[0], set(entry[SESSIONS_AT:]))
                    if entry[1]:  # (no flagged session: queries that name no user)
                        zero.add_sessions(key, entry[1], entry[2] or ())
            else:
                outcomes, clicked_of = tally.outcomes, tally.clicked
                for key, entry in counts.items():
                    clicked = entry[1]
                    evicted = outcomes.add_sessions(key, entry[0], set(entry[SESSIONS_AT:]))
                    if evicted is not None:
                        clicked_of.pop(evicted, None)
                    if clicked:
                        clicked_of[key] = clicked_of.get(key, 0) + clicked

    def flush(self) -> None:
        """Every batch into the tallies (before they are read)."""
        for batches, arrivals in ((self._arrivals, True), (self._outcomes, False)):
            for batch in batches.values():
                self._flush(batch, arrivals)
            batches.clear()

    def _find(self, klass: int, time: float) -> Iterable[Tally]:
        for length, width in self._windows:
            index = int(time // width)
            if index < self._first[length]:
                continue  # older than the window
            buckets = self.buckets[length]
            bucket = buckets.get(index)
            if bucket is None:
                bucket = buckets[index] = {}
                first = index - BUCKETS
                if first > self._first[length]:
                    self._first[length] = first
                    for old in [b for b in buckets if b < first]:
                        del buckets[old]  # a batch still holding one adds to it in vain
            tally = bucket.get(klass)
            if tally is None:
                tally = bucket[klass] = Tally(self._capacity, self._min_sessions)
            yield tally

    def span(self, length: float) -> tuple[float, float] | None:
        """The event time the window's buckets cover."""
        buckets = self.buckets[length]
        if not buckets:
            return None
        width = length / BUCKETS
        return min(buckets) * width, (max(buckets) + 1) * width

    def snapshot(self) -> QueryListsState:
        self.flush()
        return QueryListsState(
            settings_digest(self.config),
            [
                BucketState(length, index, sorted(bucket),
                            [bucket[k].snapshot() for k in sorted(bucket)])
                for length, buckets in self.buckets.items()
                for index, bucket in sorted(buckets.items())
            ],
            list(self.open), list(self.open.values()),
        )

    @classmethod
    def restore(cls, layout: Layout, state: QueryListsState) -> QueryLists:
        """The lists of ``state``; empty ones (logged) when it was kept under other
        settings. Raises ``StateError`` when its parts do not fit together."""
        self, classes = cls(layout.config.query_lists), layout.classes
        if state.settings != settings_digest(self.config):
            log.info("query lists were kept under other [query_lists] settings: they start "
                     "anew")
            return self
        same_lengths("query lists: open queries", state.open_ids, state.open_keys)
        buckets: dict[float, dict[int, dict[int, Tally]]] = {
            length: {} for length in self.config.windows
        }
        for bucket in state.buckets:
            require(bucket.window in buckets, "query lists: a window not configured")
            same_lengths("query lists: a bucket", bucket.classes, bucket.tallies)
            require(all(0 <= k < classes for k in bucket.classes)
                    and len(set(bucket.classes)) == len(bucket.classes),
                    "query lists: a class index out of range")
            require(bucket.index not in buckets[bucket.window], "query lists: a bucket twice")
            buckets[bucket.window][bucket.index] = {
                k: Tally.restore(t, self._capacity, self._min_sessions)
                for k, t in zip(bucket.classes, bucket.tallies, strict=True)
            }
        for length, kept in buckets.items():
            require(not kept or max(kept) - min(kept) <= BUCKETS,
                    "query lists: buckets further apart than the window")
            if kept:
                self._first[length] = max(kept) - BUCKETS
        self.buckets = buckets
        self._arrivals.clear()
        self._outcomes.clear()
        self.open = dict(zip(state.open_ids, state.open_keys, strict=True))
        return self


def merge_tallies(
    states: Sequence[TallyState], capacity: int, min_sessions: int
) -> TallyState | None:
    """One tally of the streams of ``states`` (Space-Saving merges; clicks add up)."""
    if not states:
        return None
    if len(states) == 1:
        return states[0]
    searches, zero, outcomes = (
        merge_many([getattr(s, part) for s in states], capacity, min_sessions)
        for part in ("searches", "zero", "outcomes")
    )
    clicked: dict[str, int] = {}
    for state in states:
        for key, n in zip(state.outcomes.counts.keys, state.clicked, strict=True):
            clicked[key] = clicked.get(key, 0) + n
    merged = outcomes.counts
    return TallyState(
        searches, zero, outcomes,
        [min(clicked.get(k, 0), c - e)
         for k, c, e in zip(merged.keys, merged.counts, merged.errors, strict=True)],
    )


def public(state: TallyState, capacity: int, min_sessions: int) -> PublicTally:
    """``state`` without the queries fewer than ``min_sessions`` distinct sessions issued (as
    the list's own summary or the searches summary knows) and without session ids.

    Nothing of it depends on the counts of the queries it hides: while a summary is not
    full, it is the summary of the stream without their searches (``unseen`` 0). Once full, a
    query not kept was searched at most as often as the smallest count kept, and ``unseen``
    says so without naming a hidden count: the smallest count listed (at least the smallest
    kept), or when none is listed the mean count kept (a share of all the searches counted,
    hidden ones included). A query it hides is not bounded at all: its searches here stay
    out of every merge (``merge_public``)."""
    anonymous = {
        key for key, hashed in zip(state.searches.counts.keys, state.searches.sessions,
                                   strict=True)
        if len(hashed) >= min_sessions
    }

    def shown(part: HeavyQueriesState, kept: list[int] | None = None) -> PublicSummary:
        c = part.counts
        keys, counts, errors = [], [], []
        for i, (key, count, error, hashed) in enumerate(zip(
            c.keys, c.counts, c.errors, part.sessions, strict=True
        )):
            if len(hashed) >= min_sessions or key in anonymous:
                keys.append(key)
                counts.append(count)
                errors.append(error)
                if kept is not None:
                    kept.append(i)
        unseen = 0
        if len(c.keys) >= capacity:
            unseen = min(counts) if counts else sum(c.counts) // len(c.counts)
        return PublicSummary(keys, counts, errors, unseen)

    kept: list[int] = []
    outcomes = shown(state.outcomes, kept)
    return PublicTally(
        shown(state.searches), shown(state.zero), outcomes, [state.clicked[i] for i in kept]
    )


def check_public(tally: PublicTally, capacity: int) -> None:
    """``StateError`` unless ``tally`` could be a public tally of ``capacity`` counters (it is
    read back from the network)."""
    for part in (tally.searches, tally.zero, tally.outcomes):
        size = same_lengths("public summary", part.keys, part.counts, part.errors)
        require(size <= capacity and len(set(part.keys)) == size,
                "public summary: more keys than the capacity, or a key twice")
        require(all(c >= 1 and c >= e >= 0 for c, e in zip(part.counts, part.errors,
                                                          strict=True)) and part.unseen >= 0,
                "public summary: not every count >= 1 and count >= error >= 0")
    same_lengths("public summary: clicks", tally.outcomes.keys, tally.clicked)
    require(all(0 <= n <= c - e for n, c, e in zip(
        tally.clicked, tally.outcomes.counts, tally.outcomes.errors, strict=True
    )), "public summary: more clicked searches than searches")


def merge_public(tallies: Sequence[PublicTally], capacity: int) -> PublicTally:
    """One public tally of the streams of ``tallies`` (other replicas' partitions): a query's
    count (error) adds its count (error) where listed and the summary's ``unseen`` where not;
    the ``capacity`` largest stay; what is not listed occurred at most the sum of the unseen
    bounds, or the smallest count kept once full. The bounds are those of the query's
    searches at the replicas that show it or do not keep it: where one hides it, its searches
    there are not counted (``public``)."""

    def merged(parts: list[PublicSummary]) -> PublicSummary:
        base = sum(p.unseen for p in parts)
        counts: dict[str, int] = {}
        errors: dict[str, int] = {}
        for part in parts:
            for key, count, error in zip(part.keys, part.counts, part.errors, strict=True):
                counts[key] = counts.get(key, base) + count - part.unseen
                errors[key] = errors.get(key, base) + error - part.unseen
        ranked = sorted(counts, key=lambda k: (-counts[k], k))
        kept, dropped = ranked[:capacity], ranked[capacity:]
        unseen = max([base, *(counts[k] for k in dropped)])
        return PublicSummary(kept, [counts[k] for k in kept], [errors[k] for k in kept], unseen)

    outcomes = merged([t.outcomes for t in tallies])
    clicked: dict[str, int] = {}
    for tally in tallies:
        for key, n in zip(tally.outcomes.keys, tally.clicked, strict=True):
            clicked[key] = clicked.get(key, 0) + n
    return PublicTally(
        merged([t.searches for t in tallies]), merged([t.zero for t in tallies]), outcomes,
        [min(clicked.get(k, 0), c - e)
         for k, c, e in zip(outcomes.keys, outcomes.counts, outcomes.errors, strict=True)],
    )


def lists(
    tally: PublicTally, top: int, min_searches: int
) -> dict[str, list[dict[str, Any]]]:
    """The rows of a window's public tally, ``top`` per list. ``count`` is an upper bound
    and ``error`` its largest overestimate: the true figure lies in ``[count - error,
    count]``. ``low_ctr`` rows count the searches since the summary kept the query (``error``:
    how many before it may have been missed)."""

    def rows(part: PublicSummary) -> list[dict[str, Any]]:
        return [{"query": key, "count": count, "error": error}
                for key, count, error in zip(part.keys, part.counts, part.errors, strict=True)]

    finished = [
        (key, count - error, error, clicked)
        for key, count, error, clicked in zip(
            tally.outcomes.keys, tally.outcomes.counts, tally.outcomes.errors, tally.clicked,
            strict=True,
        )
    ]
    ranked = sorted(
        ((searched - clicked + error, key, error) for key, searched, error, clicked in finished
         if searched > clicked),
        key=lambda row: (-row[0], row[1]),
    )
    lowest = sorted(
        (clicked / searched, -searched, key, clicked, error)
        for key, searched, error, clicked in finished if searched >= min_searches
    )
    return {
        "searches": rows(tally.searches)[:top],
        "zero_results": rows(tally.zero)[:top],
        "no_clicks": [{"query": key, "count": count, "error": error}
                      for count, key, error in ranked[:top]],
        "low_ctr": [
            {"query": key, "searches": -negative, "clicked": clicked, "ctr": ctr,
             "error": error}
            for ctr, negative, key, clicked, error in lowest[:top]
        ],
    }


def memory_bound(config: QueryListsConfig) -> int:
    """Counters kept per query class at most: 3 summaries per bucket, BUCKETS + 1 buckets
    per window (the current one and the four it still covers)."""
    return 3 * config.capacity * (BUCKETS + 1) * len(config.windows)
