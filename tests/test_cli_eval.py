"""``searchmon eval`` as a user runs it: a separate process, real files, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA

QRELS, RUN = str(DATA / "qrels.test"), str(DATA / "results.test")


def searchmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args], capture_output=True, text=True, timeout=60
    )


def summary_lines(stdout: str) -> dict[str, float]:
    rows = [line.split("\t") for line in stdout.splitlines()]
    return {name.strip(): float(value) for name, qid, value in rows if qid == "all"}


def test_summary_matches_trec_eval_figures() -> None:
    done = searchmon("eval", QRELS, RUN, "-m", "map", "-m", "P.5,10", "-m", "nDCG@10")
    assert done.returncode == 0, done.stderr
    # out.test.aq: map 0.1785, P_5 0.2667, P_10 0.3000, ndcg_cut_10 0.3016
    assert summary_lines(done.stdout) == {
        "map": 0.1785, "P_5": 0.2667, "P_10": 0.3, "nDCG@10": 0.3016
    }
    assert done.stdout.splitlines()[0].startswith("map                   \tall\t")


def test_per_query_lines_come_first_and_name_each_query() -> None:
    done = searchmon("eval", QRELS, RUN, "-m", "AP", "-q")
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    assert [qid for _, qid, _ in rows][-1] == "all"
    per_query = [qid for _, qid, _ in rows[:-1]]
    assert per_query == sorted(per_query) and len(per_query) > 1


def test_json_shape() -> None:
    done = searchmon("eval", QRELS, RUN, "-m", "P@5", "-m", "GMAP", "-q", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) == {"P@5", "GMAP"}
    assert round(out["P@5"]["all"], 4) == 0.2667
    assert len(out["P@5"]) > 1 and set(out["GMAP"]) == {"all"}


def test_complete_and_relevance_level_change_the_query_set_and_threshold(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels"
    qrels.write_text("1 0 a 2\n1 0 b 1\n2 0 c 1\n")
    run = tmp_path / "run"
    run.write_text("1 Q0 a 1 2.0 t\n1 Q0 b 2 1.0 t\n")
    plain = json.loads(searchmon("eval", str(qrels), str(run), "-m", "P@2", "--json").stdout)
    complete = json.loads(
        searchmon("eval", str(qrels), str(run), "-m", "P@2", "-c", "--json").stdout
    )
    strict = json.loads(
        searchmon("eval", str(qrels), str(run), "-m", "P@2", "-l", "2", "--json").stdout
    )
    assert plain["P@2"]["all"] == 1.0  # query 2 is not in the run
    assert complete["P@2"]["all"] == 0.5  # -c: query 2 scores 0
    assert strict["P@2"]["all"] == 0.5  # -l 2: only "a" is relevant


def test_skipped_queries_are_counted_on_stderr(tmp_path: Path) -> None:
    qrels = tmp_path / "qrels"
    qrels.write_text("1 0 a 1\n2 0 c 0\n")
    run = tmp_path / "run"
    run.write_text("1 Q0 a 1 2.0 t\n2 Q0 c 1 2.0 t\n")
    done = searchmon("eval", str(qrels), str(run), "-m", "AP(no_rel=skip)", "-m", "AP")
    assert done.returncode == 0
    assert summary_lines(done.stdout) == {"AP(no_rel=skip)": 1.0, "AP": 0.5}
    assert "AP(no_rel=skip): 1 queries without relevant judged documents skipped" in done.stderr


@pytest.mark.parametrize(
    ("qrels_text", "run_text", "message"),
    [
        ("1 0 a\n", "1 Q0 a 1 1.0 t\n", "qrels:1: expected 4 columns"),
        ("1 0 a 1\n1 0 b high\n", "1 Q0 a 1 1.0 t\n", "qrels:2: expected an integer relevance"),
        ("1 0 a 1\n1 0 a 0\n", "1 Q0 a 1 1.0 t\n", "qrels:2: document 'a' judged twice"),
        ("1 0 a 1\n", "1 Q0 a 1 1.0 t\n1 Q0 b 2\n", "run:2: expected 6 columns"),
        ("1 0 a 1\n", "1 Q0 a 1 1.0 t\n1 Q0 b 2 nan t\n", "run:2: expected a finite number"),
        ("1 0 a 1\n", "1 Q0 a 1 1.0 t\n1 Q0 a 2 0.5 t\n", "run:2: document 'a' retrieved twice"),
    ],
)
def test_malformed_input_names_file_and_line_and_exits_2(
    tmp_path: Path, qrels_text: str, run_text: str, message: str
) -> None:
    (tmp_path / "qrels").write_text(qrels_text)
    (tmp_path / "run").write_text(run_text)
    done = searchmon("eval", str(tmp_path / "qrels"), str(tmp_path / "run"))
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_measure_and_missing_file_exit_2(tmp_path: Path) -> None:
    done = searchmon("eval", QRELS, RUN, "-m", "nDCG@x")
    assert done.returncode == 2 and "expected NAME[(param=value,...)][@k]" in done.stderr
    done = searchmon("eval", str(tmp_path / "absent"), RUN)
    assert done.returncode == 2 and "cannot read" in done.stderr
    assert "Traceback" not in done.stderr
