"""TREC-format qrels (``qid iter docno label``) and runs (``qid Q0 docno rank score tag``).

Parsing takes the bytes of a file (``bytes`` or a memory map) and its name (for messages)
and returns columns, or raises ``TrecFormatError`` naming the file, the line and what was
expected. It reads nothing itself, except that a caller may name the file the bytes are
from, for numpy's C text reader to read it directly (faster than reading memory). A UTF-8
byte-order mark at the start of a file is skipped. Regular files take a fast path that
never makes a Python object per token (the C reader for ASCII text, a vectorised scan for
the rest); any irregular line sends the whole file through a line-by-line pass that finds
the exact error, so every path accepts the same files.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from monitor.offline.spec import INT64_MAX, INT64_MIN

if TYPE_CHECKING:
    from monitor.offline.ranking import FloatArray, IntArray

Data = bytes | mmap.mmap
"""The contents of a file."""

BytesArray = npt.NDArray[np.bytes_]
HashArray = npt.NDArray[np.uint64]
Columns = tuple[BytesArray, BytesArray, npt.NDArray[np.generic]]
"""A file's query ids, document ids and numbers (labels or scores, maybe still as text)."""

BYTE_ORDER_MARK = b"\xef\xbb\xbf"

_CHUNK_BYTES = 1 << 22
"""The vectorised scan reads this much at a time, so its scratch arrays stay small."""

_SAMPLE_BYTES = 1 << 16
"""The C reader's column widths are guessed from this much of the file, then checked."""


class TrecFormatError(ValueError):
    """Malformed TREC input; the message names the file, the line and what was expected."""


@dataclass(frozen=True, eq=False)
class Strings:
    """A column of byte strings (fixed width, NUL-padded: ids never hold a NUL), in file order.

    ``vocab`` (the sorted distinct values) and ``codes`` (each row's index into it) are
    worked out when first asked for. Sorted order is byte order, which is trec_eval's strcmp
    order for query and document ids.
    """

    values: BytesArray

    @classmethod
    def of(cls, values: Sequence[bytes] | BytesArray) -> Strings:
        array = np.asarray(values, dtype=np.bytes_).reshape(-1)
        return cls(np.ascontiguousarray(array))

    def __len__(self) -> int:
        return len(self.values)

    @property
    def vocab(self) -> BytesArray:
        return self._vocabulary[0]

    @property
    def codes(self) -> IntArray:
        return self._vocabulary[1]

    @cached_property
    def _vocabulary(self) -> tuple[BytesArray, IntArray]:
        values = self.values
        if not len(values):
            return values, np.zeros(0, dtype=np.int64)
        # files list a query's lines together: only the first of each run of equal
        # neighbours needs sorting
        head = np.empty(len(values), dtype=np.bool_)
        head[0] = True
        # ids of up to 7 bytes (most query ids) compare faster as one 64-bit word
        words = values.view(np.uint64) if values.dtype.itemsize == 8 else values
        np.not_equal(words[1:], words[:-1], out=head[1:])
        heads = values[head]
        order = byte_order(heads)
        ordered = heads[order]
        new = np.empty(len(heads), dtype=np.bool_)
        new[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        head_codes = np.empty(len(heads), dtype=np.int64)
        head_codes[order] = np.cumsum(new) - 1
        return ordered[new], head_codes[np.cumsum(head) - 1]

    @cached_property
    def hashes(self) -> HashArray:
        """A 64-bit hash of each value, the same for equal values whatever the array widths.
        Equal hashes do not prove equal values: callers compare."""
        return hash_strings(self.values)

    def codes_in(self, other: Strings) -> IntArray:
        """For each value of this vocabulary, its code in ``other``'s, or -1 when absent."""
        if not len(other.vocab):
            return np.full(len(self.vocab), -1, dtype=np.int64)
        where = np.searchsorted(other.vocab, self.vocab)
        clipped = np.minimum(where, len(other.vocab) - 1)
        return np.where(other.vocab[clipped] == self.vocab, clipped, -1).astype(np.int64)


@dataclass(frozen=True, eq=False)
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

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True, eq=False)
class Run:
    """Retrieved documents as parallel columns, one entry per line, in file order."""

    qids: Strings
    docs: Strings
    scores: FloatArray
    run_id: str = ""
    """The tag (sixth column) of the file's last line, which trec_eval prints as runid."""

    @classmethod
    def from_columns(
        cls, qids: Sequence[bytes], docs: Sequence[bytes], scores: Sequence[float],
        run_id: str = "",
    ) -> Run:
        return cls(
            Strings.of(qids), Strings.of(docs), np.asarray(scores, dtype=np.float64), run_id
        )

    def __len__(self) -> int:
        return len(self.scores)

    @cached_property
    def sorted_pairs(self) -> tuple[HashArray, IntArray]:
        """The (query, document) key of each line (``pair_keys``, queries by their codes),
        sorted, and the line of each sorted key. Worked out once: the check for repeated
        pairs and the match with judgments both search these."""
        keys = pair_keys(self.qids.codes, self.docs, len(self.qids.vocab))
        order = np.argsort(keys).astype(np.int64, copy=False)
        return keys[order], order


