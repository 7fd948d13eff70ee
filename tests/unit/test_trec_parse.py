"""TREC parsing: the C reader, the vectorised scan and the line-by-line pass read files alike."""

from __future__ import annotations

import math
import mmap
import random
from pathlib import Path

import numpy as np
import pytest

from monitor.offline import trec
from tests.support.files import DATA

Parsed = tuple[list[bytes], list[bytes], list[float]]


def columns(parsed: trec.Qrels | trec.Run) -> Parsed:
    values = parsed.labels if isinstance(parsed, trec.Qrels) else parsed.scores
    return (
        parsed.qids.vocab[parsed.qids.codes].tolist(),
        parsed.docs.vocab[parsed.docs.codes].tolist(),
        [float(v) for v in values],
    )


def by_line(data: bytes, qrels: bool) -> Parsed:
    data = data.removeprefix(trec.BYTE_ORDER_MARK)
    parse = trec._parse_qrels_by_line if qrels else trec._parse_run_by_line
    return columns(parse(data, "f"))


def each_path(
    monkeypatch: pytest.MonkeyPatch, data: bytes, qrels: bool, file: Path | None = None
) -> dict[str, Parsed]:
    """What every path makes of ``data``: the C reader (when it may read it) from memory and
    from a memory-mapped ``file``, the scan."""
    parse = trec.parse_qrels if qrels else trec.parse_run
    out = {}
    if trec._c_reader_fits(data.removeprefix(trec.BYTE_ORDER_MARK)):
        out["c reader"] = columns(parse(data, "f"))
    if file is not None:
        file.write_bytes(data)
        with file.open("rb") as opened:
            mapped = mmap.mmap(opened.fileno(), 0, access=mmap.ACCESS_READ)
        out["file"] = columns(parse(mapped, "f", path=str(file)))
        mapped.close()
    with monkeypatch.context() as patched:
        patched.setattr(trec, "_c_reader_fits", lambda _: False)
        out["scan"] = columns(parse(data, "f"))
    return out


