"""TREC-format qrels (``qid iter docno label``) and runs (``qid Q0 docno rank score tag``).

Parsing is pure: it takes the bytes of a file and its name (for messages) and returns
columns, or raises ``TrecFormatError`` naming the file, the line and what was expected.
Large files take a vectorised path; any irregular line falls back to a line-by-line pass
that finds the exact error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.offline.ranking import FloatArray

_SPACE = np.zeros(256, dtype=np.bool_)
_SPACE[[9, 10, 11, 12, 13, 32]] = True


class TrecFormatError(ValueError):
    """Malformed TREC input; the message names the file, the line and what was expected."""


@dataclass(frozen=True, slots=True)
class Qrels:
    """Judgments as parallel columns, one entry per line."""

    qids: list[bytes]
    docs: list[bytes]
    labels: list[int]


@dataclass(frozen=True, slots=True)
class Run:
    """Retrieved documents as parallel columns, one entry per line, in file order."""

    qids: list[bytes]
    docs: list[bytes]
    scores: FloatArray


def parse_qrels(data: bytes, source: str) -> Qrels:
    """Parse qrels: exactly four columns, the fourth an integer label (-1: unjudged)."""
    columns = _regular_columns(data, 4)
    if columns is not None:
        try:
            labels = [int(v) for v in columns[3]]
        except ValueError:
            labels = None
        if labels is not None:
            qrels = Qrels(columns[0], columns[2], labels)
            _check_unique(qrels.qids, qrels.docs, data, source, "judged")
            return qrels
    return _parse_qrels_by_line(data, source)


def parse_run(data: bytes, source: str) -> Run:
    """Parse a run: at least six columns (more are ignored), the fifth a finite score."""
    columns = _regular_columns(data, 6)
    if columns is not None:
        try:
            scores = np.array(columns[4]).astype(np.float64)
        except ValueError:
            scores = None
        if scores is not None and bool(np.isfinite(scores).all()):
            run = Run(columns[0], columns[2], scores)
            _check_unique(run.qids, run.docs, data, source, "retrieved")
            return run
    return _parse_run_by_line(data, source)


def _regular_columns(data: bytes, width: int) -> list[list[bytes]] | None:
    """The columns when every non-blank line has exactly ``width`` fields, else None."""
    tokens = data.split()
    if not tokens or len(tokens) % width:
        return None
    buf = np.frombuffer(data, dtype=np.uint8)
    space = _SPACE[buf]
    starts = ~space
    starts[1:] &= space[:-1]
    line_of_token = np.cumsum(buf == 10)[starts]
    per_line = np.bincount(line_of_token)
    if not np.all((per_line == 0) | (per_line == width)):
        return None
    return [tokens[i::width] for i in range(width)]


def _lines(data: bytes) -> list[tuple[int, list[bytes]]]:
    out = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        fields = line.split()
        if fields and not fields[0].startswith(b"#"):
            out.append((number, fields))
    return out


def _parse_qrels_by_line(data: bytes, source: str) -> Qrels:
    qrels = Qrels([], [], [])
    seen: set[tuple[bytes, bytes]] = set()
    for number, fields in _lines(data):
        where = f"{source}:{number}"
        if len(fields) != 4:
            raise TrecFormatError(
                f"{where}: expected 4 columns 'qid iter docno label', found {len(fields)}"
            )
        try:
            label = int(fields[3])
        except ValueError:
            raise TrecFormatError(
                f"{where}: expected an integer relevance label, found {_show(fields[3])}"
            ) from None
        key = (fields[0], fields[2])
        if key in seen:
            raise TrecFormatError(
                f"{where}: document {_show(fields[2])} judged twice for query {_show(fields[0])}"
            )
        seen.add(key)
        qrels.qids.append(fields[0])
        qrels.docs.append(fields[2])
        qrels.labels.append(label)
    return qrels


def _parse_run_by_line(data: bytes, source: str) -> Run:
    qids: list[bytes] = []
    docs: list[bytes] = []
    scores: list[float] = []
    seen: set[tuple[bytes, bytes]] = set()
    for number, fields in _lines(data):
        where = f"{source}:{number}"
        if len(fields) < 6:
            raise TrecFormatError(
                f"{where}: expected 6 columns 'qid Q0 docno rank score tag', found {len(fields)}"
            )
        try:
            score = float(fields[4])
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise TrecFormatError(
                f"{where}: expected a finite number as score (column 5), found {_show(fields[4])}"
            )
        key = (fields[0], fields[2])
        if key in seen:
            raise TrecFormatError(
                f"{where}: document {_show(fields[2])} retrieved twice for query "
                f"{_show(fields[0])}"
            )
        seen.add(key)
        qids.append(fields[0])
        docs.append(fields[2])
        scores.append(score)
    return Run(qids, docs, np.asarray(scores, dtype=np.float64))


def _check_unique(
    qids: list[bytes], docs: list[bytes], data: bytes, source: str, verb: str
) -> None:
    if len(set(zip(qids, docs, strict=True))) != len(qids):
        # Rare: re-read line by line to report the first repeated pair with its line number.
        if verb == "judged":
            _parse_qrels_by_line(data, source)
        else:
            _parse_run_by_line(data, source)


def _show(token: bytes) -> str:
    return repr(token.decode("utf-8", "replace"))
