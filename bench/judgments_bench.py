"""Benchmark: click models on 1,000,000 generated events, against decoding them alone, and
their estimates against the generator's truth.

1. Writes generated events (``monitor.inputs.generate``, every result list shuffled from the
   start so that each document is shown at many positions; ~10 results per query) to a
   JSONL file, keeping the truth: each pair's hidden grade and the examination probability
   per position averaged over the searches (``examination_probabilities``).
2. Times, in the same run, the median of ``--repeat`` runs of:
   - baseline: every line through the decoder chain (``monitor.inputs.clicklog.decoded``),
     nothing kept: the least any reading of the events costs;
   - reading: the same, gathered into a click log (``read_click_log``, k-anonymity floor 5);
   - each model's fit on that log (COEC, PBM by EM, the DBN by EM (once), the simplified
     DBN).
   Prints the times, the ratios to the baseline, the peak memory each fit allocates
   (tracemalloc, in a run of its own) and the process's peak resident memory.
3. Prints each model's Spearman and Kendall correlation with the hidden grades over the
   pairs shown at least 50 times, and the PBM curve (relative to position 1) beside the
   truth.

Run: ``PYTHONPATH=. python bench/judgments_bench.py [--events 1000000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau, spearmanr

from monitor.config import Config
from monitor.core.querylists import QueryLists
from monitor.inputs.clicklog import decoded, read_click_log
from monitor.inputs.generate import (
    EXAMINATION,
    Regression,
    Traffic,
    World,
    examination_probabilities,
    messages,
    true_grades,
)
from monitor.offline.clicks import MODELS, ClickLog

SEED = 13
MIN_IMPRESSIONS = 50


def write_events(path: Path, count: int) -> tuple[np.ndarray, dict[tuple[str, str], int]]:
    world = World.build(SEED)
    traffic = Traffic(seed=SEED, sessions_per_second=20.0, duration=1e9, mixes=(),
                      regression=Regression(None, Traffic().start))
    grades = true_grades(world)
    total = np.zeros(len(EXAMINATION))
    searches = np.zeros(len(EXAMINATION))
    written = 0
    with path.open("wb") as out:
        for message in messages(world, traffic):
            if message.judged:
                continue
            out.write(message.line + b"\n")
            written += 1
            if message.line.startswith(b'{"type":"query"'):
                try:
                    event = json.loads(message.line)
                except ValueError:
                    event = None
                if event is not None:
                    curve = examination_probabilities(
                        [grades[(event["query_text"], d)] for d in event["result_ids"]])
                    total[:len(curve)] += curve
                    searches[:len(curve)] += 1
            if written == count:
                break
    key = QueryLists(Config().query_lists).key
    return total / searches, {(key(text), doc): g for (text, doc), g in grades.items()}


def baseline(path: Path, config: Config) -> float:
    start = time.perf_counter()
    for _ in decoded([path], config):
        pass
    return time.perf_counter() - start


def reading(path: Path, config: Config) -> tuple[float, ClickLog]:
    start = time.perf_counter()
    log = read_click_log([path], config, QueryLists(config.query_lists).key, 5)
    return time.perf_counter() - start, log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    config = Config()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "events.jsonl"
        truth, grades = write_events(path, args.events)
        size = path.stat().st_size
        print(f"{args.events:,} events, {size / 1e6:.0f} MB, every list shuffled (seed {SEED})")
        base = statistics.median(baseline(path, config) for _ in range(args.repeat))
        baseline_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = []
        held_log: ClickLog | None = None
        for _ in range(args.repeat):
            held_log = None  # one log held at a time
            seconds, held_log = reading(path, config)
            times.append(seconds)
        read_time = statistics.median(times)
        assert held_log is not None
        log = held_log
        print(f"{len(log.search):,} results shown, {int(log.clicked.sum()):,} clicked, "
              f"{len(np.unique(log.search)):,} searches, {len(log.queries):,} queries "
              f"({log.counts['queries under the k-anonymity floor']:,} under the floor)")
        print(f"baseline (decode only):   {base:7.2f} s  {args.events / base:9,.0f} events/s")
        print(f"reading into a click log: {read_time:7.2f} s  "
              f"{args.events / read_time:9,.0f} events/s  ratio {read_time / base:.2f}x the "
              "baseline")
        fits = {}
        for name, model in MODELS.items():
            times = []
            for _ in range(1 if name == "dbn" else args.repeat):  # minutes: once
                start = time.perf_counter()
                estimate = model(log)
                times.append(time.perf_counter() - start)
                del estimate
            fits[name] = (statistics.median(times), model(log))
        for name, (seconds, estimate) in fits.items():
            print(f"fit {name:4s}: {seconds:6.2f} s  ({seconds / base:.2f}x the baseline; "
                  f"read + fit {(read_time + seconds) / base:.2f}x)  "
                  + ", ".join(f"{k} {v:.4g}" for k, v in estimate.parameters.items()))
        peaks = {}
        for name, model in MODELS.items():
            tracemalloc.start()
            model(log)
            peaks[name] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        held = sum(a.nbytes for a in (log.search, log.query, log.doc, log.position,
                                      log.clicked))
        print("peak memory a fit allocates (tracemalloc): " + ", ".join(
            f"{name} {peak / 1e6:.0f} MB" for name, peak in peaks.items())
            + f"; the click log holds {held / 1e6:.0f} MB of arrays; peak resident memory of "
            f"the process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.0f} MB "
            f"(the baseline alone: {baseline_rss / 1e3:.0f} MB)")
        print(f"\ncorrelation with the hidden grades (pairs shown >= {MIN_IMPRESSIONS} times):")
        for name, (_, estimate) in fits.items():
            often = estimate.impressions >= MIN_IMPRESSIONS
            true = np.array([grades[(estimate.queries[q], estimate.docs[d])] for q, d in
                             zip(estimate.query[often], estimate.doc[often], strict=True)])
            print(f"  {name:4s}: {int(often.sum()):,} pairs  Spearman "
                  f"{spearmanr(estimate.score[often], true)[0]:.3f}  Kendall "
                  f"{kendalltau(estimate.score[often], true)[0]:.3f}")
        bias = fits["pbm"][1].position_bias
        assert bias is not None
        print("\nposition bias relative to position 1 (PBM | truth | difference):")
        for position, (ours, real) in enumerate(zip(bias / bias[0], truth / truth[0],
                                                    strict=True), 1):
            print(f"  {position:2d}: {ours:.3f} | {real:.3f} | {ours - real:+.3f}")
        print(f"  absolute at position 1: {bias[0]:.3f} | {truth[0]:.3f} (the model's scale "
              "is not identified)")


if __name__ == "__main__":
    main()