def parse_qrels(data: Data, source: str, *, path: str | None = None) -> Qrels:
    """Parse qrels: exactly four columns, the fourth a 64-bit integer label (-1: unjudged).

    ``path``, if given, is the file that holds ``data``: the C reader reads it from there.
    """
    data, path = _without_byte_order_mark(data, path)
    columns = _fast_columns(data, 4, (0, 2, 3), "i8", path)
    if columns is not None:
        qids, docs, values = columns
        labels = _integers(values)
        if labels is not None:
            qrels = Qrels(Strings(qids), Strings(docs), labels)
            if not _has_repeated_pair(qrels.qids, qrels.docs):
                return qrels
    return _parse_qrels_by_line(data, source)


def parse_run(data: Data, source: str, *, path: str | None = None) -> Run:
    """Parse a run: at least six columns (more are ignored), the fifth a score.

    A score is a number; one beyond the range of a double is infinite, as C's atof makes it
    in trec_eval, and ranks first (or last). NaN has no rank order and is refused. ``path``,
    if given, is the file that holds ``data``: the C reader reads it from there.
    """
    data, path = _without_byte_order_mark(data, path)
    columns = _fast_columns(data, 6, (0, 2, 4), "f8", path)
    if columns is not None:
        qids, docs, values = columns
        scores = _floats(values)
        if scores is not None and not np.isnan(scores).any():
            run = Run(Strings(qids), Strings(docs), scores, _last_tag(data))
            if not _repeats(run.sorted_pairs[0]):
                return run
    return _parse_run_by_line(data, source)


def _last_tag(data: Data) -> str:
    """The sixth column of the last line that is neither blank nor a comment."""
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end) + 1
        fields = bytes(data[start:end]).split()
        if fields and not fields[0].startswith(b"#"):
            return fields[5].decode("utf-8", "surrogateescape") if len(fields) > 5 else ""
        end = start - 1
    return ""


def pair_keys(
    query: IntArray, docs: Strings, queries: int, rows: IntArray | None = None
) -> HashArray:
    """(query, document) as one 64-bit key for each document (of ``rows``, default all):
    ``query`` (a code below ``queries``) in the high bits, the document's hash in the others.
    Equal keys are the same query, and the same document or a hash collision (callers
    compare the documents)."""
    shift = np.uint64(max(queries.bit_length(), 1))
    hashes = docs.hashes if rows is None else docs.hashes[rows]
    return (query.astype(np.uint64) << (np.uint64(64) - shift)) | (hashes >> shift)


def hash_strings(values: BytesArray) -> HashArray:
    """A 64-bit hash of each byte string: the sum of its 64-bit words times odd constants,
    then mixed (MurmurHash3's finaliser). NUL padding adds nothing, so the hash does not
    depend on the width of the array."""
    key = np.zeros(len(values), dtype=np.uint64)
    if not len(values):
        return key
    words = _words(values)
    product = np.empty_like(key)
    for column in range(words.shape[1]):
        key += np.multiply(words[:, column], _word_multiplier(column), out=product)
    for shift, multiplier in ((33, 0xFF51AFD7ED558CCD), (33, 0xC4CEB9FE1A85EC53), (33, 0)):
        key ^= np.right_shift(key, np.uint64(shift), out=product)
        if multiplier:
            key *= np.uint64(multiplier)
    return key


def _word_multiplier(column: int) -> np.uint64:
    return np.uint64((0x9E3779B97F4A7C15 * (2 * column + 1)) % 2**64 | 1)


