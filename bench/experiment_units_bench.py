"""Benchmark: the memory and checkpoint size of an experiment's units, with 10 million
distinct users.

Feeds queries of ``--users`` distinct users (half in each variant) to the experiments part
and prints, measured with tracemalloc, the memory it holds (the exact unit arrays, the
per-bucket sums, the HyperLogLog registers), the size of its checkpoint, and the time per
query. Then the same past ``max_units``: the exact arrays stop growing (bounded) and the
count becomes an estimate, whose error is printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from dataclasses import asdict

from monitor.config import ExperimentConfig
from monitor.core.experiments import Experiments


def run(users: int, max_units: int) -> None:
    config = ExperimentConfig(id="e", attribute="ranker", control="A",
                              split={"A": 0.5, "B": 0.5}, max_units=max_units)
    gc.collect()
    tracemalloc.start()
    experiments = Experiments.from_config([config])
    start = time.perf_counter()
    for user in range(users):
        variant = "AB"[user & 1]
        experiments.searched([variant], f"q{user}", f"s{user}", f"user-{user}", False)
        experiments.finished(f"q{user}", False)
        experiments.closed(f"s{user}", False, False)
    seconds = time.perf_counter() - start
    counted = [units.count() for units in experiments.units[0]]
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    size = len(json.dumps(asdict(experiments.snapshot())))
    approximate = any(units.approximate for units in experiments.units[0])
    error = (sum(counted) - users) / users
    print(f"{users:>11,} users, max_units {max_units:>11,}: held {held / 2**20:7.1f} MiB "
          f"({held / users:5.1f} bytes per user), checkpoint {size / 2**20:7.1f} MiB, "
          f"{seconds / users * 1e6:.2f} us per query; units counted {sum(counted):,} "
          f"({'estimated' if approximate else 'exact'}, error {error:+.2%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000_000)
    args = parser.parse_args()
    run(args.users, 10_000_000)
    run(args.users, 1_000_000)


if __name__ == "__main__":
    main()
