"""TREC parsing: the vectorised path and the line-by-line path read files identically."""

from __future__ import annotations

import random

import numpy as np
import pytest

from monitor.offline import trec
from tests.conftest import DATA


def columns(parsed: trec.Qrels | trec.Run) -> tuple[list[bytes], list[bytes], list[float]]:
    values = parsed.labels if isinstance(parsed, trec.Qrels) else parsed.scores
    return (
        parsed.qids.vocab[parsed.qids.codes].tolist(),
        parsed.docs.vocab[parsed.docs.codes].tolist(),
        [float(v) for v in values],
    )


@pytest.mark.parametrize("chunk_bytes", [64, 1000, 1 << 22])
def test_fast_and_line_paths_agree_on_trec_test_data(
    monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    monkeypatch.setattr(trec, "_CHUNK_BYTES", chunk_bytes)
    qrels = (DATA / "qrels.test").read_bytes()
    run = (DATA / "results.test").read_bytes()
    assert trec._regular_columns(run, 6, (0, 2, 4)) is not None, "fast path taken"
    assert columns(trec.parse_qrels(qrels, "q")) == columns(trec._parse_qrels_by_line(qrels, "q"))
    assert columns(trec.parse_run(run, "r")) == columns(trec._parse_run_by_line(run, "r"))


def test_random_layouts_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trec, "_CHUNK_BYTES", 97)
    rng = random.Random(3)

    def sep() -> str:
        return rng.choice([" ", "\t", "  ", " \t "])

    for _ in range(50):
        lines: list[str] = []
        for i in range(rng.randint(1, 40)):
            score = f"{rng.uniform(-5, 5):.4f}"
            fields = [f"q{rng.randint(0, 5)}", "Q0", f"doc-{i}", str(i), score, "tag"]
            fields += ["extra"] if rng.random() < 0.2 else []
            lines.append(sep().join(fields) if rng.random() < 0.9 else "")
        data = ("\n".join(lines) + rng.choice(["", "\n", "\n\n"])).encode()
        if not any(lines):
            continue
        assert columns(trec.parse_run(data, "r")) == columns(trec._parse_run_by_line(data, "r"))


def test_control_bytes_and_comments_take_the_line_path() -> None:
    assert trec._regular_columns(b"1 0 a\x01b 1\n", 4, (0, 2, 3)) is None
    assert trec._regular_columns(b"# a b c\n1 0 a 1\n", 4, (0, 2, 3)) is None
    parsed = trec.parse_qrels(b"# a b c\n1 0 a 1\n", "q")
    assert columns(parsed) == ([b"1"], [b"a"], [1.0])
    with pytest.raises(trec.TrecFormatError, match="q:1: expected text, found a NUL byte"):
        trec.parse_qrels(b"1 0 a\x00 1\n", "q")


def test_empty_files_parse_to_nothing() -> None:
    assert len(trec.parse_qrels(b"", "q").labels) == 0
    assert np.asarray(trec.parse_run(b"\n\n", "r").scores).size == 0
