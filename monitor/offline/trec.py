"""TREC-format qrels (``qid iter docno label``) and runs (``qid Q0 docno rank score tag``).

Parsing is pure: it takes the bytes of a file and its name (for messages) and returns
columns, or raises ``TrecFormatError`` naming the file, the line and what was expected.
Regular files take a vectorised path that never makes a Python object per token; any
irregular line sends the whole file through a line-by-line pass that finds the exact error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from monitor.offline.ranking import FloatArray, IntArray

BytesArray = npt.NDArray[np.bytes_]

_CHUNK_BYTES = 1 << 22
"""The fast path scans this much at a time, so its scratch arrays stay small and reused."""


class TrecFormatError(ValueError):
    """Malformed TREC input; the message names the file, the line and what was expected."""


@dataclass(frozen=True, slots=True)
class Strings:
    """A column of byte strings: its sorted distinct values and each row's index into them.

    Sorted order is byte order, which is trec_eval's strcmp order for query and document ids.
    """

    vocab: BytesArray
    codes: IntArray

    @classmethod
    def of(cls, values: Sequence[bytes] | BytesArray) -> Strings:
        array = np.asarray(values, dtype=np.bytes_).reshape(-1)
        if not len(array):
            return cls(array, np.zeros(0, dtype=np.int64))
        order = _byte_order(array)
        ordered = array[order]
        new = np.empty(len(array), dtype=np.bool_)
        new[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        codes = np.empty(len(array), dtype=np.int64)
        codes[order] = np.cumsum(new) - 1
        return cls(ordered[new], codes)

    def __len__(self) -> int:
        return len(self.codes)

    def codes_in(self, other: Strings) -> IntArray:
        """For each value of this vocabulary, its code in ``other``'s, or -1 when absent."""
        if not len(other.vocab):
            return np.full(len(self.vocab), -1, dtype=np.int64)
        where = np.searchsorted(other.vocab, self.vocab)
        clipped = np.minimum(where, len(other.vocab) - 1)
        return np.where(other.vocab[clipped] == self.vocab, clipped, -1).astype(np.int64)


