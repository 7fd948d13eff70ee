"""Judgment files as judging tools write them: ``query,docid,rating`` CSV (an optional rater
column, an optional header) and TREC qrels; read into ratings, then into one label per
(query, document) pair (docs/reference/cli.md, ``searchmon judgments import``)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

QUERY_NAMES = ("query", "querytext", "query_text", "keyword", "keywords", "search", "topic")
DOC_NAMES = ("docid", "doc_id", "doc", "document", "documentid", "document_id", "id")
RATING_NAMES = ("rating", "label", "grade", "judgment", "judgement", "relevance", "score")
RATER_NAMES = ("rater", "user", "user_id", "judge", "annotator", "assessor", "rater_id")
"""Header names of the columns (compared case-folded, without blanks)."""
MAX_RATING = 2**31 - 1


class Rating(NamedTuple):
    query: str
    doc: str
    rating: float
    rater: str


class JudgmentFileError(ValueError):
    """A file that is neither format, or whose header names no query, doc or rating column."""


@dataclass
class Ratings:
    """What a file held: its ratings in file order, and its rows left out, counted by why,
    with the first line of each reason."""

    ratings: list[Rating] = field(default_factory=list)
    left_out: dict[str, tuple[int, int]] = field(default_factory=dict)
    """reason -> (rows, first line number)."""

    def leave_out(self, reason: str, line: int) -> None:
        count, first = self.left_out.get(reason, (0, line))
        self.left_out[reason] = (count + 1, first)


def _rating(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def sniff(text: str) -> str:
    """``csv`` or ``qrels``: a first data line of four whitespace-separated fields whose
    last is a number and that has no comma is qrels."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        if len(fields) == 4 and "," not in stripped and _rating(fields[3]) is not None:
            return "qrels"
        return "csv"
    return "csv"


def read_qrels(text: str) -> Ratings:
    """TREC qrels: ``topic iteration docno label`` per line (blank lines and ``#`` comments
    skipped); the topic is the query text, the iteration is ignored, one rater."""
    found = Ratings()
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 4:
            found.leave_out("not four fields (topic iteration docno label)", number)
            continue
        value = _rating(fields[3])
        if value is None or not 0 <= value <= MAX_RATING:
            found.leave_out("a label that is not a number >= 0", number)
            continue
        found.ratings.append(Rating(fields[0], fields[2], value, ""))
    return found


def _column(header: Sequence[str], names: Sequence[str]) -> int | None:
    folded = ["".join(name.casefold().split()) for name in header]
    for name in names:
        if name in folded:
            return folded.index(name)
    return None


def read_csv(text: str) -> Ratings:
    """``query,docid,rating[,rater]`` rows. A first row whose third field is not a number is
    a header: then the columns are found by name (``QUERY_NAMES``, ``DOC_NAMES``,
    ``RATING_NAMES``, ``RATER_NAMES``; Quepid's ``Query Text,Doc ID,Rating`` among them) and
    other columns are ignored. A header with a query and a document column but no rating
    column is one column per rater, named by the header (Quepid's export of a book's
    judgements: ``query,docid,<judge>,<judge>...``); an empty cell is no rating of that
    rater. Blank rows are skipped."""
    rows = csv.reader(io.StringIO(text))
    found = Ratings()
    columns: tuple[int, int, int, int | None] = (0, 1, 2, 3)
    raters: list[tuple[int, str]] = []  # one column per rater (no rating column)
    first = True
    for row in rows:
        number = rows.line_num
        if not any(cell.strip() for cell in row):
            continue
        if first:
            first = False
            if len(row) < 3 or _rating(row[2]) is None:  # a header
                columns, raters = _header(row)
                continue
        query_at, doc_at, rating_at, rater_at = columns
        if len(row) <= max(query_at, doc_at, -1 if raters else rating_at):
            found.leave_out("fewer fields than the header", number)
            continue
        query, doc = row[query_at].strip(), row[doc_at].strip()
        if not query or not doc:
            found.leave_out("an empty query or document", number)
            continue
        # a rating per rater column, or the one of the row (its rater named in a column)
        rater = row[rater_at].strip() if rater_at is not None and rater_at < len(row) else ""
        for at, name in raters or [(rating_at, rater)]:
            cell = row[at].strip() if at < len(row) else ""
            if not cell and raters:
                continue  # not rated by this rater
            value = _rating(cell)
            if value is None or not 0 <= value <= MAX_RATING:
                found.leave_out("a rating that is not a number >= 0", number)
                continue
            found.ratings.append(Rating(query, doc, value, name))
    if raters and not found.ratings:  # (a column of comments is no rater)
        raise JudgmentFileError(
            f"the header ({','.join(name for _, name in raters)} beside the query and the "
            "document) names no rating column, and no other column holds a rating")
    return found


def _header(row: Sequence[str]) -> tuple[tuple[int, int, int, int | None],
                                         list[tuple[int, str]]]:
    """The columns a header names, and with no rating column but others, the raters'
    columns (one per rater, the header naming the rater)."""
    query, doc, rating = (_column(row, names) for names in (QUERY_NAMES, DOC_NAMES,
                                                              RATING_NAMES))
    if query is not None and doc is not None and rating is None and (
        _column(row, RATER_NAMES) is None  # a rater column: rows of one rating, not found
    ):
        raters = [(at, name.strip()) for at, name in enumerate(row)
                  if at not in (query, doc) and name.strip()]
        if raters:
            return (query, doc, -1, None), raters
    if query is None or doc is None or rating is None:
        missing = [what for what, at in (("query", query), ("document", doc),
                                         ("rating", rating)) if at is None]
        raise JudgmentFileError(
            f"the header ({','.join(row)}) names no {' and no '.join(missing)} column; "
            f"expected e.g. query,docid,rating[,rater], or query,docid then one column per "
            f"rater")
    return (query, doc, rating, _column(row, RATER_NAMES)), []


READERS: dict[str, Callable[[str], Ratings]] = {"csv": read_csv, "qrels": read_qrels}


@dataclass(frozen=True)
class Judged:
    """One query's labels: the documents in the order the file first named them."""

    query: str
    labels: dict[str, int]


def labelled(ratings: Sequence[Rating],
             aggregate: Callable[[Sequence[float]], int]) -> Iterator[Judged]:
    """Per query (in the order the file first named it), each document's label: the
    ``aggregate`` of its ratings, one per rater (a rater's later rating of a pair replaces
    the earlier)."""
    by_query: dict[str, dict[str, dict[str, float]]] = {}
    for rating in ratings:
        by_query.setdefault(rating.query, {}).setdefault(rating.doc, {})[rating.rater] = (
            rating.rating)
    for query, docs in by_query.items():
        yield Judged(query, {doc: aggregate(list(raters.values()))
                             for doc, raters in docs.items()})


def units(ratings: Sequence[Rating]) -> dict[tuple[str, str], dict[str, int]]:
    """Per (query, document): each rater's label (rounded half up), for the agreement."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for rating in ratings:
        found.setdefault((rating.query, rating.doc), {})[rating.rater] = math.floor(
            rating.rating + 0.5)
    return found
