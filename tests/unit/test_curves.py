"""Interpolated precision at the eleven recall levels: trec_eval 10's iprec_at_recall."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.offline.curves import interpolated_precision, mean_curve
from monitor.offline.evaluate import rank_run
from monitor.offline.ranking import RankedLists
from monitor.offline.spec import RECALL_LEVELS
from monitor.offline.trec import parse_qrels, parse_run
from tests.support.files import DATA


def _golden(name: str) -> dict[tuple[str, float], float]:
    """iprec_at_recall_L per (query or all, L) of a trec_eval output of tests/data."""
    found = {}
    for line in (DATA / name).read_text().splitlines():
        measure, qid, value = (part.strip() for part in line.split("\t"))
        if measure.startswith("iprec_at_recall_"):
            found[(qid, float(measure.removeprefix("iprec_at_recall_")))] = float(value)
    return found


@pytest.mark.parametrize(("qrels", "run", "expected", "complete", "rel", "max_docs"), [
    ("qrels.test", "results.test", "out.test.aq", False, 1, None),
    ("qrels.test", "results.trunc", "out.test.aqc", True, 1, None),
    ("qrels.test", "results.trunc", "out.test.aqcM", True, 1, 100),
    ("qrels.rel_level", "results.test", "out.test.aql", False, 2, None),
])
def test_every_level_of_every_query_and_the_mean_equal_trec_eval(
    qrels: str, run: str, expected: str, complete: bool, rel: int, max_docs: int | None
) -> None:
    ranked = rank_run(
        parse_qrels((DATA / qrels).read_bytes(), qrels), parse_run((DATA / run).read_bytes(), run),
        complete=complete, max_docs=max_docs,
    )
    query_ids = ranked.query_ids
    golden = _golden(expected)
    values = interpolated_precision(ranked.lists, rel)
    ours = {(qid, level): round(float(values[i, j]), 4)
            for i, qid in enumerate(query_ids) for j, level in enumerate(RECALL_LEVELS)}
    curve = mean_curve(values)
    assert curve is not None
    ours |= {("all", level): round(value, 4) for level, value in zip(RECALL_LEVELS, curve,
                                                                        strict=True)}
    assert ours == golden


@pytest.mark.parametrize(("ranking", "labels", "expected"), [
    # R = 2; relevant at ranks 2 and 4: precisions 1/2 and 2/4; recall 0.1..0.5 needs the
    # first (lround(r * 2) <= 1: 0.5 at rank 2), 0.6..1.0 the second (0.5 at rank 4)
    (["a", "b", "c", "d"], {"b": 1, "d": 1}, [0.5] * 11),
    # R = 4, two retrieved at ranks 1 and 3: 1/1, 2/3; levels needing 3 or 4 relevant get 0;
    # lround(r * 4) is 0, 0, 1, 1 for 0.0..0.3: 1.0; 2, 2, 2 for 0.4..0.6 (1.6, 2.0, 2.4): 2/3;
    # 3 from 0.7 (2.8) on: 0
    (["a", "x", "b"], {"a": 1, "b": 1, "c": 1, "d": 1},
     [1.0, 1.0, 1.0, 1.0, 2 / 3, 2 / 3, 2 / 3, 0.0, 0.0, 0.0, 0.0]),
    # a later rank can raise an earlier level: relevant at 3, 4 (1/3, 2/4): level of the first
    # is max(1/3, 1/2)
    (["x", "y", "a", "b"], {"a": 1, "b": 1}, [0.5] * 11),
    # nothing relevant retrieved, or nothing relevant at all: 0 everywhere
    (["x", "y"], {"a": 1}, [0.0] * 11),
    (["x", "y"], {"x": 0}, [0.0] * 11),
    ([], {"a": 1}, [0.0] * 11),
])
def test_hand_checked_curves(ranking: list[str], labels: dict[str, int],
                             expected: list[float]) -> None:
    values = interpolated_precision(RankedLists.from_lists([ranking], [labels]))
    assert values.tolist() == [pytest.approx(expected)]


def test_queries_are_kept_apart() -> None:
    """A query's later ranks never lift another query's levels."""
    lists = RankedLists.from_lists([["x", "a"], ["b"]], [{"a": 1}, {"b": 1}])
    assert interpolated_precision(lists).tolist() == [[0.5] * 11, [1.0] * 11]


def test_a_mean_over_no_queries_is_absent() -> None:
    assert mean_curve(np.zeros((0, 11))) is None


@given(st.lists(st.lists(st.integers(-1, 2), max_size=12), min_size=1, max_size=6),
       st.lists(st.integers(0, 4), min_size=6, max_size=6))
def test_curves_fall_and_stay_between_0_and_1(ranked: list[list[int]], unretrieved: list[int]
                                              ) -> None:
    rankings = [[f"d{i}" for i in range(len(labels))] for labels in ranked]
    qrels = [{**{f"d{i}": label for i, label in enumerate(labels)},
              **{f"u{i}": 1 for i in range(extra)}}
             for labels, extra in zip(ranked, unretrieved, strict=False)]
    values = interpolated_precision(RankedLists.from_lists(rankings, qrels))
    assert ((values >= 0) & (values <= 1)).all()
    assert (np.diff(values, axis=1) <= 1e-15).all()
