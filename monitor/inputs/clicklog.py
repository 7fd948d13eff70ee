"""Search logs as impressions and clicks, for the click models of ``monitor.offline.clicks``
and the query sampling of ``monitor.offline.sampling``.

Every line goes through the decoder chain, as ``searchmon replay`` reads it (native events,
UBI records, ``_bulk`` exports, ``<index>\\t<json>`` lines, gzip), in any order: a click may
come before its query. What a search showed is its logged result list (positions 1..n);
when the list was not logged (``results_known`` false, a UBI query without hit ids), its
impression events. A click is on the result at its position, or, without a position, on its
document. Queries are keyed by their text as the query lists key it (normalised, redacted).

Duplicates count once: a search is its ``query_id`` and text (a second record of it adds
nothing but a result list it lacked; another text under the id is another search, a
refinement, as the pipeline counts it); a result is clicked or not, however many clicks it
had. A click or an impression names only the id: it belongs to that id's search it follows
in event time (the latest before it; before them all, the earliest).

Memory grows with the searches read (a few dozen bytes per result shown), up to
``max_searches``: beyond, the reading stops with ``TooManySearches``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

if TYPE_CHECKING:
    import numpy as np
else:
    from monitor.lazy import numpy as np

from monitor.config import Config
from monitor.inputs.chain import DecoderChain, Result
from monitor.inputs.events import (
    SESSION_OF_QUERY,
    ClickEvent,
    Decoded,
    ImpressionEvent,
    JudgedMessage,
    QueryEvent,
    Rejection,
    session_hash,
)
from monitor.inputs.files import lines
from monitor.inputs.ubi import ONE_QUERY_SESSION
from monitor.offline.clicks import MAX_POSITION, ClickLog

if TYPE_CHECKING:
    from monitor.offline.clicks import Column

MAX_SEARCHES = 5_000_000
"""The searches one reading keeps by default."""


class TooManySearches(Exception):
    """The input has more searches than the reading may keep."""


@dataclass
class ClickLogReader:
    """Gathers decoded events into a ``ClickLog``."""

    min_sessions: int
    key: Callable[[str], str]
    """A query text as the lists key it (``QueryLists.key``)."""
    max_searches: int = MAX_SEARCHES
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._queries: dict[str, int] = {}
        self._sessions: list[list[int]] = []
        self._docs: dict[str, int] = {}
        self._searches: dict[str, int] = {}  # query_id -> its first search
        self._refined: dict[tuple[str, int], int] = {}  # (query_id, query) -> a later one
        self._later: dict[int, list[int]] = {}  # an id's first search -> its later ones
        self._search_query = array("q")  # -1: no query record read (yet)
        self._search_time = array("d")  # of its first query record read (NaN: none yet)
        self._repeats: dict[int, list[float]] = {}  # a search's other records' times
        self._listed = bytearray()  # the search's result list was logged
        # search, doc (-1 for a click without one), position: 9 bytes a row
        self._rows = (array("i"), array("i"), array("B"))
        self._impressions = (array("i"), array("i"), array("B"))
        self._clicks = (array("i"), array("i"), array("B"))
        self._impression_time = array("d")
        self._click_time = array("d")

    def add(self, result: Result) -> None:
        """One result of the decoder chain (rejections and judged messages are counted)."""
        if type(result) is Rejection:
            self.counts[f"rejected: {result.reason}"] += 1
            return
        if type(result) is not tuple:
            self.counts["judged messages" if type(result) is JudgedMessage
                        else "actions not measured"] += 1
            return
        time, event = cast(Decoded, result)
        if isinstance(event, QueryEvent):  # (with [slices], a subclass with their fields)
            self._query(event, time)
        elif type(event) is ClickEvent:
            doc = self._doc(event.doc_id) if event.doc_id else -1
            if doc < 0 and not event.position:
                self.counts["clicks without a document or a position"] += 1
                return
            if self._append(self._clicks, self._search(event.query_id), doc, event.position):
                self._click_time.append(time)
        elif type(event) is ImpressionEvent:
            if event.query_id is None or not event.doc_id or not event.position:
                self.counts["impressions without a query, a document or a position"] += 1
                return
            if self._append(self._impressions, self._search(event.query_id),
                            self._doc(event.doc_id), event.position):
                self._impression_time.append(time)

    def _query(self, event: QueryEvent, time: float) -> None:
        search = self._search(event.query_id)
        key = self.key(event.query_text)
        query = self._queries.get(key)
        if query is None:
            query = self._queries[key] = len(self._sessions)
            self._sessions.append([])
        known = self._search_query[search]
        if known < 0:  # the id's first query record
            self._search_query[search] = query
        elif known != query:  # another text under the id: another search
            search = self._refinement(event.query_id, search, query, time)
        first = self._search_time[search]
        if first != first:  # NaN: the search's first record
            self._search_time[search] = time
            _count_session(self._sessions[query], event.session_id, self.min_sessions)
        elif time != first:  # another record of it: when it was searched again
            self._repeats.setdefault(search, []).append(time)
        results = event.result_ids
        if event.results_known and results and not self._listed[search]:
            self._listed[search] = 1
            if len(results) > MAX_POSITION:
                self.counts[f"results shown or clicked below position {MAX_POSITION}"] += (
                    len(results) - MAX_POSITION)
                results = results[:MAX_POSITION]
            docs = self._docs
            index = docs.setdefault  # a new document gets the next index
            searches, shown, positions = self._rows
            searches.extend([search] * len(results))
            shown.extend([index(d, len(docs)) for d in results])
            positions.extend(range(1, len(results) + 1))

    def knows(self, query_id: str) -> bool:
        """Whether a query record of ``query_id`` was read."""
        search = self._searches.get(query_id)
        return search is not None and self._search_query[search] >= 0

    def _search(self, query_id: str) -> int:
        """The first search of ``query_id`` (a new one, without query yet, if none)."""
        search = self._searches.get(query_id)
        if search is None:
            search = self._searches[query_id] = self._new_search()
        return search

    def _refinement(self, query_id: str, first: int, query: int, time: float) -> int:
        """The search of ``query`` under ``query_id`` after another text (new if none)."""
        search = self._refined.get((query_id, query))
        if search is None:
            search = self._refined[(query_id, query)] = self._new_search()
            self._search_query[search] = query
            self._later.setdefault(first, []).append(search)
        return search

    def _new_search(self) -> int:
        search = len(self._search_query)
        if search >= self.max_searches:
            raise TooManySearches(
                f"more than {self.max_searches:,} searches: read fewer files at a time")
        self._search_query.append(-1)
        self._search_time.append(float("nan"))
        self._listed.append(0)
        return search

    def _doc(self, doc_id: str) -> int:
        return self._docs.setdefault(doc_id, len(self._docs))

    def _append(self, columns: tuple[array[int], array[int], array[int]], search: int,
                doc: int, position: int) -> bool:
        if position > MAX_POSITION:
            self.counts[f"results shown or clicked below position {MAX_POSITION}"] += 1
            return False
        columns[0].append(search)
        columns[1].append(doc)
        columns[2].append(position)
        return True

    def _follow_refinements(self) -> None:
        """Clicks and impressions of an id with several texts to the search of the id each
        follows in event time (the latest before it; before them all, the earliest)."""
        if not self._later:
            return
        times = self._search_time
        records = {  # per search of such an id: the times of its records, in order
            s: sorted(t for t in (times[s], *self._repeats.get(s, ())) if t == t)
            for first, later in self._later.items() for s in (first, *later)
        }
        for columns, when in ((self._clicks, self._click_time),
                              (self._impressions, self._impression_time)):
            searches = _column(columns[0])
            for at in np.flatnonzero(np.isin(searches, list(self._later))).tolist():
                first = int(searches[at])
                # the search of the latest record at or before it (a text that came back
                # under the id is its search again); before them all, the earliest
                stamps = []
                for s in (first, *self._later[first]):
                    kept = records[s]
                    found = bisect_right(kept, when[at])  # (sorted: the latest at or before)
                    stamps.append((kept[found - 1] if found else None,
                                   kept[0] if kept else float("inf"), s))
                before = [(latest, s) for latest, _, s in stamps if latest is not None]
                columns[0][at] = (max(before)[1] if before
                                  else min((start, s) for _, start, s in stamps)[1])

    def _search_rows(self) -> tuple[Column, Column, Column]:
        """search, doc, position of every result shown, ordered by search then position: the
        logged lists, and the impression events of the searches without one (each (search,
        position, doc) once)."""
        search, doc, position = (_column(c) for c in self._rows)
        shown = [_column(c) for c in self._impressions]
        if len(shown[0]):
            listed = np.frombuffer(bytes(self._listed), dtype=np.uint8).astype(bool)
            own = ~listed[shown[0]]
            self.counts["impression events of searches with a logged list"] += int(
                np.count_nonzero(~own))
            unique = np.unique(np.stack([c[own].astype(np.int64) for c in shown]), axis=1)
            search = np.concatenate([search, unique[0].astype(np.int32)])
            doc = np.concatenate([doc, unique[1].astype(np.int32)])
            position = np.concatenate([position, unique[2].astype(np.uint8)])
        elif len(search) < 2 or bool(np.all(search[1:] >= search[:-1])):
            return search, doc, position  # each list appended whole, searches in order
        order = np.lexsort((position, search))
        return search[order], doc[order], position[order]

    def finish(self) -> ClickLog:
        """The click log of everything read (every query, whatever its sessions)."""
        self._follow_refinements()
        search, doc, position = self._search_rows()
        query = np.frombuffer(self._search_query, dtype=np.int64)[search].astype(np.int32)
        orphan = query < 0
        if np.any(orphan):
            self.counts["results shown for searches without a query record"] += int(
                np.count_nonzero(orphan))
        clicked = np.zeros(len(search), dtype=bool)
        self._match_clicks(search, doc, position, clicked)
        sessions = np.array([len(s) for s in self._sessions], dtype=np.int64)
        if np.any(orphan):
            keep = ~orphan
            search, query, doc, position, clicked = (
                search[keep], query[keep], doc[keep], position[keep], clicked[keep])
        return ClickLog(search, query, doc, position, clicked, list(self._queries),
                        list(self._docs), sessions, Counter(self.counts))

    def _match_clicks(self, search: Column, doc: Column, position: Column,
                      clicked: np.ndarray[Any, np.dtype[np.bool_]]) -> None:
        """Mark the rows clicked: by (search, position) when the click has a position and
        the row there is its document (or it names none); else by (search, document)."""
        click_search, click_doc, click_position = (
            _column(c).astype(np.int64) for c in self._clicks)
        if not len(click_search):
            return
        if not len(search):
            self.counts["clicks of searches whose results are unknown"] += len(click_search)
            return
        # rows are ordered by search then position: this key is sorted
        by_position = search.astype(np.int64) * (MAX_POSITION + 1) + position
        wanted = click_search * (MAX_POSITION + 1) + click_position
        at = np.minimum(np.searchsorted(by_position, wanted), len(search) - 1)
        del by_position
        hit = (click_position > 0) & (search[at] == click_search) & (
            position[at] == click_position) & ((click_doc < 0) | (doc[at] == click_doc))
        clicked[at[hit]] = True
        missing = ~hit
        rest = missing & (click_doc >= 0)
        if np.any(rest):
            by_doc = (search.astype(np.int64) << 32) | doc
            order = np.argsort(by_doc, kind="stable")
            sorted_keys = by_doc[order]
            del by_doc
            wanted_doc = (click_search[rest] << 32) | click_doc[rest]
            found = np.minimum(np.searchsorted(sorted_keys, wanted_doc), len(search) - 1)
            matched = sorted_keys[found] == wanted_doc
            clicked[order[found[matched]]] = True
            missing[np.flatnonzero(rest)[matched]] = False
        if np.any(missing):
            known = np.isin(click_search[missing], search)
            self.counts["clicks of searches whose results are unknown"] += int(
                np.count_nonzero(~known))
            self.counts["clicks on a result not shown"] += int(np.count_nonzero(known))


def _count_session(seen: list[int], session_id: str, limit: int) -> None:
    """Add ``session_id`` to ``seen``, a query's distinct sessions hashed as the query lists
    hash them (``session_hash``), kept up to ``limit`` (the k-anonymity floor). An event
    whose session is its query's (``SESSION_OF_QUERY``) counts by its own id; a UBI query
    that names no user (``ONE_QUERY_SESSION``) counts none."""
    session_id = session_id.removeprefix(SESSION_OF_QUERY)
    if len(seen) < limit and not session_id.startswith(ONE_QUERY_SESSION):
        hashed = session_hash(session_id)
        if hashed not in seen:
            seen.append(hashed)


def _column(values: array[int]) -> Column:
    """An accumulated column as an array (a view of its buffer: read-only)."""
    return np.frombuffer(values, dtype={"i": np.int32, "B": np.uint8}[values.typecode])


class _Reader(Protocol):
    def add(self, result: Result) -> None: ...


Reader = TypeVar("Reader", bound=_Reader)


def read_all(reader: Reader, results: Iterable[Result]) -> Reader:
    """Every result into ``reader``."""
    add = reader.add
    for result in results:
        add(result)
    return reader


def read_click_log(
    paths: Iterable[Path], config: Config, key: Callable[[str], str], min_sessions: int,
) -> ClickLog:
    """The click log of the events of ``paths``, queries keyed by ``key``
    (``QueryLists.key``), with those under the k-anonymity floor of ``min_sessions``
    distinct sessions left out. ``TooManySearches`` past ``MAX_SEARCHES``; ``OSError`` when
    a file cannot be read."""
    reader = ClickLogReader(min_sessions, key)
    return read_all(reader, decoded(paths, config)).finish().public(min_sessions)


def decoded(paths: Iterable[Path], config: Config) -> Iterator[Result]:
    """Every non-blank line of ``paths``, in file order, through the decoder chain."""
    chain = DecoderChain(config)
    read = chain.read
    for path in paths:
        for _, _, line, hint in lines(path):
            if line.strip():
                yield read(line, hint)


@dataclass
class QueryRecord:
    """What the sampling of queries knows of one query key in one slice: its searches, its
    distinct sessions (up to the k-anonymity floor), its class (that of its latest search)
    and its most recent served list (that of its latest search with a logged list)."""

    searches: int = 0
    sessions: list[int] = field(default_factory=list)
    query_class: str = ""
    served_at: float = float("-inf")
    results: list[str] = field(default_factory=list)


@dataclass
class QueryTallyReader:
    """Gathers the query events of decoded results into a ``QueryRecord`` per key and slice
    (a search counts once per ``query_id``). ``dimensions``: those of the slices, read from
    the queries' ``attributes`` (``unknown`` where a query has none). Memory: a record per
    distinct key and slice, and the ``query_id`` of every search (for the duplicates), up to
    ``max_searches``."""

    min_sessions: int
    key: Callable[[str], str]
    """A query text as the lists key it."""
    classify: Callable[[QueryEvent], str]
    """The query's class."""
    dimensions: tuple[str, ...] = ()
    max_searches: int = MAX_SEARCHES
    records: dict[tuple[str, tuple[str, ...]], QueryRecord] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def add(self, result: Result) -> None:
        if type(result) is not tuple:
            return
        time, event = cast(Decoded, result)
        if not isinstance(event, QueryEvent):
            return
        attributes = event.attributes or {}
        key = (self.key(event.query_text),
               tuple(attributes.get(name) or "unknown" for name in self.dimensions))
        search = (event.query_id, key[0])  # another text under an id is another search
        record = self.records.get(key)
        if search not in self._seen:
            if len(self._seen) >= self.max_searches:
                raise TooManySearches(
                    f"more than {self.max_searches:,} searches: read fewer files at a time")
            self._seen.add(search)
            if record is None:
                record = self.records[key] = QueryRecord()
            record.searches += 1
            _count_session(record.sessions, event.session_id, self.min_sessions)
        if record is None:
            return
        if time >= record.served_at:
            record.query_class = self.classify(event)
            if event.results_known and event.result_ids:
                record.served_at = time
                record.results = list(event.result_ids)
