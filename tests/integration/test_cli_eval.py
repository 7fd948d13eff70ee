"""``searchmon eval`` as a user runs it: a separate process, real files, exit codes."""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.support.files import DATA
from tests.support.png import pixels

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
        ("1 0 a 1\n", "1 Q0 a 1 1.0 t\n1 Q0 b 2 nan t\n", "run:2: expected a number as score"),
        ("1 0 a 1\n1 0 b 99999999999999999999999\n", "1 Q0 a 1 1.0 t\n",
         "qrels:2: relevance label '99999999999999999999999' is out of range"),
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
    done = searchmon("eval", QRELS, RUN, "-m", "AP(denom=min_R_k)@99999999999999999999")
    assert done.returncode == 2 and "cutoff must be a positive integer (64-bit)" in done.stderr
    done = searchmon("eval", QRELS, RUN, "-l", "99999999999999999999")
    assert done.returncode == 2 and "-l: expected an integer (64-bit)" in done.stderr
    done = searchmon("eval", str(tmp_path / "absent"), RUN)
    assert done.returncode == 2 and "cannot read" in done.stderr
    done = searchmon("eval", QRELS, str(tmp_path))  # a directory
    assert done.returncode == 2 and "cannot read" in done.stderr
    assert "Traceback" not in done.stderr


def test_trec_eval_names_print_as_trec_eval_prints_them() -> None:
    done = searchmon("eval", QRELS, RUN, "-m", "ndcg_cut.5,10", "-m", "map_cut.5,10",
                     "-m", "P.5", "-m", "recall.10", "-m", "success.1,5")
    assert done.returncode == 0, done.stderr
    # names and values of trec_eval 10's own output, out.test.aq
    assert summary_lines(done.stdout) == {
        "ndcg_cut_5": 0.2768, "ndcg_cut_10": 0.3016, "map_cut_5": 0.0154,
        "map_cut_10": 0.0259, "P_5": 0.2667, "recall_10": 0.0317, "success_1": 0.3333,
        "success_5": 0.3333,
    }


def test_our_names_print_canonically_and_parse_back() -> None:
    done = searchmon("eval", QRELS, RUN, "-m", "nDCG(ideal=retrieved, gain=exp)@5", "--json")
    assert done.returncode == 0, done.stderr
    assert list(json.loads(done.stdout)) == ["nDCG(gain=exp,ideal=retrieved)@5"]


def eval_files(
    tmp_path: Path, qrels: bytes, run: bytes, *args: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "qrels").write_bytes(qrels)
    (tmp_path / "run").write_bytes(run)
    return searchmon("eval", str(tmp_path / "qrels"), str(tmp_path / "run"), *args)


@pytest.mark.parametrize(
    ("qrels", "run", "message"),
    [
        (b"", b"1 Q0 a 1 1.0 t\n", "qrels: no judgments (the file is empty"),
        (b"# judged later\n\n  \n", b"1 Q0 a 1 1.0 t\n", "qrels: no judgments"),
        (b"1 0 a 1\n", b"", "run: no results (the file is empty"),
        (b"1 0 a 1\n", b"# nothing retrieved\n", "run: no results"),
        (b"", b"", "qrels: no judgments"),
        # trec_eval 9: "No queries with both results and relevance info" (exit 7); 10.0: exit 4
        (b"1 0 a 1\n", b"2 Q0 a 1 1.0 t\n", "no query of"),
    ],
)
def test_files_without_anything_to_evaluate_exit_2(
    tmp_path: Path, qrels: bytes, run: bytes, message: str
) -> None:
    done = eval_files(tmp_path, qrels, run)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_run_sharing_no_query_with_complete_scores_zero_and_says_so(tmp_path: Path) -> None:
    done = eval_files(tmp_path, b"1 0 a 1\n", b"2 Q0 a 1 1.0 t\n", "-c", "-m", "P@1")
    assert done.returncode == 0, done.stderr
    assert summary_lines(done.stdout) == {"P@1": 0.0}
    assert "every query scores as an empty ranking" in done.stderr


def test_a_query_the_run_lacks_is_left_out_without_complete(tmp_path: Path) -> None:
    """trec_eval 9's behaviour, not trec_eval 10.0's (exit code 4, no output): see cli.md."""
    qrels, run = b"1 0 a 1\n1 0 b 0\n2 0 c 1\n", b"1 Q0 a 1 2.0 t\n3 Q0 z 1 1.0 t\n"
    done = eval_files(tmp_path, qrels, run, "-m", "num_q", "-m", "map")
    assert done.returncode == 0, done.stderr
    assert summary_lines(done.stdout) == {"num_q": 1.0, "map": 1.0}
    complete = eval_files(tmp_path, qrels, run, "-c", "-m", "num_q", "-m", "map")
    assert complete.returncode == 0, complete.stderr
    assert summary_lines(complete.stdout) == {"num_q": 2.0, "map": 0.5}


