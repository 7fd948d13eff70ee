"""Benchmark: the memory and checkpoint size of an experiment's units, with 10 million
distinct users.

Feeds queries of ``--users`` distinct users (half in each variant) to the experiments part
and prints the memory it holds (the exact unit arrays, the per-bucket sums and the
HyperLogLog registers, by their sizes; and the process's resident memory growth), the size of
its checkpoint, and the time per query. Then the same past ``max_units``: the exact arrays
stop growing (bounded) and the count becomes an estimate, whose error is printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from dataclasses import asdict

from monitor.config import ExperimentConfig
from monitor.core.experiments import Experiments


def resident() -> int:
    """The process's resident memory, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run(users: int, max_units: int) -> None:
    config = ExperimentConfig(id="e", attribute="ranker", control="A",
                              split={"A": 0.5, "B": 0.5}, max_units=max_units)
    gc.collect()
    before = resident()
    experiments = Experiments.from_config([config])
    start = time.perf_counter()
    for user in range(users):
        experiments.searched(["AB"[user & 1]], "q", f"s{user}", f"user-{user}", False)
        if user % 65536 == 0:
            experiments.queries.clear()  # as their outcomes would: only units accumulate
            experiments.sessions.clear()
    seconds = time.perf_counter() - start
    experiments.queries.clear()
    experiments.sessions.clear()
    counted = [units.count() for units in experiments.units[0]]
    held = sum(units.exact.nbytes + units.registers.nbytes for units in experiments.units[0])
    held += sum(array.nbytes for array in experiments.sums[0])
    grown = resident() - before
    size = len(json.dumps(asdict(experiments.snapshot())))
    approximate = any(units.approximate for units in experiments.units[0])
    error = (sum(counted) - users) / users
    print(f"{users:>11,} users, max_units {max_units:>11,}: state {held / 2**20:7.1f} MiB "
          f"({held / users:4.1f} bytes per user; resident +{grown / 2**20:.0f} MiB), "
          f"checkpoint {size / 2**20:6.1f} MiB, {seconds / users * 1e6:.2f} us per query; "
          f"units counted {sum(counted):,} ({'estimated' if approximate else 'exact'}, "
          f"error {error:+.2%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000_000)
    args = parser.parse_args()
    run(args.users, 10_000_000)
    run(args.users, 1_000_000)


if __name__ == "__main__":
    main()