def _words(values: BytesArray) -> npt.NDArray[np.uint64]:
    """The strings as rows of 64-bit words, NUL-padded (a view when the width allows)."""
    width = values.dtype.itemsize
    if width % 8 == 0:
        return values.view(np.dtype((np.uint64, (width // 8,))))
    padded = np.zeros((len(values), -(-width // 8) * 8), dtype=np.uint8)
    padded[:, :width] = np.ascontiguousarray(values).view(np.uint8).reshape(len(values), width)
    return padded.view(np.uint64)


def byte_order(array: BytesArray) -> IntArray:
    """argsort of fixed-width byte strings, done on big-endian 64-bit words (same order)."""
    width = array.dtype.itemsize
    words = np.zeros((len(array), -(-width // 8) * 8), dtype=np.uint8)
    words[:, :width] = np.ascontiguousarray(array).view(np.uint8).reshape(-1, width)
    keys = words.view(">u8")
    if keys.shape[1] == 1:
        return np.argsort(keys[:, 0], kind="stable").astype(np.int64)
    return np.lexsort(keys.T[::-1]).astype(np.int64)


def _has_repeated_pair(qids: Strings, docs: Strings) -> bool:
    """Whether two lines may name the same pair (equal keys; the line pass tells for sure)."""
    keys = pair_keys(qids.codes, docs, len(qids.vocab))
    keys.sort()
    return _repeats(keys)


def _repeats(sorted_keys: HashArray) -> bool:
    """Whether sorted keys hold a value twice."""
    return bool((sorted_keys[1:] == sorted_keys[:-1]).any())


def _without_byte_order_mark(data: Data, path: str | None) -> tuple[Data, str | None]:
    """The data after a byte-order mark, and the file to read them from if it has none."""
    if data[: len(BYTE_ORDER_MARK)] == BYTE_ORDER_MARK:
        return data[len(BYTE_ORDER_MARK):], None
    return data, path


def _integers(values: npt.NDArray[np.generic]) -> IntArray | None:
    try:
        return values.astype(np.int64, copy=False)
    except (ValueError, OverflowError):
        return None  # not a 64-bit integer: the line pass says where


def _floats(values: npt.NDArray[np.generic]) -> FloatArray | None:
    try:
        return values.astype(np.float64, copy=False)
    except ValueError:
        return None


def _fast_columns(
    data: Data, width: int, wanted: tuple[int, int, int], number: str, path: str | None
) -> Columns | None:
    """The ``wanted`` columns (id, id, number) if every non-blank line is regular, else None."""
    if _c_reader_fits(data):
        return _c_reader_columns(data, width, wanted, number, path)
    return _scanned_columns(data, width, wanted)


def _c_reader_fits(data: Data) -> bool:
    """Whether numpy's C reader splits ``data`` into the lines and fields the line pass does.

    It reads latin-1 text and splits on Unicode whitespace, which includes bytes 0x85 and
    0xA0 (in UTF-8 ids), 0x1C-0x1F and a lone CR; a '#' may begin a comment line.
    """
    if not len(data) or data.find(b"#") >= 0:
        return False
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.max() >= 128 or buf.min() < 9:  # not ASCII, or a control byte below tab
        return False
    # bytes 11-31 (CR among them) become 0-20 when 11 is taken away, the rest of ASCII
    # 21-116, tab and newline 254-255: the smallest difference says whether there are any
    scratch_bytes = np.empty(min(len(buf), _CHUNK_BYTES), dtype=np.uint8)
    lowest = min(
        int(np.subtract(chunk, 11, out=scratch_bytes[: len(chunk)]).min())
        for chunk in (buf[start:start + len(scratch_bytes)]
                      for start in range(0, len(buf), len(scratch_bytes)))
    )
    if lowest >= 21:
        return True
    others = 0  # control bytes besides tab and newline
    scratch = np.empty(min(len(buf), _CHUNK_BYTES), dtype=np.bool_)
    for start in range(0, len(buf), len(scratch)):  # a little memory, used again and again
        chunk = buf[start:start + len(scratch)]
        mask = scratch[: len(chunk)]
        others += int(np.count_nonzero(np.less(chunk, 32, out=mask)))
        others -= int(np.count_nonzero(np.equal(chunk, 10, out=mask)))
        others -= int(np.count_nonzero(np.equal(chunk, 9, out=mask)))
    if others:  # only CRs of CRLF line ends may remain
        carriage_returns = int(np.count_nonzero(buf == 13))
        line_ends = int(np.count_nonzero((buf[:-1] == 13) & (buf[1:] == 10)))
        return others == carriage_returns == line_ends
    return True


def _c_reader_columns(
    data: Data, width: int, wanted: tuple[int, int, int], number: str, path: str | None
) -> Columns | None:
    # the qrels' four columns are all read, so that a line with five is an error; of a run's,
    # the sixth is read too, so that a line with five is one
    columns = tuple(range(width)) if width == 4 else (*wanted, width - 1)
    sizes = _id_widths(data[:_SAMPLE_BYTES], wanted)
    for _ in range(2):
        table = _c_reader_table(data, path, width, columns, wanted, sizes, number)
        if table is None:
            return None  # not regular (or not a number): the line pass says where
        qids, docs = table["qid"], table["doc"]
        if not (_full(qids) or _full(docs)):
            return qids, docs, table["number"]
        # an id may have been cut at the guessed width: no id is longer than the longest line
        line_ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        longest = int(np.diff(line_ends, prepend=-1, append=len(data)).max())
        sizes = ((longest // 8 + 1) * 8, (longest // 8 + 1) * 8)
    return None


def _c_reader_table(
    data: Data,
    path: str | None,
    width: int,
    columns: tuple[int, ...],
    wanted: tuple[int, int, int],
    sizes: tuple[int, int],
    number: str,
) -> npt.NDArray[np.void] | None:
    """numpy's C reader over ``data`` (or the file ``path`` that holds them): one record per
    line, None if a line does not fit.

    The records put the document id, the query id and the number at multiples of 8 bytes, so
    that the ids' words and the numbers are read in place, without copies.
    """
    fields = {c: (f"c{c}", "S1") for c in columns}
    fields[wanted[0]] = ("qid", f"S{sizes[0]}")
    fields[wanted[1]] = ("doc", f"S{sizes[1]}")
    fields[wanted[2]] = ("number", number)
    offsets = {"doc": 0, "qid": sizes[1], "number": sizes[1] + sizes[0]}
    end = sizes[1] + sizes[0] + 8
    names = [fields[c][0] for c in columns]
    dtype = np.dtype({
        "names": names,
        "formats": [fields[c][1] for c in columns],
        "offsets": [offsets.get(name, end + i) for i, name in enumerate(names)],
        "itemsize": -(-(end + len(names)) // 8) * 8,
    })
    try:
        with warnings.catch_warnings():
            # numpy says so when blank lines do not count towards max_rows, or when there are
            # only blank lines
            warnings.filterwarnings("ignore", "(Input line|loadtxt: input contained no data)",
                                    UserWarning)
            return np.loadtxt(
                # given a path, it reads text in chunks; given memory, line after line
                path or io.BytesIO(data),
                dtype=dtype, usecols=None if width == 4 else columns, comments=None,
                encoding="latin-1", ndmin=1,
                # no more lines than this fit in the data; knowing a bound, the reader
                # allocates its table once instead of growing it
                max_rows=len(data) // (2 * width) + 1,
            )
    except (ValueError, OverflowError, OSError):
        return None


def _id_widths(sample: bytes, wanted: tuple[int, int, int]) -> tuple[int, int]:
    """Widths that the ids of ``sample`` fit in with a byte to spare, in whole words."""
    longest = [1, 1]
    for line in sample.split(b"\n")[:-1] or [sample]:
        fields = line.split()
        for i, column in enumerate(wanted[:2]):
            if len(fields) > column:
                longest[i] = max(longest[i], len(fields[column]))
    return (longest[0] // 8 + 1) * 8, (longest[1] // 8 + 1) * 8


def _full(ids: BytesArray) -> bool:
    """Whether some id fills its whole width (and may have been cut)."""
    size = ids.dtype.itemsize
    return bool(len(ids)) and bool(ids.view(np.dtype((np.uint8, (size,))))[:, -1].any())


def _scanned_columns(data: Data, width: int, wanted: tuple[int, int, int]) -> Columns | None:
    """The ``wanted`` columns when every non-blank line has exactly ``width`` fields, else None.

    None also for what only the line-by-line pass handles exactly: comment lines, NUL and
    control bytes other than ASCII whitespace. The numbers stay byte strings.
    """
    from concurrent.futures import ThreadPoolExecutor

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
    qids, docs, numbers = (
        np.concatenate([columns[i] for columns in scanned if columns is not None])
        for i in range(3)
    )
    return qids, docs, numbers


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


def _lines(data: Data) -> list[tuple[int, list[bytes]]]:
    out = []
    for number, line in enumerate(bytes(data).split(b"\n"), start=1):
        fields = line.split()
        if fields and not fields[0].startswith(b"#"):
            out.append((number, fields))
    return out


def _parse_qrels_by_line(data: Data, source: str) -> Qrels:
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
        if not INT64_MIN <= label <= INT64_MAX:
            raise TrecFormatError(
                f"{where}: relevance label {_show(fields[3])} is out of range (a 64-bit "
                f"integer, {INT64_MIN} to {INT64_MAX}, is expected)"
            )
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


def _parse_run_by_line(data: Data, source: str) -> Run:
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
            raise TrecFormatError(
                f"{where}: expected a number as score (column 5), found {_show(fields[4])}"
            ) from None
        if math.isnan(score):
            raise TrecFormatError(
                f"{where}: expected a number as score (column 5), found {_show(fields[4])}, "
                "which has no rank order"
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
    return Run.from_columns(qids, docs, scores, _last_tag(data))


def _check_no_nul(where: str, fields: list[bytes]) -> None:
    if any(b"\0" in field for field in fields):
        raise TrecFormatError(f"{where}: expected text, found a NUL byte")


def _show(token: bytes) -> str:
    return repr(token.decode("utf-8", "replace"))