def test_huge_labels_and_scores_are_numbers_not_errors(tmp_path: Path) -> None:
    qrels = b"1 0 a 5000\n1 0 b 1024\n1 0 c 0\n1 0 d 9223372036854775807\n"
    # 1e400 overflows to infinity (trec_eval's atof does the same) and ranks first; the
    # rank column is not read at all
    run = b"1 Q0 c 1e999 -1e400 t\n1 Q0 b x 1e400 t\n1 Q0 a 3 1.0 t\n"
    done = eval_files(tmp_path, qrels, run, "-m", "P@1", "-m", "nDCG(gain=exp)", "-q")
    assert done.returncode == 0, done.stderr
    assert summary_lines(done.stdout) == {"P@1": 1.0, "nDCG(gain=exp)": 0.0}


def test_a_byte_order_mark_is_not_part_of_the_first_query_id(tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    done = eval_files(tmp_path, bom + b"q1 0 a 1\nq2 0 b 1\n", bom + b"q1 Q0 a 1 1.0 t\n",
                      "-m", "P@1", "-q")
    assert done.returncode == 0, done.stderr
    assert [line.split("\t")[1] for line in done.stdout.splitlines()] == ["q1", "all"]


def test_a_query_named_all_keeps_its_values(tmp_path: Path) -> None:
    qrels = b"all 0 a 1\nq2 0 b 1\n"
    run = b"all Q0 a 1 1.0 t\nq2 Q0 c 1 1.0 t\n"
    text = eval_files(tmp_path, qrels, run, "-m", "P@1", "-q")
    assert text.returncode == 0, text.stderr
    # trec_eval's format: the query's line, then the summary's
    assert text.stdout.splitlines() == [
        "P@1                   \tall\t1.0000",
        "P@1                   \tq2\t0.0000",
        "P@1                   \tall\t0.5000",
    ]
    assert "a query is named 'all'" in text.stderr
    as_json = eval_files(tmp_path, qrels, run, "-m", "P@1", "-q", "--json")
    assert json.loads(as_json.stdout) == {"P@1": {"all (query)": 1.0, "q2": 0.0, "all": 0.5}}
    assert "listed as 'all (query)'" in as_json.stderr
    quiet = eval_files(tmp_path, qrels, run, "-m", "P@1")
    assert quiet.stderr == ""


def test_gzip_files_are_read_as_replay_reads_them(tmp_path: Path) -> None:
    """Recognised by their first bytes, whatever their names; a cut one is a clear error."""
    import gzip

    qrels, run = tmp_path / "qrels", tmp_path / "run.txt"
    qrels.write_bytes(gzip.compress(Path(QRELS).read_bytes()))
    run.write_bytes(gzip.compress(Path(RUN).read_bytes()))
    plain = searchmon("eval", QRELS, RUN, "-m", "map", "-m", "P.5", "-q")
    packed = searchmon("eval", str(qrels), str(run), "-m", "map", "-m", "P.5", "-q")
    assert packed.returncode == 0, packed.stderr
    assert packed.stdout == plain.stdout and "0.1785" in packed.stdout
    cut = tmp_path / "cut.gz"
    cut.write_bytes(qrels.read_bytes()[:100])
    failed = searchmon("eval", str(cut), RUN, "-m", "map")
    assert failed.returncode == 2 and "not a whole gzip file" in failed.stderr


def test_names_without_a_cutoff_take_trec_evals_default_cutoffs() -> None:
    """`-m P` (and recall, map_cut, ndcg_cut, success) without a cutoff: trec_eval 10's
    cutoffs, printed line for line as trec_eval's own expected output prints them."""
    names = ("P", "recall", "map_cut", "ndcg_cut", "success")
    done = searchmon("eval", QRELS, RUN, *(arg for name in names for arg in ("-m", name)))
    assert done.returncode == 0, done.stderr
    cutoffs = {"success": (1, 5, 10)}
    wanted = {f"{name}_{k}" for name in names
              for k in cutoffs.get(name, (5, 10, 15, 20, 30, 100, 200, 500, 1000))}
    golden = [
        line for line in (DATA / "out.test.aq").read_text().splitlines()
        if line.split("\t")[1] == "all" and line.split("\t")[0].strip() in wanted
    ]
    printed = done.stdout.splitlines()
    assert len(printed) == 9 * 4 + 3
    assert sorted(printed) == sorted(golden)


def test_max_docs_per_query_as_trec_eval_minus_m() -> None:
    """`-M N` (also `-MN`): the top N of each ranking; trec_eval's own `-M100` output is the
    golden test (tests/unit/test_trec_golden.py); here, the option as a user types it."""
    five = searchmon("eval", QRELS, RUN, "-M5", "-m", "P.5,10")
    assert five.returncode == 0, five.stderr
    assert summary_lines(five.stdout) == {"P_5": 0.2667, "P_10": 0.1333}
    spaced = searchmon("eval", QRELS, RUN, "-M", "5", "-m", "P.5,10")
    assert spaced.stdout == five.stdout
    bad = searchmon("eval", QRELS, RUN, "-M", "0")
    assert bad.returncode == 2 and "-M: expected a positive integer, got '0'" in bad.stderr


def test_trec_eval_names_print_byte_for_byte_in_trec_evals_order() -> None:
    """Asked in any order, trec_eval's names print per query and in the summary in the
    order trec_eval prints them (its measure table, cutoffs ascending), byte for byte as
    trec_eval's own expected output has them."""
    asked = ["ndcg_cut.10", "P.10,5", "success.1", "map", "recall.100", "recip_rank",
             "bpref", "Rprec", "P.5"]
    done = searchmon("eval", QRELS, RUN, "-q", *(arg for name in asked for arg in ("-m", name)))
    assert done.returncode == 0, done.stderr
    names = {"ndcg_cut_10", "P_10", "P_5", "success_1", "map", "recall_100", "recip_rank",
             "bpref", "Rprec"}
    golden = "".join(
        line + "\n" for line in (DATA / "out.test.aq").read_text().splitlines()
        if line.split("\t")[0].strip() in names
    )
    assert done.stdout == golden


# --- two runs, and --plot -------------------------------------------------------------------

def _write_collection(directory: Path, queries: int, seed: int) -> tuple[str, str, str]:
    """Qrels and two runs of ``queries`` queries; B ranks the relevant documents a little
    higher on average, so the tests' p-values land between the extremes."""
    rng = np.random.default_rng(seed)
    qrels, run_a, run_b = [], [], []
    for q in range(queries):
        relevant = set(rng.choice(30, size=int(rng.integers(1, 8)), replace=False).tolist())
        for d in range(30):
            qrels.append(f"q{q} 0 d{d} {int(d in relevant)}")
            base = float(rng.normal()) + (0.8 if d in relevant else 0.0)
            lift = 0.4 if d in relevant else 0.0
            run_a.append(f"q{q} Q0 d{d} 0 {base:.6f} a")
            run_b.append(f"q{q} Q0 d{d} 0 {base + lift + float(rng.normal()) * 0.8:.6f} b")
    paths = []
    for name, lines in (("qrels", qrels), ("a.run", run_a), ("b.run", run_b)):
        path = directory / name
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    return paths[0], paths[1], paths[2]


def _per_query(qrels: str, run: str, measure: str) -> dict[str, float]:
    done = searchmon("eval", qrels, run, "-q", "-m", measure)
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    return {qid: float(value) for _, qid, value in rows if qid != "all"}


def _comparison(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    assert lines[3].split("\t")[1:] == ["mean_A", "mean_B", "B-A", "p_rand", "p_t", "queries"]
    return {line.split("\t")[0].strip(): line.split("\t")[1:] for line in lines[4:]}


def test_two_runs_give_means_difference_and_the_paired_tests_p_values(tmp_path: Path) -> None:
    from scipy import stats

    qrels, a, b = _write_collection(tmp_path, 40, seed=5)
    done = searchmon("eval", qrels, a, b, "-m", "AP", "-m", "P@10")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == [f"A\t{a}\t40 queries", f"B\t{b}\t40 queries",
                         "shared\t40 queries in both runs"]
    rows = _comparison(done.stdout)
    assert list(rows) == ["AP", "P@10"]
    for measure, row in rows.items():
        per_a, per_b = _per_query(qrels, a, measure), _per_query(qrels, b, measure)
        values_a = np.array([per_a[q] for q in sorted(per_a)])
        values_b = np.array([per_b[q] for q in sorted(per_a)])
        mean_a, mean_b, difference, p_rand, p_t, queries = row
        assert queries == "40"
        assert float(mean_a) == pytest.approx(values_a.mean(), abs=1e-4)
        assert float(mean_b) == pytest.approx(values_b.mean(), abs=1e-4)
        assert float(difference) == pytest.approx(float(mean_b) - float(mean_a), abs=2e-4)
        # the per-query values above are rounded to 4 places: scipy's p on them is close
        assert float(p_t) == pytest.approx(stats.ttest_rel(values_b, values_a).pvalue,
                                           abs=2e-3)
        # 2^40 sign vectors: Monte Carlo with 10,000; an independent estimate of 200,000
        signs = np.random.default_rng(11).choice([-1.0, 1.0], size=(200_000, 40))
        differences = values_b - values_a
        expected = float(np.mean(np.abs(signs @ differences) >= abs(differences.sum()) - 1e-9))
        spread = math.sqrt(max(expected * (1 - expected), 1e-4) / 10_000)
        assert abs(float(p_rand) - expected) < 4 * spread + 1e-3, (measure, p_rand, expected)
    assert 0.001 < float(rows["AP"][3]) < 0.5, "the collection gives a p between extremes"


def test_a_few_queries_are_tested_exactly(tmp_path: Path) -> None:
    differences = np.array([0.0, 0.0, 0.0])
    done = searchmon("eval", QRELS, RUN, RUN, "-m", "AP")
    assert done.returncode == 0, done.stderr
    assert _comparison(done.stdout)["AP"][2:] == ["+0.0000", "1.0000", "1.0000", "3"]
    # another run of trec_eval's collection: 3 queries, all 8 sign vectors are counted
    shuffled = tmp_path / "shuffled"
    shuffled.write_text("".join(
        f"{q} Q0 {doc} 0 {float(score) * (1 + 0.5 * (i % 3)):.4f} x\n"
        for i, (q, _, doc, _, score, _) in enumerate(
            line.split() for line in Path(RUN).read_text().splitlines())))
    per_a, per_b = _per_query(QRELS, RUN, "AP"), _per_query(QRELS, str(shuffled), "AP")
    differences = np.array([per_b[q] - per_a[q] for q in sorted(per_a)])
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))
    exact = float(np.mean(np.abs(signs @ differences) >= abs(differences.sum()) - 1e-9))
    done = searchmon("eval", QRELS, RUN, str(shuffled), "-m", "AP")
    assert float(_comparison(done.stdout)["AP"][3]) == pytest.approx(exact, abs=1e-4)


