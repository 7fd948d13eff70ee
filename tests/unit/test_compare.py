"""Two runs' evaluations paired query by query, and the comparison's printed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.offline.compare import MeasureComparison, format_comparison_text, pair
from monitor.offline.evaluate import Evaluation
from monitor.offline.spec import MeasureSpec

AP, SKIP, GMAP = MeasureSpec("AP"), MeasureSpec("AP", no_rel="skip"), MeasureSpec("GMAP")


def _evaluation(values: dict[str, tuple[float, float, float]]) -> Evaluation:
    ids = sorted(values)
    columns = {spec: np.array([values[q][i] for q in ids]) for i, spec in
               enumerate((AP, SKIP, GMAP))}
    return Evaluation(ids, columns, {}, len(ids))


def test_only_queries_both_runs_have_and_neither_skipped_are_paired() -> None:
    a = _evaluation({"1": (0.5, 0.5, 0.5), "2": (0.2, math.nan, 0.2), "3": (0.1, 0.1, 0.1)})
    b = _evaluation({"2": (0.4, 0.4, 0.4), "3": (0.3, 0.3, 0.0), "4": (1.0, 1.0, 1.0)})
    ap, skip, gmap = pair(a, b, [("AP", AP), ("AP(no_rel=skip)", SKIP), ("GMAP", GMAP)])
    assert ap.query_ids == ["2", "3"] and ap.a.tolist() == [0.2, 0.1]
    assert ap.b.tolist() == [0.4, 0.3]
    assert ap.mean_a == pytest.approx(0.15) and ap.mean_b == pytest.approx(0.35)
    assert skip.query_ids == ["3"] and skip.mean_a == pytest.approx(0.1)
    # GMAP's summary is geometric, and its test compares the logs (0 floored at 1e-5)
    assert gmap.mean_b == pytest.approx(math.sqrt(0.4 * 1e-5))
    assert gmap.tested_b.tolist() == pytest.approx([math.log(0.4), math.log(1e-5)])
    assert ap.tested_b.tolist() == ap.b.tolist()


@pytest.mark.parametrize("name", ["GMAP", "gm_bpref"])
def test_a_geometric_mean_is_tested_on_the_logarithms_of_its_values(name: str) -> None:
    spec = MeasureSpec(name)
    a = Evaluation(["1", "2"], {spec: np.array([0.5, 0.0])}, {}, 2)
    b = Evaluation(["1", "2"], {spec: np.array([0.25, 0.5])}, {}, 2)
    [paired] = pair(a, b, [(name, spec)])
    assert paired.mean_a == pytest.approx(math.sqrt(0.5 * 1e-5))
    assert paired.tested_a.tolist() == pytest.approx([math.log(0.5), math.log(1e-5)])
    assert paired.tested_b.tolist() == pytest.approx([math.log(0.25), math.log(0.5)])


def test_the_text_names_the_runs_and_the_queries_then_a_line_per_measure() -> None:
    rows = [MeasureComparison("map", 3, 0.25, 0.3, 0.125, 0.04321),
            MeasureComparison("P_5", 0, None, None, 1.0, 1.0)]
    assert format_comparison_text(("a.run", "b.run"), (4, 3, 3), rows) == (
        "A\ta.run\t4 queries\n"
        "B\tb.run\t3 queries\n"
        "shared\t3 queries in both runs\n"
        "measure               \tmean_A\tmean_B\tB-A\tp_rand\tp_t\tqueries\n"
        "map                   \t0.2500\t0.3000\t+0.0500\t0.1250\t0.0432\t3\n"
        "P_5                   \t-\t-\t-\t1.0000\t1.0000\t0\n"
    )
