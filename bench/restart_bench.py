"""Benchmark: a restart over the state of 3 h of traffic, to "caught up".

On a local broker (the demo's), 3 h of generated traffic with live qrels (10 sessions/s) go to
a 4-partition events topic and a 1-partition judgments topic. ``searchmon run`` (default group
timings) reads all of it and stops on SIGTERM; then it starts again over the same state
directory. Printed: the size of the state directory, and the time from process start to the
daemon's "caught up" line for the first start (an empty state: the baseline) and for the
restart, and their ratio; then the restart's steps, from its log: process start to connecting
to the broker, to taking the partitions over (the group's join, then the restore of the
checkpoints decoded meanwhile), to "caught up".
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from as_installed import compile_package

from monitor.cli.broker import Broker, free_port
from monitor.inputs.generate import Traffic, World, events

STEPS = (("connected", "connected to "), ("took over", "took over "))
"""The daemon's log lines that mark the steps to "caught up"."""


def steps(log: Path, total: float) -> dict[str, float]:
    """Seconds from process start to each step of ``STEPS`` (its first line), from the log's
    timestamps counted back from the "caught up" line, which says its own time since start."""
    stamps: dict[str, datetime] = {}
    for line in log.read_text().splitlines():
        for name, text in (*STEPS, ("caught up", "caught up: ")):
            if text in line and name not in stamps:
                stamps[name] = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    end = stamps["caught up"]
    return {name: total - (end - stamps[name]).total_seconds() for name, _ in STEPS}


def run_until_caught_up(config: Path, log: Path, timeout: float = 300.0) -> float:
    """Seconds from process start to "caught up", as the daemon itself reports them."""
    with log.open("w") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL, stderr=out,
        )
    try:
        deadline = time.monotonic() + timeout
        while not (found := re.search(r"caught up: .*, ([\d.]+) s after start", log.read_text())):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no 'caught up' line; see {log}")
            time.sleep(0.1)
        return float(found[1])
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)


def main() -> None:
    compile_package()  # as installed: no module compiled at each start
    broker = Broker().start()
    try:
        broker.create_topics({"search-events": 4, "search-judgments": 1})
        stream = [(key.encode(), line) for _, key, line in events(World.build(5), Traffic(
            seed=5, duration=3 * 3600.0, sessions_per_second=10.0, qrels=True,
        ))]
        broker.produce("search-judgments", [m for m in stream if b'"type":"qrels"' in m[1]])
        broker.produce("search-events", [m for m in stream if b'"type":"qrels"' not in m[1]])
        with tempfile.TemporaryDirectory() as tmp:
            state = Path(tmp, "state")
            config = Path(tmp, "searchmon.toml")
            config.write_text(
                f'[kafka]\nbootstrap_servers = ["{broker.address}"]\ngroup_id = "bench"\n'
                f'[http]\nlisten = "127.0.0.1:{free_port()}"\n[state]\ndir = "{state}"\n'
            )
            first = run_until_caught_up(config, Path(tmp, "first.log"))
            size = sum(f.stat().st_size for f in state.rglob("*") if f.is_file())
            again = run_until_caught_up(config, Path(tmp, "restart.log"))
            marks = steps(Path(tmp, "restart.log"), again)
    finally:
        broker.stop()
    print(f"restart bench: {len(stream):,} messages (3 h of traffic with live qrels)")
    print(f"  state directory:             {size / 1e6:10.1f} MB")
    print(f"  first start to caught up:    {first:10.1f} s  (baseline: reads everything)")
    print(f"  restart to caught up:        {again:10.1f} s  (target: within 5 s)")
    print(f"    process start to connected:  {marks['connected']:8.2f} s")
    print(f"    connected to took over:      {marks['took over'] - marks['connected']:8.2f} s"
          "  (the group's join, the restore)")
    print(f"    took over to caught up:      {again - marks['took over']:8.2f} s")
    print(f"  ratio restart / first start: {again / first:10.2f}")


if __name__ == "__main__":
    main()
