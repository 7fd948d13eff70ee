"""Benchmark: ``searchmon eval`` against pytrec_eval (trec_eval's C code) on the same files.

Generates 10,000 queries x 100 retrieved documents (about 50 judged per query, graded), then
times, in the same run:

- ours: the whole ``searchmon eval`` process (start-up, parsing, ranking, measures, printing);
- baseline: pytrec_eval as people use it: read both files into dicts in Python, build a
  ``RelevanceEvaluator`` and evaluate (no interpreter start-up counted for the baseline).

Two comparisons: the seven measures of ``OUR_MEASURES`` (ours) against the same seven in
pytrec_eval (``TREC_MEASURES``); then ``-m all_trec`` (ours: every trec_eval 10 ``all_trec``
measure with its default cutoffs, 100 values per query, summaries printed) against
pytrec_eval computing every measure it supports (``pytrec_eval.supported_measures``: the
same minus unj, rbp and rbp_resid, per query, not summarised). Prints the times and the
ratio ours / baseline of each (target <= 0.5 for the first).

The package's bytecode is compiled first, as ``pip install`` compiles it (an environment that
sets ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module in every process), and
the two sides alternate, best of ``--repeat`` each, so that a change of load on a shared
machine falls on both.
"""

from __future__ import annotations

import argparse
import compileall
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytrec_eval

OUR_MEASURES = ["P@10", "R@100", "AP", "nDCG@10", "RR", "Rprec", "bpref"]
TREC_MEASURES = {"P_10", "recall_100", "map", "ndcg_cut_10", "recip_rank", "Rprec", "bpref"}


def generate(directory: Path, queries: int, depth: int, seed: int) -> tuple[Path, Path]:
    rng = random.Random(seed)
    qrels_lines, run_lines = [], []
    for q in range(queries):
        docs = [f"doc{q}-{i}" for i in range(depth + 50)]
        for doc in rng.sample(docs, 50):
            qrels_lines.append(f"{q} 0 {doc} {rng.choice((0, 0, 0, 1, 1, 2, 3))}\n")
        # as systems write them: best first, scores descending (some tied)
        scores = sorted((round(rng.random() * 20, 3) for _ in range(depth)), reverse=True)
        ranked = zip(rng.sample(docs, depth), scores, strict=True)
        for rank, (doc, score) in enumerate(ranked, start=1):
            run_lines.append(f"{q} Q0 {doc} {rank} {score:.3f} bench\n")
    qrels, run = directory / "qrels", directory / "run"
    qrels.write_text("".join(qrels_lines))
    run.write_text("".join(run_lines))
    return qrels, run


def ours(qrels: Path, run: Path, measures: list[str]) -> float:
    args = [sys.executable, "-m", "monitor", "eval", str(qrels), str(run)]
    for m in measures:
        args += ["-m", m]
    start = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True)
    return time.perf_counter() - start


def baseline(qrels: Path, run: Path, measures: set[str]) -> float:
    start = time.perf_counter()
    judgments: dict[str, dict[str, int]] = defaultdict(dict)
    with qrels.open() as lines:
        for line in lines:
            qid, _, doc, label = line.split()
            judgments[qid][doc] = int(label)
    scores: dict[str, dict[str, float]] = defaultdict(dict)
    with run.open() as lines:
        for line in lines:
            qid, _, doc, _, score, _ = line.split()
            scores[qid][doc] = float(score)
    pytrec_eval.RelevanceEvaluator(judgments, measures).evaluate(scores)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5, help="best of N for each side")
    args = parser.parse_args()
    compileall.compile_dir(Path(__file__).resolve().parents[1] / "monitor", quiet=1)
    supported = set(pytrec_eval.supported_measures)
    with tempfile.TemporaryDirectory() as tmp:
        qrels, run = generate(Path(tmp), args.queries, args.depth, seed=7)
        ours_s = base_s = all_s = all_base_s = float("inf")
        for _ in range(args.repeat):
            ours_s = min(ours_s, ours(qrels, run, OUR_MEASURES))
            base_s = min(base_s, baseline(qrels, run, TREC_MEASURES))
        for _ in range(args.repeat):
            all_s = min(all_s, ours(qrels, run, ["all_trec"]))
            all_base_s = min(all_base_s, baseline(qrels, run, supported))
    print(f"eval bench: {args.queries} queries x {args.depth} docs, {len(OUR_MEASURES)} measures")
    print(f"  searchmon eval (whole process):      {ours_s:7.3f} s")
    print(f"  pytrec_eval (parse + evaluate):      {base_s:7.3f} s")
    print(f"  ratio ours / pytrec_eval:            {ours_s / base_s:7.2f}  (target <= 0.5)")
    print("every measure: searchmon eval -m all_trec (all 37 trec_eval 10 measures) against")
    print(f"  pytrec_eval's {len(supported)} supported measures (all but unj, rbp, rbp_resid)")
    print(f"  searchmon eval -m all_trec:          {all_s:7.3f} s")
    print(f"  pytrec_eval (parse + evaluate):      {all_base_s:7.3f} s")
    print(f"  ratio ours / pytrec_eval:            {all_s / all_base_s:7.2f}")


if __name__ == "__main__":
    main()
