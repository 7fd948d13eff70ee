"""Matching run lines to judgments by hashed ids: collisions fall back to the exact match."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import numpy as np
import pytest

from monitor.offline import evaluate as evaluate_module
from monitor.offline import trec
from monitor.offline.evaluate import Evaluation, evaluate
from monitor.offline.spec import MeasureSpec, parse_measure

if TYPE_CHECKING:
    from monitor.offline.ranking import IntArray

SPECS = [parse_measure(m) for m in ("P@5", "AP", "nDCG@10", "bpref", "Judged(negative=judged)@10")]


def collection(seed: int) -> tuple[bytes, bytes]:
    rng = random.Random(seed)
    qrels, run = [], []
    for q in range(30):
        docs = [f"d{q % 4}-{i}" for i in range(40)]  # the same ids under several queries
        for doc in rng.sample(docs, 20):
            qrels.append(f"q{q} 0 {doc} {rng.choice([-1, 0, 1, 2])}\n")
        for rank, doc in enumerate(rng.sample(docs, 25)):
            run.append(f"q{q} Q0 {doc} {rank} {rng.randint(0, 9)} t\n")
    rng.shuffle(run)
    return "".join(qrels).encode(), "".join(run).encode()


def evaluation(qrels: bytes, run: bytes) -> Evaluation:
    return evaluate(trec.parse_qrels(qrels, "q"), trec.parse_run(run, "r"), SPECS, complete=True)


@pytest.mark.parametrize("hash_bits", [0, 3])
def test_colliding_hashes_change_nothing(monkeypatch: pytest.MonkeyPatch, hash_bits: int) -> None:
    qrels, run = collection(seed=hash_bits)
    expected = evaluation(qrels, run)
    real = trec.hash_strings
    # keep only a few bits of every hash: ids of a query then share hashes all the time
    monkeypatch.setattr(
        trec, "hash_strings", lambda values: real(values) & np.uint64((1 << hash_bits) - 1)
    )
    exact = evaluate_module._judgments_by_vocabulary
    calls: list[int] = []

    def counted(qrels: trec.Qrels, run: trec.Run) -> IntArray:
        calls.append(1)
        return exact(qrels, run)

    monkeypatch.setattr(evaluate_module, "_judgments_by_vocabulary", counted)
    got = evaluation(qrels, run)
    assert calls, "the exact match decided"
    assert got.query_ids == expected.query_ids
    for spec in SPECS:
        np.testing.assert_array_equal(got.values[spec], expected.values[spec], err_msg=str(spec))


def test_hashes_do_not_depend_on_the_width_of_the_array() -> None:
    ids = [b"a", b"doc-12345678", b"x" * 17]
    narrow = trec.hash_strings(np.array(ids))
    wide = trec.hash_strings(np.array(ids, dtype="S40"))
    assert narrow.tolist() == wide.tolist()
    assert len(set(narrow.tolist())) == 3


def test_nothing_to_evaluate_is_no_error_for_the_library() -> None:
    empty_qrels = trec.parse_qrels(b"", "q")
    empty_run = trec.parse_run(b"", "r")
    some_qrels = trec.parse_qrels(b"q 0 a 1\n", "q")
    some_run = trec.parse_run(b"z Q0 a 1 1 t\n", "r")
    spec = MeasureSpec("P", cutoff=1)
    for qrels, run in ((empty_qrels, some_run), (some_qrels, empty_run), (empty_qrels, empty_run),
                       (some_qrels, some_run)):
        result = evaluate(qrels, run, [spec])
        assert result.query_ids == [] and result.shared_queries == 0
        assert result.summary[spec] is None
    complete = evaluate(some_qrels, some_run, [spec], complete=True)
    assert complete.query_ids == ["q"] and complete.summary[spec] == 0.0
