"""The SVG of ``eval --plot``: well-formed, the right numbers in it, the same bytes every time."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from monitor.offline.curves import interpolated_precision, mean_curve
from monitor.offline.evaluate import rank_run
from monitor.offline.plots import RunFigures, evaluation_svg
from monitor.offline.ranking import RankedLists
from monitor.offline.spec import RECALL_LEVELS
from monitor.offline.trec import parse_qrels, parse_run
from tests.support.files import DATA

SVG = "{http://www.w3.org/2000/svg}"


def _titles(svg: str, tag: str, cls: str) -> list[str]:
    root = ET.fromstring(svg)
    return [element.findtext(f"{SVG}title") or ""
            for element in root.iter(f"{SVG}{tag}") if element.get("class") == cls]


def _points(svg: str) -> dict[str, list[tuple[float, float]]]:
    """Per run name, the (recall, precision) of each point of its curve, read from the
    points' titles."""
    found: dict[str, list[tuple[float, float]]] = {}
    for title in _titles(svg, "circle", "point"):
        match = re.fullmatch(r"(.*): recall (\S+), interpolated precision (\S+)", title)
        assert match, title
        found.setdefault(match[1], []).append((float(match[2]), float(match[3])))
    return found


def _figures(name: str, rankings: list[list[str]], qrels: list[dict[str, int]],
             values: dict[str, float]) -> RunFigures:
    curve = mean_curve(interpolated_precision(RankedLists.from_lists(rankings, qrels)))
    return RunFigures(name, curve, values, sum(values.values()) / len(values))


# A hand-checked collection: two queries, R = 2 each.
# q1: relevant at ranks 1 and 3: precisions 1 and 2/3 -> levels 0..0.7 (lround(r*2) <= 1)
#     need the first: 1.0; 0.8..1.0 need the second: 2/3. (lround(0.7*2) = lround(1.4) = 1,
#     lround(0.8*2) = 2.)
# q2: one relevant at rank 2: 1/2 up to 0.7, 0 from 0.8 on (the second is never retrieved).
# Mean: 0.75 for 0.0..0.7, (2/3 + 0) / 2 = 1/3 for 0.8..1.0.
HAND_RANKINGS = [["a", "x", "b"], ["y", "c"]]
HAND_QRELS = [{"a": 1, "b": 1}, {"c": 1, "d": 1}]
HAND_CURVE = [0.75] * 8 + [1 / 3] * 3


def test_the_svg_parses_and_holds_the_hand_checked_curve() -> None:
    figures = _figures("hand", HAND_RANKINGS, HAND_QRELS, {"q1": 0.8333, "q2": 0.25})
    svg = evaluation_svg([figures], "AP", "hand collection")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    points = _points(svg)["hand"]
    assert [r for r, _ in points] == list(RECALL_LEVELS)
    assert [p for _, p in points] == pytest.approx(HAND_CURVE, abs=5e-5)
    # the polyline goes through the same points, top-left origin: higher precision, smaller y
    line = next(root.iter(f"{SVG}polyline")).get("points", "").split()
    ys = [float(xy.split(",")[1]) for xy in line]
    assert len(ys) == 11 and ys[0] == ys[7] < ys[8] == ys[10]
    assert "style" not in svg, "presentation attributes only: a page's CSP forbids style"


def test_the_trec_eval_collections_curve_is_trec_eval_s() -> None:
    """The mean iprec_at_recall of trec_eval's test run, as out.test.aq prints it."""
    golden = {}
    for line in (DATA / "out.test.aq").read_text().splitlines():
        measure, qid, value = (part.strip() for part in line.split("\t"))
        if measure.startswith("iprec_at_recall_") and qid == "all":
            golden[float(measure.removeprefix("iprec_at_recall_"))] = float(value)
    lists = rank_run(parse_qrels((DATA / "qrels.test").read_bytes(), "q"),
                     parse_run((DATA / "results.test").read_bytes(), "r")).lists
    curve = mean_curve(interpolated_precision(lists))
    svg = evaluation_svg([RunFigures("results.test", curve, {"301": 0.1}, 0.1)], "AP", "t")
    assert dict(_points(svg)["results.test"]) == golden


def test_two_runs_overlay_curves_pair_histograms_and_sort_the_differences() -> None:
    a = _figures("A.run", HAND_RANKINGS, HAND_QRELS, {"q1": 0.9, "q2": 0.25, "q3": 0.5})
    b = _figures("B.run", [["x", "a", "b"], ["c"]], HAND_QRELS,
                 {"q1": 0.5, "q2": 0.95, "q3": 0.5, "q4": 0.1})
    svg = evaluation_svg([a, b], "AP", "A against B")
    assert set(_points(svg)) == {"A.run", "B.run"}
    bins = _titles(svg, "rect", "bin")
    assert "A.run: 1 queries with AP in [0.9, 1.0]" in bins
    assert "B.run: 2 queries with AP in [0.5, 0.6)" in bins
    # shared queries only (q4 is B's alone), largest gain first, a tie by query id
    assert _titles(svg, "rect", "difference") == [
        "q2: 0.2500 to 0.9500 (+0.7000)", "q3: 0.5000 to 0.5000 (+0.0000)",
        "q1: 0.9000 to 0.5000 (-0.4000)",
    ]
    assert "1 better, 1 worse, 1 equal" in svg


def test_same_figures_same_bytes_and_names_are_escaped() -> None:
    figures = _figures("<run & co>", HAND_RANKINGS, HAND_QRELS, {"q<1>": 0.5})
    first = evaluation_svg([figures], "AP", "t")
    assert first == evaluation_svg([figures], "AP", "t")
    ET.fromstring(first)
    assert "&lt;run &amp; co&gt;" in first


def test_a_run_without_queries_draws_no_curve() -> None:
    svg = evaluation_svg([RunFigures("empty", None, {}, None)], "AP", "t")
    ET.fromstring(svg)
    assert _points(svg) == {} and "empty (no query)" in svg
