"""Event files as the pipeline reads them: plain or gzip-compressed JSONL (recognised by
their first bytes), OpenSearch ``_bulk`` exports (recognised by their first line), and the
lines of several files in event time order, sorted in bounded memory."""

from __future__ import annotations

import gzip
import heapq
import itertools
import json
import struct
import tempfile
from collections.abc import Iterator
from datetime import UTC, tzinfo
from pathlib import Path
from typing import BinaryIO, cast

import msgspec

from monitor.inputs.chain import indexed
from monitor.inputs.events import Rejection, Stamped
from monitor.inputs.timestamps import Timestamps

GZIP_MAGIC = b"\x1f\x8b"


def open_events(path: Path) -> BinaryIO:
    """A JSONL file, gzip-compressed or not (recognised by its first bytes)."""
    raw = path.open("rb")
    if raw.peek(2)[:2] == GZIP_MAGIC:
        return cast(BinaryIO, gzip.open(raw, "rb"))
    return raw


BULK_ACTIONS = tuple(
    ("{" + space + '"' + action + '"').encode()
    for action in ("index", "create", "update", "delete") for space in ("", " ")
)
"""How the action lines of an OpenSearch ``_bulk`` export begin."""
BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark some tools write at the start of a file."""
RUN_LINES = 200_000
"""Lines sorted in memory at a time when an input must be sorted by event time; longer
inputs are sorted in runs of this many lines, kept in temporary files, then merged."""

Line = tuple[str, int, bytes, str | None]
"""A line to replay: its file, its number there, its bytes, and the ``_bulk`` index it was
exported from (None outside ``_bulk`` exports)."""


def lines(path: Path) -> Iterator[Line]:
    """The lines of a file as they are (a UTF-8 byte order mark before the first dropped).
    A file whose first line that is not blank is a ``_bulk`` action is a ``_bulk`` export:
    its action lines become the hint of the document line after them (a ``delete`` action
    has none)."""
    source = str(path)
    with open_events(path) as stream:
        first = stream.readline()
        if first.startswith(BOM):
            first = first[len(BOM):]
        number = 1
        while first and not first.strip():  # (each rejected when fed: not JSON)
            yield source, number, first, None
            first = stream.readline()
            number += 1
        if not first:
            return
        if first.startswith(BULK_ACTIONS) and _bulk_action(first) is not None:
            yield from _bulk_lines(source, first, stream, number)
            return
        yield source, number, first, None
        # zipped in C: no Python frame resumed per line
        yield from zip(
            itertools.repeat(source), itertools.count(number + 1), stream,
            itertools.repeat(None),
        )


def _bulk_lines(source: str, first: bytes, stream: BinaryIO, start: int) -> Iterator[Line]:
    hint: str | None = None
    expect_document = False
    for number, line in enumerate(itertools.chain([first], stream), start):
        if line.startswith(BULK_ACTIONS) and not expect_document:
            action = _bulk_action(line)
            if action is not None:
                kind, hint = action
                expect_document = kind != "delete"
                continue
        if expect_document and hint is not None and line.startswith(b'{"doc"'):
            line = _unwrap_update(line)
        yield source, number, line, hint
        expect_document = False


def _bulk_action(line: bytes) -> tuple[str, str | None] | None:
    """(action, index) of a ``_bulk`` action line, or None when it is not one."""
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):  # the document line then says what is wrong
        return None
    if not isinstance(parsed, dict) or len(parsed) != 1:
        return None
    (kind, meta), = parsed.items()
    if not isinstance(meta, dict):
        return None
    index = meta.get("_index")
    return kind, index if isinstance(index, str) else None


def _unwrap_update(line: bytes) -> bytes:
    """The partial document of a ``_bulk`` update line (``{"doc": {...}}``)."""
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):  # the document line then says what is wrong
        return line
    if isinstance(parsed, dict) and isinstance(parsed.get("doc"), dict):
        return json.dumps(parsed["doc"]).encode()
    return line


def sorted_lines(paths: list[Path], sorting: Sorting | None = None) -> Iterator[Line]:
    """Every line of ``paths`` in event time order (then in file order), in bounded memory.

    A line's time is read cheaply (its ``timestamp`` only); a line without a readable time
    sorts first (it is rejected when fed, with its position). Runs of ``RUN_LINES`` lines are
    sorted in memory; longer inputs spill each run to a temporary file and merge them."""
    sorting = sorting or _SORTING
    sources = [str(path) for path in paths]
    index = {source: number for number, source in enumerate(sources)}
    with tempfile.TemporaryDirectory(prefix="searchmon-sort-") as scratch:
        runs: list[Iterator[tuple[float, int, int, int, bytes, str | None]]] = []
        run: list[tuple[float, int, int, int, bytes, str | None]] = []
        sequence = 0
        for path in paths:
            for source, number, line, hint in lines(path):
                sequence += 1
                run.append((sort_time(line, sorting), sequence, index[source], number, line,
                            hint))
                if len(run) == RUN_LINES:
                    run.sort()
                    runs.append(_spill(run, Path(scratch) / f"run-{len(runs)}"))
                    run = []
        run.sort()
        merged = heapq.merge(*runs, iter(run)) if runs else iter(run)
        for _, _, file_number, number, line, hint in merged:
            yield sources[file_number], number, line, hint


def _spill(
    run: list[tuple[float, int, int, int, bytes, str | None]], path: Path
) -> Iterator[tuple[float, int, int, int, bytes, str | None]]:
    """Write a sorted run to ``path``; return a reader of it (in the same order)."""
    with path.open("wb") as out:
        for time, sequence, file_number, number, line, hint in run:
            hint_bytes = (hint or "").encode()
            out.write(_RECORD.pack(time, sequence, file_number, number, len(line),
                                   len(hint_bytes)))
            out.write(line)
            out.write(hint_bytes)
    return _read_run(path)


_RECORD = struct.Struct("<dqiqii")


def _read_run(path: Path) -> Iterator[tuple[float, int, int, int, bytes, str | None]]:
    with path.open("rb") as run:
        while header := run.read(_RECORD.size):
            time, sequence, file_number, number, length, hint_length = _RECORD.unpack(header)
            line = run.read(length)
            hint = run.read(hint_length).decode() or None
            yield time, sequence, file_number, number, line, hint


_STAMP = msgspec.json.Decoder(Stamped)


class Sorting:
    """The timestamp policies lines are sorted by: naive times in the zone their format's
    configuration names (``[input]`` for a line with ``type``, ``[ubi]`` for one without),
    else UTC (such a line is rejected when it is fed; only its place is at stake)."""

    def __init__(self, native: tzinfo | None = None, ubi: tzinfo | None = None) -> None:
        self.native = Timestamps(native or UTC)
        self.ubi = Timestamps(ubi or UTC)


_SORTING = Sorting()


def sort_time(line: bytes, sorting: Sorting = _SORTING) -> float:
    """The event time of a line for sorting (-inf when it has none it can be sorted by)."""
    if line[:1] != b"{":
        line, _ = indexed(line, None)  # ``<index>\t<json>``
    try:
        stamped = _STAMP.decode(line)
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        return float("-inf")  # rejected when fed, with its position
    stamp, kind = stamped.timestamp, stamped.type
    if stamp is None and type(stamped.source) is dict:  # a search hit: its document's
        stamp, kind = stamped.source.get("timestamp"), stamped.source.get("type")
    if type(stamp) is not int and type(stamp) is not str:
        return float("-inf")
    policy = sorting.native if kind is not None else sorting.ubi
    time = policy.read(stamp)
    return float("-inf") if isinstance(time, Rejection) else time