@pytest.mark.parametrize("chunk_bytes", [64, 1000, 1 << 22])
def test_every_path_reads_trec_test_data_alike(
    monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    monkeypatch.setattr(trec, "_CHUNK_BYTES", chunk_bytes)
    for name, qrels in (("qrels.test", True), ("results.test", False)):
        data = (DATA / name).read_bytes()
        assert trec._c_reader_fits(data)
        assert trec._scanned_columns(data, 4 if qrels else 6, (0, 2, 3) if qrels else (0, 2, 4))
        paths = each_path(monkeypatch, data, qrels)
        assert set(paths) == {"c reader", "scan"}
        for parsed in paths.values():
            assert parsed == by_line(data, qrels)


def test_random_layouts_agree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(trec, "_CHUNK_BYTES", 97)
    rng = random.Random(3)

    def sep() -> str:
        return rng.choice([" ", "\t", "  ", " \t "])

    for case in range(200):
        lines: list[str] = []
        for i in range(rng.randint(1, 40)):
            score = rng.choice([f"{rng.uniform(-5, 5):.4f}", "1e400", "-inf", str(i), "+2.5"])
            doc = rng.choice(["doc-", "d", "a-very-long-document-identifier-", "dà"]) + str(i)
            fields = [f"q{rng.randint(0, 5)}", "Q0", doc, str(i), score, "tag"]
            fields += ["extra"] if rng.random() < 0.2 else []
            line = sep().join(fields)
            lines.append(rng.choice(["", " ", "\t"]) + line if rng.random() < 0.9 else "")
        newline = "\r\n" if case % 5 == 0 else "\n"
        bom = "\ufeff" if case % 7 == 0 else ""
        data = (bom + newline.join(lines) + rng.choice(["", newline, newline * 2])).encode()
        if not any(lines):
            continue
        paths = each_path(monkeypatch, data, qrels=False, file=tmp_path / "run")
        for path, parsed in paths.items():
            assert parsed == by_line(data, qrels=False), (path, data)


def test_random_qrels_agree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rng = random.Random(4)
    for _ in range(100):
        lines = [
            f"q{rng.randint(0, 9)} 0 d{i} {rng.choice([-1, 0, 1, 2, 3, 2**40, -(2**63)])}"
            for i in range(rng.randint(1, 60))
        ]
        data = ("\n".join(lines) + "\n").encode()
        for path, parsed in each_path(monkeypatch, data, True, tmp_path / "qrels").items():
            assert parsed == by_line(data, qrels=True), path


def test_ids_longer_than_those_sampled_are_read_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(trec, "_SAMPLE_BYTES", 64)
    data = b"".join(b"q1 Q0 d%d 1 %d t\n" % (i, i) for i in range(20))
    data += b"q1 Q0 " + b"x" * 300 + b" 1 0.5 t\nq" + b"2" * 99 + b" Q0 d 1 1 t"
    run = trec.parse_run(data, "r")
    assert columns(run) == by_line(data, qrels=False)
    assert run.docs.values.dtype.itemsize > 300
    for parsed in each_path(monkeypatch, data, False, tmp_path / "run").values():
        assert parsed == by_line(data, qrels=False)


def test_control_bytes_and_comments_take_the_line_path() -> None:
    assert not trec._c_reader_fits(b"1 0 a\x1cb 1\n")
    assert not trec._c_reader_fits(b"# a b c\n1 0 a 1\n")
    assert not trec._c_reader_fits(b"1 0 a\r1 0 b 1\n")  # a lone CR ends no line here
    assert not trec._c_reader_fits(b"1 0 d\xc3\xa0 1\n")  # 0xA0 is whitespace to the reader
    assert trec._c_reader_fits(b"1 0 a 1\r\n1 0 b\t2\r\n")
    assert trec._scanned_columns(b"1 0 a\x01b 1\n", 4, (0, 2, 3)) is None
    assert trec._scanned_columns(b"# a b c\n1 0 a 1\n", 4, (0, 2, 3)) is None
    parsed = trec.parse_qrels(b"# a b c\n1 0 a 1\n", "q")
    assert columns(parsed) == ([b"1"], [b"a"], [1.0])
    assert columns(trec.parse_qrels(b"1 0 a\x1cb 1\n", "q")) == ([b"1"], [b"a\x1cb"], [1.0])
    with pytest.raises(trec.TrecFormatError, match="q:1: expected text, found a NUL byte"):
        trec.parse_qrels(b"1 0 a\x00 1\n", "q")


def test_a_byte_order_mark_is_skipped(tmp_path: Path) -> None:
    for data in (b"\xef\xbb\xbfq1 0 a 1\n", b"\xef\xbb\xbfq1 0 d\xc3\xa0 1\n",
                 b"\xef\xbb\xbf# judged\nq1 0 a 1\n"):
        assert trec.parse_qrels(data, "q").qids.vocab.tolist() == [b"q1"]
        # the file holds the mark: it is not handed to the C reader
        (tmp_path / "qrels").write_bytes(data)
        parsed = trec.parse_qrels(data, "q", path=str(tmp_path / "qrels"))
        assert parsed.qids.vocab.tolist() == [b"q1"]
    run = trec.parse_run(b"\xef\xbb\xbfq1 Q0 a 1 1 t\n", "r")
    assert run.qids.vocab.tolist() == [b"q1"]


def test_labels_are_64_bit_integers() -> None:
    big = trec.parse_qrels(b"q 0 a 9223372036854775807\nq 0 b -9223372036854775808\n", "q")
    assert big.labels.tolist() == [2**63 - 1, -(2**63)]
    with pytest.raises(trec.TrecFormatError, match=r"q:2: relevance label '9223372036854775808' "
                       r"is out of range \(a 64-bit integer"):
        trec.parse_qrels(b"q 0 a 1\nq 0 b 9223372036854775808\n", "q")
    with pytest.raises(trec.TrecFormatError, match="q:1: relevance label '-99999999999999999999'"):
        trec.parse_qrels(b"q 0 a -99999999999999999999\n", "q")


def test_scores_beyond_a_double_are_infinite_and_nan_is_refused() -> None:
    run = trec.parse_run(b"q Q0 a 1 1e400 t\nq Q0 b 2 -1e400 t\nq Q0 c 1e999 2 t\n", "r")
    assert run.scores.tolist() == [math.inf, -math.inf, 2.0]  # the rank column is not read
    for score in (b"nan", b"NaN", b"-nan"):
        with pytest.raises(trec.TrecFormatError, match="r:2: expected a number as score"):
            trec.parse_run(b"q Q0 a 1 1 t\nq Q0 b 2 " + score + b" t\n", "r")


def test_empty_files_parse_to_nothing() -> None:
    assert len(trec.parse_qrels(b"", "q").labels) == 0
    assert len(trec.parse_qrels(b"\xef\xbb\xbf# nothing\n\n", "q")) == 0
    assert np.asarray(trec.parse_run(b"\n\n", "r").scores).size == 0
    assert len(trec.parse_run(b"  \n\t\n", "r")) == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"q 0 a 1\nq 0 b 1 x\n", "f:2: expected 4 columns"),
        (b"q 0 a 1\nq 0 b\n", "f:2: expected 4 columns"),
        (b"q 0 a 1.0\n", "f:1: expected an integer relevance label, found '1.0'"),
        (b"q 0 a 1\nq 0 a 2\n", "f:2: document 'a' judged twice for query 'q'"),
    ],
)
def test_every_path_reports_the_line_pass_error(
    monkeypatch: pytest.MonkeyPatch, data: bytes, message: str
) -> None:
    with pytest.raises(trec.TrecFormatError, match=message):
        trec.parse_qrels(data, "f")
    monkeypatch.setattr(trec, "_c_reader_fits", lambda _: False)
    with pytest.raises(trec.TrecFormatError, match=message):
        trec.parse_qrels(data, "f")