@dataclass(frozen=True, slots=True)
class Qrels:
    """Judgments as parallel columns, one entry per line."""

    qids: Strings
    docs: Strings
    labels: IntArray

    @classmethod
    def from_columns(
        cls, qids: Sequence[bytes], docs: Sequence[bytes], labels: Sequence[int]
    ) -> Qrels:
        return cls(Strings.of(qids), Strings.of(docs), np.asarray(labels, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class Run:
    """Retrieved documents as parallel columns, one entry per line, in file order."""

    qids: Strings
    docs: Strings
    scores: FloatArray

    @classmethod
    def from_columns(
        cls, qids: Sequence[bytes], docs: Sequence[bytes], scores: Sequence[float]
    ) -> Run:
        return cls(Strings.of(qids), Strings.of(docs), np.asarray(scores, dtype=np.float64))


def parse_qrels(data: bytes, source: str) -> Qrels:
    """Parse qrels: exactly four columns, the fourth an integer label (-1: unjudged)."""
    columns = _regular_columns(data, 4, (0, 2, 3))
    if columns is not None:
        try:
            labels = columns[2].astype(np.int64)
        except ValueError:
            labels = None
        if labels is not None:
            qrels = Qrels(Strings.of(columns[0]), Strings.of(columns[1]), labels)
            if not _has_repeated_pair(qrels.qids, qrels.docs):
                return qrels
    return _parse_qrels_by_line(data, source)


def parse_run(data: bytes, source: str) -> Run:
    """Parse a run: at least six columns (more are ignored), the fifth a finite score."""
    columns = _regular_columns(data, 6, (0, 2, 4))
    if columns is not None:
        try:
            scores = columns[2].astype(np.float64)
        except ValueError:
            scores = None
        if scores is not None and bool(np.isfinite(scores).all()):
            run = Run(Strings.of(columns[0]), Strings.of(columns[1]), scores)
            if not _has_repeated_pair(run.qids, run.docs):
                return run
    return _parse_run_by_line(data, source)


def _regular_columns(data: bytes, width: int, wanted: tuple[int, ...]) -> list[BytesArray] | None:
    """The ``wanted`` columns when every non-blank line has exactly ``width`` fields, else None.

    None also for what only the line-by-line pass handles exactly: comment lines, NUL and
    control bytes other than ASCII whitespace.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    chunks = []
    start = 0
    while start < len(buf):
        stop = data.find(b"\n", min(start + _CHUNK_BYTES, len(data)) - 1)
        stop = len(data) if stop < 0 else stop + 1
        chunks.append(buf[start:stop])
        start = stop
    # numpy releases the GIL in this work, so chunks are scanned in parallel
    with ThreadPoolExecutor(max_workers=min(len(chunks), os.cpu_count() or 1) or 1) as pool:
        scanned = list(pool.map(lambda chunk: _chunk_columns(chunk, width, wanted), chunks))
    if not scanned or any(columns is None for columns in scanned):
        return None
    return [np.concatenate([columns[i] for columns in scanned if columns is not None])
            for i in range(len(wanted))]


def _chunk_columns(
    chunk: npt.NDArray[np.uint8], width: int, wanted: tuple[int, ...]
) -> list[BytesArray] | None:
    control = chunk < 32
    if control.any() and (((chunk < 9) | (chunk > 13)) & control).any():
        return None
    ink = (chunk > 32).view(np.int8)
    # token boundaries: +1 where a token starts, -1 just after it ends; they alternate
    bounds = np.flatnonzero(np.diff(ink, prepend=np.int8(0), append=np.int8(0)))
    starts, ends = bounds[0::2], bounds[1::2]
    if len(starts) % width:
        return None
    line_ends = np.flatnonzero(chunk == 10)
    if not len(line_ends) or line_ends[-1] != len(chunk) - 1:
        line_ends = np.append(line_ends, len(chunk))
    per_line = np.diff(np.searchsorted(starts, line_ends), prepend=0)
    if not np.all((per_line == 0) | (per_line == width)):
        return None
    if (chunk[starts[::width]] == ord("#")).any():
        return None
    return [_gather(chunk, starts[c::width], ends[c::width]) for c in wanted]


def _gather(chunk: npt.NDArray[np.uint8], starts: IntArray, ends: IntArray) -> BytesArray:
    """Fixed-width byte strings of the tokens ``chunk[starts[i]:ends[i]]``."""
    lengths = ends - starts
    width = int(lengths.max()) if len(lengths) else 1
    padded = np.concatenate((chunk, np.zeros(width, dtype=np.uint8)))
    matrix = sliding_window_view(padded, width)[starts]
    matrix *= np.arange(width) < lengths[:, None]
    return matrix.view(f"S{width}").reshape(-1)


def _byte_order(array: BytesArray) -> IntArray:
    """argsort of fixed-width byte strings, done on big-endian 64-bit words (same order)."""
    width = array.dtype.itemsize
    words = np.zeros((len(array), -(-width // 8) * 8), dtype=np.uint8)
    words[:, :width] = array.view(np.uint8).reshape(-1, width)
    keys = words.view(">u8")
    if keys.shape[1] == 1:
        return np.argsort(keys[:, 0], kind="stable").astype(np.int64)
    return np.lexsort(keys.T[::-1]).astype(np.int64)


def _has_repeated_pair(qids: Strings, docs: Strings) -> bool:
    keys = np.sort(qids.codes * max(len(docs.vocab), 1) + docs.codes)
    return bool((keys[1:] == keys[:-1]).any())


def _lines(data: bytes) -> list[tuple[int, list[bytes]]]:
    out = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        fields = line.split()
        if fields and not fields[0].startswith(b"#"):
            out.append((number, fields))
    return out


def _parse_qrels_by_line(data: bytes, source: str) -> Qrels:
    qids: list[bytes] = []
    docs: list[bytes] = []
    labels: list[int] = []
    seen: set[tuple[bytes, bytes]] = set()
    for number, fields in _lines(data):
        where = f"{source}:{number}"
        if len(fields) != 4:
            raise TrecFormatError(
                f"{where}: expected 4 columns 'qid iter docno label', found {len(fields)}"
            )
        _check_no_nul(where, fields)
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
        qids.append(fields[0])
        docs.append(fields[2])
        labels.append(label)
    return Qrels.from_columns(qids, docs, labels)


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
        _check_no_nul(where, fields)
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
    return Run.from_columns(qids, docs, scores)


def _check_no_nul(where: str, fields: list[bytes]) -> None:
    if any(b"\0" in field for field in fields):
        raise TrecFormatError(f"{where}: expected text, found a NUL byte")


def _show(token: bytes) -> str:
    return repr(token.decode("utf-8", "replace"))
