"""Golden tests: every measure we support equals trec_eval 10's own expected output.

The expected files are trec_eval's test data (see tests/data/README.md); each line is
``measure<TAB>query<TAB>value`` printed with %.4f.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from monitor.cli.main import main
from monitor.offline.evaluate import Evaluation, evaluate
from monitor.offline.spec import MeasureSpec
from monitor.offline.trec import parse_qrels, parse_run
from tests.support.files import DATA

_CUT = re.compile(r"^(P|recall|map_cut|ndcg_cut|success|unj)_(\d+)$")
_PLAIN = {"map": "AP", "ndcg": "nDCG", "recip_rank": "RR", "Rprec": "Rprec", "bpref": "bpref"}
_CUT_NAMES = {
    "P": "P", "recall": "R", "map_cut": "AP", "ndcg_cut": "nDCG", "success": "Success",
    "unj": "Judged",
}

# one line of a trec_eval output: its measure name, the query id, our spec, the value
_Row = tuple[str, str, MeasureSpec, float]


def _ours(trec_name: str) -> MeasureSpec | None:
    if trec_name in _PLAIN:
        return MeasureSpec(_PLAIN[trec_name])
    if trec_name == "gm_map":
        return MeasureSpec("GMAP")
    cut = _CUT.match(trec_name)
    if cut:
        return MeasureSpec(_CUT_NAMES[cut[1]], cutoff=int(cut[2]))
    return None


def _expected(name: str) -> list[_Row]:
    rows = []
    for line in (DATA / name).read_text().splitlines():
        trec_name, qid, value = (part.strip() for part in line.split("\t"))
        spec = _ours(trec_name)
        if spec is not None:
            rows.append((trec_name, qid, spec, float(value)))
    return rows


def _evaluate(
    qrels: str, run: str, rows: list[_Row], *, complete: bool, rel: int,
    max_docs: int | None = None,
) -> Evaluation:
    specs = sorted({spec for _, _, spec, _ in rows}, key=str)
    return evaluate(
        parse_qrels((DATA / qrels).read_bytes(), qrels),
        parse_run((DATA / run).read_bytes(), run),
        [s.with_relevance_level(rel) for s in specs],
        complete=complete, max_docs=max_docs,
    )


CASES = [
    ("out.test.aq", "qrels.test", "results.test", False, 1, None),
    ("out.test.aqc", "qrels.test", "results.trunc", True, 1, None),
    ("out.test.aqcM", "qrels.test", "results.trunc", True, 1, 100),
    ("out.test.aql", "qrels.rel_level", "results.test", False, 2, None),
]


@pytest.mark.parametrize(("expected", "qrels", "run", "complete", "rel", "max_docs"), CASES)
def test_every_supported_measure_matches_trec_eval(
    expected: str, qrels: str, run: str, complete: bool, rel: int, max_docs: int | None
) -> None:
    rows = _expected(expected)
    evaluation = _evaluate(qrels, run, rows, complete=complete, rel=rel, max_docs=max_docs)
    num_ret = {r[1]: r[2] for r in _raw(expected) if r[0] == "num_ret"}
    checked = 0
    mismatches = []
    for trec_name, qid, spec, value in rows:
        spec = spec.with_relevance_level(rel)
        if trec_name.startswith("unj_"):
            # unj_k = 1 - Judged@k when at least k documents were retrieved; below that
            # trec_eval pads with judged documents while Judged@k divides by k.
            if qid == "all" and min(num_ret.values()) < spec.cutoff:  # type: ignore[operator]
                continue
            if qid != "all" and num_ret[qid] < spec.cutoff:  # type: ignore[operator]
                continue
            value = 1.0 - value
        if qid == "all":
            ours = evaluation.summary[spec]
        else:
            ours = float(evaluation.values[spec][evaluation.query_ids.index(qid)])
        assert ours is not None and not math.isnan(ours)
        if f"{ours:.4f}" != f"{value:.4f}":
            mismatches.append((trec_name, qid, f"{ours:.4f}", f"{value:.4f}"))
        checked += 1
    assert mismatches == []
    assert checked > 150


def _raw(name: str) -> list[tuple[str, str, float]]:
    rows = []
    for line in (DATA / name).read_text().splitlines():
        trec_name, qid, value = (part.strip() for part in line.split("\t"))
        if trec_name == "num_ret":
            rows.append((trec_name, qid, float(value)))
    return rows


def test_complete_flag_scores_the_missing_query_zero_and_counts_it() -> None:
    rows = _expected("out.test.aqc")
    evaluation = _evaluate("qrels.test", "results.trunc", rows, complete=True, rel=1)
    assert evaluation.query_ids == ["301", "302", "303"]
    assert float(evaluation.values[MeasureSpec("AP", rel=1)][1]) == 0.0


def test_a_mean_on_a_rounding_tie_prints_as_trec_eval_prints_it() -> None:
    """8 queries whose P@20 add up to 2.05: the mean 0.25625 sits on a tie of the fourth
    decimal. trec_eval adds the per-query values in query order and prints 0.2562; numpy's
    pairwise mean gave 0.25625000000000003, printed 0.2563."""
    relevant = [8, 0, 9, 7, 1, 15, 1, 0]
    qrels = "".join(f"q{n} 0 d{n}-{i} 1\n" for n, count in enumerate(relevant, 1)
                    for i in range(count)) + "".join(f"q{n} 0 other 0\n" for n in range(1, 9))
    run = "".join(f"q{n} Q0 d{n}-{i} {i + 1} {100 - i} r\n" for n in range(1, 9)
                  for i in range(20))
    found = evaluate(parse_qrels(qrels.encode(), "qrels"), parse_run(run.encode(), "run"),
                     [MeasureSpec("P", cutoff=20)])
    mean = found.summary[MeasureSpec("P", cutoff=20)]
    assert mean is not None and f"{mean:.4f}" == "0.2562"


MEAS_PARAMS = [
    "-miprec_at_recall..10,.20,.25,.75,.50", "-m", "P.5,7,3", "-m", "recall.20,2000",
    "-m", "Rprec_mult.5.0,0.2,0.35", "-mutility.2,-1,0,0", "-m", "11pt_avg..25,.5,.75",
    "-mndcg.1=3,2=9,4=4.5", "-mndcg_cut.10,20,23.4", "-msuccess.2,5,20",
]
BYTE_CASES = [  # trec_eval's quicktest commands (tests/data/README.md), "official" for none
    ("out.test", ["-m", "official", "qrels.test", "results.test"]),
    ("out.test.a", ["-m", "all_trec", "qrels.test", "results.test"]),
    ("out.test.aq", ["-m", "all_trec", "-q", "qrels.test", "results.test"]),
    ("out.test.aqc", ["-m", "all_trec", "-q", "-c", "qrels.test", "results.trunc"]),
    ("out.test.aqcM", ["-m", "all_trec", "-q", "-c", "-M", "100", "qrels.test", "results.trunc"]),
    ("out.test.aql", ["-m", "all_trec", "-mrelstring.20", "-q", "-l", "2", "qrels.rel_level",
                      "results.test"]),
    ("out.test.meas_params", ["-q", *MEAS_PARAMS, "qrels.test", "results.test"]),
]


@pytest.mark.parametrize(("expected", "arguments"), BYTE_CASES)
def test_output_is_trec_evals_byte_for_byte(
    expected: str, arguments: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(DATA / a) if (DATA / a).is_file() else a for a in arguments]
    assert main(["eval", *files]) == 0
    assert capsys.readouterr().out == (DATA / expected).read_text()


def test_with_complete_the_num_rel_summary_counts_the_qrels_as_trec_eval_does() -> None:
    """trec_eval's num_rel summary under -c counts the qrels lines labelled above 0, of every
    query and whatever -l says (``te_calc_avg_num_rel``); per query, -l counts."""
    qrels = parse_qrels((DATA / "qrels.rel_level").read_bytes(), "qrels.rel_level")
    run = parse_run((DATA / "results.trunc").read_bytes(), "results.trunc")
    spec = MeasureSpec("num_rel").with_relevance_level(2)
    found = evaluate(qrels, run, [spec], complete=True)
    assert found.summary[spec] == int((qrels.labels > 0).sum()) == 559
    assert sum(found.values[spec]) == 97


def test_ids_that_are_no_utf8_print_byte_for_byte_and_stay_apart(tmp_path: Path) -> None:
    """trec_eval prints the bytes of an id as they were; two ids that are no UTF-8 are two
    queries, in the text and in --json."""
    import json
    import subprocess
    import sys

    (tmp_path / "q").write_bytes(b"\xe8 0 d1 1\n\xe9 0 d1 1\n\xe9 0 d2 1\n")
    (tmp_path / "r").write_bytes(b"\xe8 Q0 d1 1 3 r\xe9n\n\xe9 Q0 d1 1 3 r\xe9n\n")
    command = [sys.executable, "-m", "monitor", "eval", "-q", "-m", "runid", "-m", "map",
               str(tmp_path / "q"), str(tmp_path / "r")]
    text = subprocess.run(command, capture_output=True, check=True).stdout
    assert text == (b"map                   \t\xe8\t1.0000\nmap                   \t\xe9\t0.5000\n"
                    b"runid                 \tall\tr\xe9n\n"
                    b"map                   \tall\t0.7500\n")  # trec_eval 10's bytes
    found = json.loads(subprocess.run([*command, "--json"], capture_output=True,
                                      check=True).stdout)
    assert found["map"] == dict([(chr(0xDCE8), 1.0), (chr(0xDCE9), 0.5), ("all", 0.75)])