def test_the_single_run_output_stays_trec_eval_s_with_a_plot(tmp_path: Path) -> None:
    plain = searchmon("eval", QRELS, RUN, "-q")
    plotted = searchmon("eval", QRELS, RUN, "-q", "--plot", str(tmp_path / "p.svg"))
    assert plotted.returncode == 0, plotted.stderr
    assert plotted.stdout == plain.stdout and plotted.stderr == plain.stderr
    first = (tmp_path / "p.svg").read_bytes()
    searchmon("eval", QRELS, RUN, "--plot", str(tmp_path / "p.svg"))
    assert (tmp_path / "p.svg").read_bytes() == first, "same input, same bytes"


@pytest.mark.parametrize(("args", "message"), [
    ([RUN, "-q"], "-q prints one run's values per query"),
    (["--plot-measure", "AP"], "--plot-measure is the measure of --plot's charts"),
    (["--plot", "/tmp/never.svg", "--plot-measure", "P.5,10"], "one measure, not 2"),
    (["--plot", "/tmp/never.svg", "--plot-measure", "nope"], "--plot-measure:"),
    (["--plot", "/tmp/never.svg", "--plot-measure", "gm_map"], "GMAP has no per-query value"),
    (["--plot", "/tmp/never.svg", "--plot-measure", "gm_bpref"],
     "gm_bpref has no per-query value"),
])
def test_two_run_and_plot_usage_errors(args: list[str], message: str) -> None:
    done = searchmon("eval", QRELS, RUN, *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_chromium_draws_the_two_run_svg(tmp_path: Path) -> None:
    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("chromium is not installed")
    qrels, a, b = _write_collection(tmp_path, 25, seed=3)
    svg = tmp_path / "compare.svg"
    done = searchmon("eval", qrels, a, b, "--plot", str(svg))
    assert done.returncode == 0, done.stderr
    shot = Path(os.environ.get("SEARCHMON_SCREENSHOTS", str(tmp_path))) / "eval-plot.png"
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium'}"]
    dom = subprocess.run([*command, "--dump-dom", svg.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr
    assert "error on line" not in dom.stdout, "Chromium parsed the SVG without an error"
    assert "<polyline" in dom.stdout
    drawn = subprocess.run([*command, "--window-size=760,1200", f"--screenshot={shot}",
                            svg.as_uri()], capture_output=True, text=True, timeout=120)
    assert drawn.returncode == 0, drawn.stderr
    colours = Counter(pixels(shot.read_bytes()))
    # run A's blue, run B's orange, the better and worse bars' green and red are on screen
    for colour in ((0x1F, 0x5F, 0xA8), (0xE0, 0x7B, 0x00), (0x2E, 0x7D, 0x32),
                   (0xC6, 0x28, 0x28)):
        assert colours[colour] > 200, colour
    print(f"eval --plot screenshot: {shot}")
