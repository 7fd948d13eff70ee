"""`searchmon run` against a real Kafka-protocol broker: exactly-once counting through crashes,
dead letters with their headers, a clean SIGTERM, and a corrupt checkpoint refused."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import IllegalStateError, TopicAlreadyExistsError

from monitor.config import Config
from monitor.core.judged import OVERALL
from monitor.core.online import OnlineCounters
from monitor.core.pipeline import Pipeline
from monitor.inputs.generate import Traffic, World, events
from monitor.inputs.kafka import _highwater, _if_assigned
from monitor.serve.queries import query_report
from tests.support.broker import FAST_GROUP, Broker, free_port
from tests.support.daemon import (
    DEAD,
    EVENTS,
    children,
    log_of,
    start_daemon,
    wait_for_log,
    wait_until_read,
)
from tests.support.http import get, scrape
from tests.support.wait import wait_for

SEARCHMON = [sys.executable, "-m", "monitor"]


@pytest.fixture(scope="module")
def traffic(broker: Broker) -> list[list[bytes]]:
    """Generated events (with malformed and duplicated lines) on a 4-partition topic, keyed
    by session; returns each partition's messages in order, as read back from the broker."""
    broker.create_topics({EVENTS: 4, "search-judgments": 1, DEAD: 1})
    world = World.build(5)
    stream = Traffic(seed=5, sessions_per_second=2.0, duration=1800.0, malformed_rate=0.01,
                     duplicate_rate=0.005)
    broker.produce(EVENTS, ((key.encode(), line) for _, key, line in events(world, stream)))
    return read_back(broker, EVENTS, 4)


def read_back(broker: Broker, topic: str, partitions: int) -> list[list[bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=broker.address, enable_auto_commit=False)
    assigned = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    out: list[list[bytes]] = [[] for _ in range(partitions)]
    idle = 0
    while idle < 6:
        batch = consumer.poll(timeout_ms=500)
        idle = 0 if batch else idle + 1
        for tp, records in batch.items():
            out[tp.partition].extend(r.value for r in records)
    consumer.close()
    return out


def expected(partitions: list[list[bytes]]) -> list[Pipeline]:
    """The same messages through one pipeline per partition, in partition order."""
    config = Config()
    pipelines = []
    for messages in partitions:
        pipeline = Pipeline(config)
        for message in messages:
            pipeline.feed(message)
        pipelines.append(pipeline)
    return pipelines


def online_counts(values: dict[str, float]) -> dict[str, float]:
    keys = tuple(f"search_{name}_total" for name in OnlineCounters.COUNTS)
    return {k: v for k, v in values.items() if k.startswith(keys) or "rejected" in k}


def counts_of(pipelines: list[Pipeline]) -> dict[str, float]:
    """What ``online_counts`` of a scrape must be: the pipelines' own counters added up by
    class name and rejection reason (not through the export code under test)."""
    want: dict[str, float] = {}
    for pipeline in pipelines:
        for name in OnlineCounters.COUNTS:
            for klass, value in zip(pipeline.slices.classes.names, getattr(pipeline.counters, name),
                                    strict=True):
                key = f'search_{name}_total{{query_class="{klass}"}}'
                want[key] = want.get(key, 0.0) + value
        for reason, count in pipeline.health.rejected.items():
            key = f'searchmon_events_rejected_total{{reason="{reason.value}"}}'
            want[key] = want.get(key, 0.0) + count
    return want


def rejections(pipelines: list[Pipeline]) -> dict[str, int]:
    total: dict[str, int] = {}
    for pipeline in pipelines:
        for reason, count in pipeline.health.rejected.items():
            total[reason.value] = total.get(reason.value, 0) + count
    return total


@pytest.mark.serial  # times the SIGTERM (under 10 s)
def test_consumes_everything_dead_letters_rejections_and_stops_on_sigterm(
    tmp_path: Path, broker: Broker, traffic: list[list[bytes]]
) -> None:
    total = sum(map(len, traffic))
    port = free_port()
    daemon = start_daemon(tmp_path, broker, f"g-{uuid.uuid4().hex}", port)
    try:
        values = wait_until_read(port, total)
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        assert values["searchmon_broker_connected"] == 1.0
        idle_writes_nothing(tmp_path / "state", port)
        status, body = get(f"http://127.0.0.1:{port}/queries")
        assert status == 200
        shown = json.loads(body)
        status, page = get(f"http://127.0.0.1:{port}/?class=all")
        assert status == 200 and "Top searches without results" in page
    finally:
        daemon.send_signal(signal.SIGTERM)
        started = time.monotonic()
        daemon.wait(timeout=30)
    assert daemon.returncode == 0, log_of(tmp_path)
    assert time.monotonic() - started < 10
    want = expected(traffic)
    assert online_counts(values) == counts_of(want)
    # the query lists of the four partitions, merged by the worker, as one merge of them
    assert shown == query_report(want, None, Config()) and shown["lists"]
    rejected = sum(rejections(want).values())
    assert rejected > 20
    dead = KafkaConsumer(DEAD, bootstrap_servers=broker.address, auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=5000)
    letters = [record for record in dead]
    dead.close()
    assert len(letters) == rejected
    for letter in letters:
        headers = dict(letter.headers)
        assert headers["searchmon.source.topic"] == EVENTS.encode()
        partition = int(headers["searchmon.source.partition"])
        offset = int(headers["searchmon.source.offset"])
        assert traffic[partition][offset] == letter.value, "copied unchanged"
        assert rejections(want)[headers["searchmon.reason"].decode()] > 0


def idle_writes_nothing(state: Path, port: int) -> None:
    """With nothing to read, checkpoints go on (their time moves) and no file is written."""
    def files() -> dict[str, tuple[int, int]]:
        return {str(f): (f.stat().st_mtime_ns, f.stat().st_size) for f in state.rglob("*")}

    def checkpoint_time() -> float:
        return scrape(port).get("searchmon_checkpoint_timestamp_seconds", 0.0)

    seen = checkpoint_time()  # the checkpoint of the last records may still be on its way
    deadline = time.monotonic() + 30
    while (now := checkpoint_time()) <= seen:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    before, turns = files(), 0
    while turns < 3:
        assert time.monotonic() < deadline, "checkpoints go on while idle"
        if (later := checkpoint_time()) > now:
            now, turns = later, turns + 1
        time.sleep(0.1)
    assert files() == before, "an idle daemon writes nothing"


def test_kill_9_at_random_points_loses_nothing_and_counts_nothing_twice(
    tmp_path: Path, broker: Broker, traffic: list[list[bytes]]
) -> None:
    assert sum(map(len, traffic)) > 1000, "a stream to kill the daemon in"
    group = f"g-{uuid.uuid4().hex}"
    rng = random.Random(7)
    seen: list[float] = []
    for _ in range(3):
        port = free_port()
        daemon = start_daemon(tmp_path, broker, group, port)
        deadline = time.monotonic() + rng.uniform(3.0, 6.0)
        while time.monotonic() < deadline:
            value = scrape(port).get("searchmon_events_read_total")
            if value is not None:
                seen.append(value)
            time.sleep(0.2)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=10)
    finish_and_compare(tmp_path, broker, group, EVENTS, "", seen)


def generated(seed: int, minutes: float, sessions_per_second: float = 2.0) -> list[
    tuple[bytes, bytes]
]:
    """Keyed messages of generated traffic, with malformed and duplicated lines."""
    return [(key.encode(), line) for _, key, line in events(World.build(seed), Traffic(
        seed=seed, sessions_per_second=sessions_per_second, duration=minutes * 60.0,
        malformed_rate=0.01, duplicate_rate=0.005,
    ))]


def kill_9(daemon: subprocess.Popen[str]) -> None:
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=10)


def finish_and_compare(
    tmp: Path, broker: Broker, group: str, topic: str, kafka: str, seen: list[float]
) -> None:
    """A last daemon reads everything: its counters equal one pipeline per partition over
    the topic's messages (computed without the export code), and the counter never went
    backwards across the kills."""
    messages = read_back(broker, topic, 4)
    port = free_port()
    daemon = start_daemon(tmp, broker, group, port, kafka)
    try:
        values = wait_until_read(port, sum(map(len, messages)), seconds=180)
        seen.append(values["searchmon_events_read_total"])
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert online_counts(values) == counts_of(expected(messages))
    assert seen == sorted(seen), "an exported counter never goes backwards across crashes"


def test_kill_9_after_each_part_of_the_stream(tmp_path: Path, broker: Broker) -> None:
    """The stream arrives in four parts. Each daemon is killed with -9 once /metrics (which
    shows durable state only) says it has read and checkpointed everything before its part
    and some of its part; the last one reads the rest."""
    topic = "parts-events"
    broker.create_topics({topic: 4, "parts-judgments": 1})
    stream = generated(13, 30)
    kafka = f'events_topic = "{topic}"\njudgments_topic = "parts-judgments"\n'
    group, seen, produced = f"g-{uuid.uuid4().hex}", list[float](), 0
    for number in range(4):
        before = produced
        produced += broker.produce(topic, stream[number::4])
        port = free_port()
        daemon = start_daemon(tmp_path, broker, group, port, kafka)
        try:
            deadline = time.monotonic() + 60
            while (read := scrape(port).get("searchmon_events_read_total", 0.0)) <= before:
                assert time.monotonic() < deadline, f"read {read} of {produced}"
                time.sleep(0.05)
            seen.append(read)
        finally:
            kill_9(daemon)
        assert before < read <= produced
    finish_and_compare(tmp_path, broker, group, topic, kafka, seen)


def test_kill_9_in_the_middle_of_checkpoint_writes(tmp_path: Path, broker: Broker) -> None:
    """A partition's checkpoint write that never ends: its temporary file is a named pipe,
    so the copy of the state process writing it blocks in the middle of the checkpoint
    (partitions sorted before it are written, it and those after are not) until the state
    process is killed with -9 (the copy dies with it), then the daemon. Twice, on two
    partitions; then the rest of the stream. The torn checkpoints' previous versions are used,
    and nothing is lost or counted twice."""
    topic = "torn-events"
    broker.create_topics({topic: 4, "torn-judgments": 1})
    stream = generated(17, 30)
    parts = [stream[i::3] for i in range(3)]
    kafka = f'events_topic = "{topic}"\njudgments_topic = "torn-judgments"\n'
    group, seen, produced = f"g-{uuid.uuid4().hex}", list[float](), 0
    checkpoints = tmp_path / "state" / "checkpoints"
    for number, partition in enumerate((2, 1)):
        produced += broker.produce(topic, parts[number])
        port = free_port()
        daemon = start_daemon(tmp_path, broker, group, port, kafka)
        try:
            wait_until_read(port, produced)  # read and checkpointed
            seen.append(scrape(port)["searchmon_events_read_total"])
            torn = checkpoints / f"{topic}-{partition}.ckpt.tmp"
            os.mkfifo(torn)
            produced += broker.produce(topic, parts[number + 1][: len(parts[number + 1]) // 2])
            (worker,) = children(daemon.pid)
            deadline = time.monotonic() + 60
            while not (blocked := [
                pid for pid in children(worker) if waits_for_partner(pid)
            ]):
                assert time.monotonic() < deadline, "the checkpoint of the partition blocks"
                time.sleep(0.01)
            os.kill(worker, signal.SIGKILL)
            wait_for(lambda: not any(map(running, blocked)),
                     "the copy writing the checkpoint ends with the state process")
        finally:
            kill_9(daemon)
        torn.unlink()
        torn.write_bytes((checkpoints / f"{topic}-{partition}.ckpt").read_bytes()[:1000])
    broker.produce(topic, parts[1][len(parts[1]) // 2:] + parts[2])
    finish_and_compare(tmp_path, broker, group, topic, kafka, seen)


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def waits_for_partner(pid: int) -> bool:
    """Whether ``pid`` is blocked opening a named pipe no one opens at the other end."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text() == "wait_for_partner"
    except OSError:
        return False


@pytest.mark.serial  # a restore and catch-up within 30 s
def test_a_restart_over_hours_of_state_takes_its_partitions_back(
    tmp_path: Path, broker: Broker
) -> None:
    """Three hours of traffic with live qrels, the default group timings: a restarted daemon
    rejoins, restores and catches up; /readyz says "not ready" until it owns its partitions."""
    topics = {"restart-events": 4, "restart-judgments": 1}
    broker.create_topics(topics)
    stream = events(World.build(5), Traffic(
        seed=5, sessions_per_second=10.0, duration=3 * 3600.0, qrels=True,
    ))
    judged = [(k.encode(), line) for _, k, line in stream]
    broker.produce("restart-judgments", [m for m in judged if b'"type":"qrels"' in m[1]])
    broker.produce("restart-events", [m for m in judged if b'"type":"qrels"' not in m[1]])
    kafka = 'events_topic = "restart-events"\njudgments_topic = "restart-judgments"\n'
    group, port = f"g-{uuid.uuid4().hex}", free_port()
    daemon = start_daemon(tmp_path, broker, group, port, kafka, fast_group=False)
    try:
        wait_for_log(tmp_path, daemon, "caught up", 120)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert daemon.returncode == 0
    first = log_of(tmp_path)
    stored = sum(f.stat().st_size for f in (tmp_path / "state").rglob("*") if f.is_file())
    assert stored > 2_000_000, f"a state of some size is restored ({stored} bytes)"
    daemon = start_daemon(tmp_path, broker, group, port, kafka, fast_group=False)
    try:
        deadline = time.monotonic() + 30
        while "caught up" not in log_of(tmp_path)[len(first):]:
            assert daemon.poll() is None
            assert time.monotonic() < deadline, "no 'caught up' within 30 s of the restart"
            try:
                status = get(f"http://127.0.0.1:{port}/readyz")[0]
            except OSError:
                continue  # not serving yet
            if status == 200:
                assert "took over" in log_of(tmp_path)[len(first):], (
                    "ready before owning its partitions"
                )
            time.sleep(0.05)
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert daemon.returncode == 0


def test_a_restart_over_a_backlog_scores_the_live_queries_a_first_start_scores(
    tmp_path: Path, broker: Broker
) -> None:
    """The live qrels join scores a live query with the qrels read before it, and Kafka hands
    a backlog's partitions over in an order of its own (the events topic's first, for several
    polls, as often as not). The judgments partition is read to its end first: a first start
    and a restart in the middle of the same backlog score every live query whose text has
    qrels, and export the same scores and window means."""
    broker.create_topics({"backlog-events": 4, "backlog-judgments": 1})
    stream = [(key.encode(), line) for _, key, line in events(World.build(7), Traffic(
        seed=7, sessions_per_second=5.0, duration=3600.0, qrels=True, duplicate_rate=0.0,
    ))]
    qrels = [m for m in stream if b'"type":"qrels"' in m[1]]
    live = [m for m in stream if b'"type":"qrels"' not in m[1]]
    cut = len(live) // 3
    broker.produce("backlog-judgments", qrels)
    broker.produce("backlog-events", live[:cut])
    kafka = 'events_topic = "backlog-events"\njudgments_topic = "backlog-judgments"\n'

    def run_to(tmp: Path, group: str, port: int, total: int) -> dict[str, float]:
        daemon = start_daemon(tmp, broker, group, port, kafka)
        try:
            return wait_until_read(port, total)
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)

    group, port = f"g-{uuid.uuid4().hex}", free_port()
    run_to(tmp_path / "restarted", group, port, len(qrels) + cut)
    broker.produce("backlog-events", live[cut:])
    restarted = run_to(tmp_path / "restarted", group, port, len(stream))
    whole = run_to(tmp_path / "first", f"g-{uuid.uuid4().hex}", free_port(), len(stream))

    def joined(values: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in values.items() if k.startswith((
            "search_judged_score_bucket", "search_judged_score_count", "search_judged_queries",
        )) and 'source="live"' in k}

    assert joined(restarted) == joined(whole)
    means = {k: v for k, v in whole.items() if k.startswith("search_judged_score_mean")}
    assert means and means == pytest.approx(
        {k: restarted[k] for k in means}, rel=1e-12, abs=1e-12
    )
    reference = Pipeline(Config())  # every qrels message first, then the live traffic
    for _, message in [*qrels, *live]:
        reference.feed(message)
    reference.close()
    scored = sum(reference.judged.histograms[("live", OVERALL, 0)])
    assert scored > 10_000
    count = 'search_judged_score_count{measure="nDCG@10",query_class="all",source="live"}'
    assert whole[count] == scored


def test_a_corrupt_checkpoint_is_refused_unless_discarded(tmp_path: Path, broker: Broker) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "checkpoints").mkdir()
    (state / "checkpoints" / "search-events-0.ckpt").write_bytes(
        b"searchmon-checkpoint 3 unit\nabc\nnot json"
    )
    port = free_port()
    daemon = start_daemon(tmp_path, broker, f"g-{uuid.uuid4().hex}", port)
    daemon.wait(timeout=60)
    err = log_of(tmp_path)
    assert daemon.returncode == 2
    assert "corrupt checkpoint" in err and "--discard-checkpoint" in err
    assert "Traceback" not in err


def test_broker_outage_keeps_metrics_up_and_resumes(tmp_path: Path) -> None:
    broker = Broker().start()
    port = free_port()
    world = World.build(9)
    stream = list(events(world, Traffic(seed=9, sessions_per_second=2.0, duration=900.0)))
    first, rest = stream[: len(stream) * 3 // 4], stream[len(stream) * 3 // 4:]
    daemon = None
    try:
        broker.create_topics({EVENTS: 4, "search-judgments": 1, DEAD: 1})
        broker.produce(EVENTS, ((k.encode(), line) for _, k, line in first))
        daemon = start_daemon(tmp_path, broker, "outage", port)
        wait_until_read(port, len(first))
        broker.stop()
        deadline = time.monotonic() + 20
        disconnected = not_ready = False
        while time.monotonic() < deadline:
            values = scrape(port)
            assert values, "/metrics keeps answering while the broker is down"
            assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
            disconnected |= values["searchmon_broker_connected"] == 0.0
            not_ready |= get(f"http://127.0.0.1:{port}/readyz")[0] == 503
            time.sleep(1)
        assert disconnected and not_ready, "the outage shows in the gauge and in /readyz"
        # the broker keeps nothing across a restart: topics again, then the rest of the stream
        broker.start()
        broker.create_topics({EVENTS: 4, "search-judgments": 1, DEAD: 1})
        broker.produce(EVENTS, ((k.encode(), line) for _, k, line in rest))
        values = wait_until_read(port, len(first) + len(rest), seconds=180)
        assert values["searchmon_broker_connected"] == 1.0
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
            assert daemon.returncode == 0, log_of(tmp_path)
        broker.stop()


def test_broker_down_at_start_is_retried(tmp_path: Path) -> None:
    broker = Broker()  # not started yet
    port = free_port()
    daemon = start_daemon(tmp_path, broker, "late-broker", port)
    try:
        wait_for(lambda: scrape(port), "/metrics served before Kafka is reachable", 30, every=0.3)
        assert scrape(port)["searchmon_broker_connected"] == 0.0
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 503
        broker.start()
        broker.create_topics({EVENTS: 4, "search-judgments": 1, DEAD: 1})
        sent = broker.produce(EVENTS, [(b"s1", b'{"type": "query"}')] * 5)
        wait_until_read(port, sent, seconds=120)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        broker.stop()
    assert daemon.returncode == 0, log_of(tmp_path)


def test_two_replicas_split_the_partitions_and_the_survivor_takes_over(
    tmp_path: Path, broker: Broker
) -> None:
    """Two daemons in one group with their checkpoints in a changelog topic: the sums of what
    they export equal one daemon's totals, also after one is killed (its last export stays in
    the sums: a dead replica's counters are what Prometheus scraped last)."""
    topics = {"replicated-events": 4, "replicated-judgments": 1}
    broker.create_topics(topics)
    world = World.build(11)
    stream = [
        (key.encode(), line) for _, key, line in events(world, Traffic(
            seed=11, sessions_per_second=2.0, duration=1200.0, malformed_rate=0.01,
            duplicate_rate=0.005,
        ))
    ]
    first, rest = stream[: len(stream) // 2], stream[len(stream) // 2:]
    broker.produce("replicated-events", first)
    daemons, ports = start_replicas(tmp_path, broker, "replicated")
    try:
        a, b = wait_until_shared(ports, len(first))
        assert 0 < a["searchmon_events_read_total"] < len(first), "both replicas have a share"
        assert (
            add(online_counts(a), online_counts(b))
            == counts_of(expected(read_back(broker, "replicated-events", 4)))
        )
        daemons[0].send_signal(signal.SIGKILL)
        daemons[0].wait(timeout=10)
        broker.produce("replicated-events", rest)
        survivor = wait_until_read(ports[1], len(stream) - int(a["searchmon_events_read_total"]))
        want = counts_of(expected(read_back(broker, "replicated-events", 4)))
        assert add(online_counts(a), online_counts(survivor)) == want
        assert all(survivor[k] >= b[k] for k in online_counts(b)), "counters never go back"
    finally:
        stop_all(daemons)
    assert daemons[1].returncode == 0, log_of(tmp_path / "b")


def start_replicas(
    tmp: Path, broker: Broker, prefix: str, more: str = ""
) -> tuple[list[subprocess.Popen[str]], list[int]]:
    """Two daemons in one fresh group over ``<prefix>-events`` and ``<prefix>-judgments``,
    their checkpoints in the changelog topic; ``more`` ends their configuration."""
    group = f"g-{uuid.uuid4().hex}"
    kafka = f'events_topic = "{prefix}-events"\njudgments_topic = "{prefix}-judgments"\n'
    state = f'store = "kafka"\nchangelog_replication_factor = 1\n{more}'
    ports = [free_port(), free_port()]
    daemons = [
        start_daemon(tmp / name, broker, group, port, kafka, state)
        for name, port in zip("ab", ports, strict=True)
    ]
    return daemons, ports


def stop_all(daemons: list[subprocess.Popen[str]]) -> None:
    """SIGTERM to those still running, and wait for them."""
    for daemon in daemons:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


def wait_until_shared(ports: list[int], total: int) -> list[dict[str, float]]:
    """Scrapes of every replica once their events_read sum to ``total`` and stay there."""
    deadline = time.monotonic() + 120
    while True:
        values = [scrape(port) for port in ports]
        if sum(v.get("searchmon_events_read_total", 0) for v in values) == total:
            # nothing is left to move: after two more checkpoints of each, the same figures
            for port, before in zip(ports, values, strict=True):
                stamp = before.get("searchmon_checkpoint_timestamp_seconds", 0.0)
                for _ in range(2):
                    while (now := scrape(port).get(
                        "searchmon_checkpoint_timestamp_seconds", 0.0
                    )) <= stamp:
                        assert time.monotonic() < deadline, "checkpoints go on"
                        time.sleep(0.1)
                    stamp = now
            again = [scrape(port) for port in ports]
            if [online_counts(v) for v in again] == [online_counts(v) for v in values]:
                return values
        assert time.monotonic() < deadline, [v.get("searchmon_events_read_total") for v in values]
        time.sleep(0.3)


def add(left: dict[str, float], right: dict[str, float]) -> dict[str, float]:
    return {key: left.get(key, 0.0) + right.get(key, 0.0) for key in left.keys() | right.keys()}


def judgment(sample: str, query: int, at: float, good: bool) -> bytes:
    relevant = [f"d{query}-{i}" for i in range(3)]
    ranking = relevant + [f"x{query}-{i}" for i in range(7)]
    return json.dumps({
        "type": "judgment", "sample_id": sample, "timestamp": int((1.79e9 + at) * 1000),
        "query_id": f"{sample}-{query}", "query_text": f"query number {query}",
        "query_class": "navigational", "ranking": ranking if good else ranking[::-1],
        "labels": dict.fromkeys(relevant, 2),
    }).encode()


def test_the_judged_samples_follow_their_partition_to_the_survivor(
    tmp_path: Path, broker: Broker
) -> None:
    """Two replicas: one owns the judgments partition and alone exports the offline means;
    killed, the survivor restores it and judges the next sample against the first one, which
    it only knows from the checkpoint."""
    broker.create_topics({"judged-events": 2, "judged-judgments": 1})
    broker.produce("judged-judgments", [(b"s1", judgment("s1", q, q, True)) for q in range(30)])
    daemons, ports = start_replicas(tmp_path, broker, "judged", "[offline]\nsample_size = 30\n")
    try:
        deadline = time.monotonic() + 120
        while True:
            values = [scrape(port) for port in ports]
            owners = [i for i, v in enumerate(values) if any(
                k.startswith("search_judged_score_mean{") for k in v
            )]
            if sum(v.get("searchmon_judged_messages_total", 0) for v in values) == 30 and owners:
                break
            assert time.monotonic() < deadline, values
            time.sleep(0.3)
        assert len(owners) == 1, "one replica exports the offline state"
        owner, survivor = owners[0], 1 - owners[0]
        last = values[owner]
        daemons[owner].send_signal(signal.SIGKILL)
        daemons[owner].wait(timeout=10)
        broker.produce(
            "judged-judgments", [(b"s2", judgment("s2", q, 100 + q, False)) for q in range(30)]
        )
        flag = 'search_judged_regression{measure="nDCG@10",query_class="navigational"}'
        now = wait_for(
            lambda: {k: v for k, v in scrape(ports[survivor]).items() if "judged" in k},
            "the survivor flags the regression", 120, until=lambda judged: judged.get(flag) == 1.0,
            every=0.3,
        )
        assert last["searchmon_judged_messages_total"] + now[
            "searchmon_judged_messages_total"
        ] == 60, "every judgment counted once across the two replicas"
        assert now['search_judged_delta{measure="nDCG@10",query_class="navigational"}'] < -0.3
    finally:
        stop_all(daemons)


def test_calls_on_a_partition_revoked_meanwhile_are_skipped(broker: Broker) -> None:
    """kafka-python changes the assignment on its own thread: between the daemon's look at it
    and its next call a partition may be gone. Such calls raise in kafka-python; the daemon's
    are skipped (the partition is given up at the next look) instead of ending the process."""
    consumer = KafkaConsumer(bootstrap_servers=broker.address, group_id=None)
    gone = TopicPartition("gone", 0)
    try:
        with pytest.raises(ValueError):
            consumer.seek(gone, 5)
        with pytest.raises(KeyError):
            consumer.pause(gone)
        with pytest.raises(IllegalStateError):
            consumer.highwater(gone)
        for call, *arguments in [
            (consumer.seek, gone, 5), (consumer.seek_to_beginning, gone), (consumer.pause, gone),
            (consumer.resume, gone),
        ]:
            _if_assigned(call, *arguments)
        assert _highwater(consumer, gone) is None
    finally:
        consumer.close()


def test_judged_gauges_stay_exported_through_a_restart(tmp_path: Path, broker: Broker) -> None:
    """The verdict of the latest sample is on /metrics from the restarted daemon's first
    scrape on: an alert on it neither resolves nor fires again because of the restart."""
    broker.create_topics({"gauges-events": 2, "gauges-judgments": 1})
    broker.produce("gauges-judgments", [
        *((b"s1", judgment("s1", q, q, True)) for q in range(30)),
        *((b"s2", judgment("s2", q, 100 + q, False)) for q in range(30)),
    ])
    kafka = 'events_topic = "gauges-events"\njudgments_topic = "gauges-judgments"\n'
    group, port = f"g-{uuid.uuid4().hex}", free_port()
    flag = 'search_judged_regression{measure="nDCG@10",query_class="navigational"}'
    daemon = start_daemon(tmp_path, broker, group, port, kafka, "[offline]\nsample_size = 30\n")
    try:
        wait_for(lambda: scrape(port).get(flag), "the regression flagged", 120,
                 until=lambda value: value == 1.0, every=0.2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    daemon = start_daemon(tmp_path, broker, group, port, kafka, "[offline]\nsample_size = 30\n")
    try:
        deadline = time.monotonic() + 60
        scrapes: list[float | None] = []
        while "took over" not in log_of(tmp_path).split("stopped", 1)[-1] or len(scrapes) < 5:
            assert time.monotonic() < deadline
            if values := scrape(port):
                scrapes.append(values.get(flag))
            time.sleep(0.05)
        assert scrapes and all(value == 1.0 for value in scrapes), scrapes
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


def test_a_replica_without_partitions_is_not_ready(tmp_path: Path, broker: Broker) -> None:
    """One partition per topic, two replicas: the range assignor gives both to one member;
    the other owns none and says so on /readyz, while the first is ready."""
    broker.create_topics({"standby-events": 1, "standby-judgments": 1})
    daemons, ports = start_replicas(tmp_path, broker, "standby")
    try:
        def answers() -> list[tuple[int, str]]:
            found = []
            for port in ports:
                try:
                    found.append(get(f"http://127.0.0.1:{port}/readyz"))
                except OSError:
                    found.append((0, ""))
            return found

        wait_for(answers, "one replica ready, the other owning no partition", 60,
                 until=lambda found: sorted(status for status, _ in found) == [200, 503] and any(
                     "owns no partition" in body for _, body in found), every=0.2)
    finally:
        stop_all(daemons)


def test_what_an_operator_reads_versions_process_liveness_and_json_logs(
    tmp_path: Path, broker: Broker
) -> None:
    """``searchmon_build_info`` names the Python and kafka-python versions,
    ``searchmon_http_info`` the scheme it serves with, the process collector's families are
    exported, ``/livez`` answers, ``--log-format json`` writes one
    JSON object per line, and a judgments topic of several partitions is
    warned about."""
    broker.create_topics({"ops-events": 2, "ops-judgments": 2})
    sent = broker.produce("ops-events", [
        (b"s1", json.dumps({"type": "query", "event_id": f"e{i}", "timestamp": 1_790_000_000_000
                            + i, "session_id": "s1", "query_id": f"q{i}", "query_text": "a",
                            "result_ids": []}).encode())
        for i in range(20)
    ])
    port = free_port()
    daemon = start_daemon(
        tmp_path, broker, f"g-{uuid.uuid4().hex}", port,
        kafka='events_topic = "ops-events"\njudgments_topic = "ops-judgments"\n',
        options=("--log-format", "json"),
    )
    try:
        values = wait_until_read(port, sent)
        assert get(f"http://127.0.0.1:{port}/livez") == (200, "alive\n")
        assert values["process_resident_memory_bytes"] > 0
        assert values["process_start_time_seconds"] > 0
        info = next(key for key in values if key.startswith("searchmon_build_info{"))
        for label in ("version=", "python=", "kafka_python="):
            assert label in info, info
        assert values['searchmon_http_info{scheme="http"}'] == 1  # the alerts' page links
        wait_for(lambda: "partitions: judged samples" in log_of(tmp_path),
                 "the judgments topic's partitions warned of", 30, every=0.2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    records = [json.loads(line) for line in log_of(tmp_path).splitlines()]
    assert {"time", "level", "logger", "message"} <= set(records[0])
    assert any("ops-judgments has 2 partitions" in r["message"] for r in records)


def test_no_single_message_stops_the_daemon(tmp_path: Path, broker: Broker) -> None:
    """Invalid UTF-8, nesting thousands deep, megabyte texts and too many labels, between
    good messages of one partition: the daemon stays up, counts every good message, and
    rejects and dead-letters each bad one with its reason."""
    from tests.support.adversarial import ADVERSARIAL, good_traffic

    topic, judgments = f"ev-{uuid.uuid4().hex[:8]}", f"ju-{uuid.uuid4().hex[:8]}"
    broker.create_topics({topic: 1, judgments: 1})
    with contextlib.suppress(TopicAlreadyExistsError):  # shared by the tests of a run
        broker.create_topics({DEAD: 1})
    good = good_traffic()
    lines = [*good[:5], *(bad for _, bad, _ in ADVERSARIAL), *good[5:]]
    broker.produce(topic, ((b"one-key", line) for line in lines))
    port = free_port()
    daemon = start_daemon(
        tmp_path, broker, f"g-{uuid.uuid4().hex}", port,
        kafka=f'events_topic = "{topic}"\njudgments_topic = "{judgments}"\n',
        state="[input]\nmax_event_bytes = 1048576\n",
    )
    try:
        values = wait_until_read(port, len(lines))
        assert daemon.poll() is None
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
    finally:
        stop_all([daemon])
    reasons: dict[str, int] = {}
    for _, _, reason in ADVERSARIAL:
        if reason:
            reasons[reason] = reasons.get(reason, 0) + 1
    rejected = {
        name: value for name, value in values.items()
        if name.startswith("searchmon_events_rejected_total") and value
    }
    assert rejected == {
        f'searchmon_events_rejected_total{{reason="{reason}"}}': float(n)
        for reason, n in reasons.items()
    }
    assert values['search_queries_total{query_class="news"}'] == 30
    dead = KafkaConsumer(DEAD, bootstrap_servers=broker.address, auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=5000,
                         fetch_max_bytes=8 << 20, max_partition_fetch_bytes=8 << 20)
    letters = [
        record for record in dead
        if dict(record.headers)["searchmon.source.topic"] == topic.encode()
    ]
    dead.close()
    got: dict[str, int] = {}
    for letter in letters:
        reason = dict(letter.headers)["searchmon.reason"].decode()
        got[reason] = got.get(reason, 0) + 1
    assert got == reasons


def test_a_paused_replica_stops_counting_and_the_sums_stay_exact(
    tmp_path: Path, broker: Broker
) -> None:
    """Two replicas on the changelog store; one is frozen (SIGSTOP, its state process too)
    past the session timeout while traffic flows. The other takes its partitions over and
    counts the traffic; the frozen one, resumed, has lost its membership: it stops counting
    those partitions before another record, rejoins and restores. The sums over the replicas
    equal one pipeline per partition, also once the group has settled again."""
    broker.create_topics({"paused-events": 4, "paused-judgments": 1})
    stream = generated(17, 30)
    first, second, third = stream[:len(stream) // 3], stream[len(stream) // 3:
                                                             2 * len(stream) // 3], stream[
        2 * len(stream) // 3:]
    broker.produce("paused-events", first)
    daemons, ports = start_replicas(tmp_path, broker, "paused")
    try:
        a, b = wait_until_shared(ports, len(first))
        assert 0 < a["searchmon_events_read_total"] < len(first), "both replicas have a share"
        frozen = [daemons[0].pid, *children(daemons[0].pid)]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            took = log_of(tmp_path / "b").count("took over")
            wait_for(lambda: log_of(tmp_path / "b").count("took over") > took,
                     "the other replica takes the partitions", 60, every=0.2)
            broker.produce("paused-events", second)
            wait_for(
                lambda: [v for k, v in scrape(ports[1]).items()
                         if k.startswith("searchmon_consumer_lag{")],
                "the survivor reads every partition to its end", 60,
                until=lambda lags: len(lags) == 5 and not any(lags), every=0.2,
            )
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        broker.produce("paused-events", third)
        a, b = wait_until_shared(ports, len(stream))
        want = counts_of(expected(read_back(broker, "paused-events", 4)))
        assert add(online_counts(a), online_counts(b)) == want
    finally:
        stop_all(daemons)
    assert "lost its group membership" in log_of(tmp_path / "a")


@pytest.mark.serial  # group membership held through timed rebalances
def test_a_restore_in_progress_does_not_hold_up_the_group(tmp_path: Path, broker: Broker) -> None:
    """Replica a's state process is stopped (SIGSTOP) before the group assigns it anything,
    so its first restore never ends. Replica b joins meanwhile: a keeps polling, takes part
    in the rebalance and stays a member past max_poll_interval_ms, so b keeps a share of the
    partitions instead of taking all of them once a is timed out of the group. Resumed, a
    restores and the sums are exact."""
    broker.create_topics({"slow-events": 4, "slow-judgments": 1})
    stream = generated(23, 10)
    broker.produce("slow-events", stream)
    group = f"g-{uuid.uuid4().hex}"
    kafka = 'events_topic = "slow-events"\njudgments_topic = "slow-judgments"\n'
    state = 'store = "kafka"\nchangelog_replication_factor = 1\n'
    ports = [free_port(), free_port()]
    first = start_daemon(tmp_path / "a", broker, group, ports[0], kafka, state)
    daemons = [first]
    try:
        wait_for(lambda: "serving http" in log_of(tmp_path / "a"),  # the state process is ready
                 "a starts", 30, every=0.01)
        (frozen,) = children(first.pid)
        os.kill(frozen, signal.SIGSTOP)
        try:
            daemons.append(start_daemon(tmp_path / "b", broker, group, ports[1], kafka, state))
            wait_for(lambda: "took over" in log_of(tmp_path / "b"), "b takes over partitions", 90,
                     every=0.2)
            taken = log_of(tmp_path / "b").split("took over", 1)[1].splitlines()[0]
            assert taken.count("/") < 5, f"a took part in the rebalance: {taken}"
            # the restore lasts longer than max_poll_interval_ms: a replica that stopped
            # polling for it would now be timed out of the group, and b take everything
            held = time.monotonic() + FAST_GROUP["max_poll_interval_ms"] / 1000 + 4
            while time.monotonic() < held:
                time.sleep(0.2)
            assert log_of(tmp_path / "b").count("took over") == 1, "a is still a member"
        finally:
            os.kill(frozen, signal.SIGCONT)
        a, b = wait_until_shared(ports, len(stream))
        want = counts_of(expected(read_back(broker, "slow-events", 4)))
        assert add(online_counts(a), online_counts(b)) == want
    finally:
        stop_all(daemons)


def test_a_lasting_regression_stays_flagged_until_a_baseline_is_accepted(
    tmp_path: Path, broker: Broker
) -> None:
    """The default baseline policy against the real broker: a second broken sample is still
    a regression (compared with the last good one), with the since gauges; `searchmon
    baseline accept` puts a message on the judgments topic that ends it, and the next broken
    sample compares with the accepted one."""
    broker.create_topics({"lasting-events": 1, "lasting-judgments": 1})
    broker.produce("lasting-judgments", [
        *((b"s1", judgment("s1", q, q, True)) for q in range(30)),
        *((b"s2", judgment("s2", q, 100 + q, False)) for q in range(30)),
        *((b"s3", judgment("s3", q, 200 + q, False)) for q in range(30)),
    ])
    kafka = 'events_topic = "lasting-events"\njudgments_topic = "lasting-judgments"\n'
    group, port = f"g-{uuid.uuid4().hex}", free_port()
    cell = '{measure="nDCG@10",query_class="navigational"}'
    daemon = start_daemon(tmp_path, broker, group, port, kafka, "[offline]\nsample_size = 30\n")
    try:
        flagged = wait_for(
            lambda: scrape(port), "the third sample judged", 120, every=0.2,
            until=lambda v: v.get("searchmon_judged_messages_total") == 90
            and v.get(f"search_judged_regression_samples{cell}") == 2.0,
        )
        assert flagged[f"search_judged_regression{cell}"] == 1.0
        assert flagged[f"search_judged_regression_since_timestamp_seconds{cell}"] == 1.79e9 + 129
        at = datetime.fromtimestamp(1.79e9 + 300, UTC).isoformat()
        accept = subprocess.run(
            [*SEARCHMON, "baseline", "accept", "--config", str(tmp_path / "searchmon.toml"),
             "--class", "navigational", "--reason", "intended", "--by", "alice", "--at", at],
            capture_output=True, text=True, timeout=60,
        )
        assert accept.returncode == 0, accept.stderr
        resolved = wait_for(lambda: scrape(port), "the acceptance applied", 120, every=0.2,
                            until=lambda v: v.get(f"search_judged_regression{cell}") == 0.0)
        assert f"search_judged_regression_samples{cell}" not in resolved
        broker.produce("lasting-judgments",
                       [(b"s4", judgment("s4", q, 400 + q, False)) for q in range(30)])
        after = wait_for(lambda: scrape(port), "the fourth sample judged", 120, every=0.2,
                         until=lambda v: v.get("searchmon_judged_messages_total") == 121)
        assert after[f"search_judged_regression{cell}"] == 0.0
        assert "baseline accepted by alice: sample s3" in log_of(tmp_path)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


def test_a_finished_stream_is_counted_in_full_soon_after_caught_up(
    tmp_path: Path, broker: Broker
) -> None:
    """No event follows the last ones: once a partition is read to its end and quiet for
    `[sessions] idle_after`, its watermark follows the wall clock, so every click is applied
    and every session closes, as at the end of a replay (which closes everything)."""
    broker.create_topics({"idle-events": 2, "idle-judgments": 1})
    broker.produce("idle-events", generated(23, 20))
    messages = read_back(broker, "idle-events", 2)
    closed = expected(messages)
    for pipeline in closed:
        pipeline.close()
    want = counts_of(closed)
    open_ones = counts_of(expected(messages))
    assert want != open_ones, "without the idle watermark some would stay uncounted"
    kafka = 'events_topic = "idle-events"\njudgments_topic = "idle-judgments"\n'
    port = free_port()
    daemon = start_daemon(tmp_path, broker, f"g-{uuid.uuid4().hex}", port, kafka,
                          idle_after="2s")
    try:
        wait_for_log(tmp_path, daemon, "caught up", 120)
        caught_up = time.monotonic()
        counted = wait_for(lambda: online_counts(scrape(port)), "every session counted", 60,
                           until=lambda counts: counts == want, every=0.5)
        print(f"counted in full {time.monotonic() - caught_up:.1f} s after caught up")
        assert counted == want
        assert "the watermark follows the wall clock" in log_of(tmp_path)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


def test_reset_starts_over_from_the_earliest_or_the_latest_offsets(
    tmp_path: Path, broker: Broker
) -> None:
    """`searchmon reset` moves the state aside and sets the group's committed offsets: the
    next start counts the topic anew from the earliest (as one daemon that never ran), or
    nothing of it from the latest; it refuses while the daemon runs; the log says where a
    partition without a checkpoint starts reading and why. The judgments topic is read
    again from its start whatever the events' point (its qrels were in the state)."""
    broker.create_topics({"reset-events": 2, "reset-judgments": 1})
    broker.produce("reset-events", generated(29, 5))
    qrels = {"type": "qrels", "timestamp": "2026-01-01T00:00:00Z", "query_text": "red shoes",
             "labels": {"d1": 1}}
    broker.produce("reset-judgments", [(None, json.dumps(qrels).encode())])
    messages = read_back(broker, "reset-events", 2)
    total = sum(map(len, messages))
    kafka = 'events_topic = "reset-events"\njudgments_topic = "reset-judgments"\n'
    group, port = f"g-{uuid.uuid4().hex}", free_port()
    config = tmp_path / "searchmon.toml"

    def reset(to: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SEARCHMON, "reset", "--config", str(config), "--to", to],
                              capture_output=True, text=True, timeout=120)

    def run_until_read(events: int) -> dict[str, float]:
        daemon = start_daemon(tmp_path, broker, group, port, kafka)
        try:
            starts = log_of(tmp_path).count("took over") + 1
            if events:
                values = wait_until_read(port, events)
            else:  # taken over, then two checkpoints later still nothing read
                wait_for(lambda: log_of(tmp_path).count("took over"), "took over", 120,
                         until=lambda count: count >= starts, every=0.2)
                def checkpointed() -> float:
                    return scrape(port).get("searchmon_checkpoint_timestamp_seconds", 0.0)

                first = checkpointed()
                later = wait_for(checkpointed, "a checkpoint", 60,
                                 until=lambda now: now > first, every=0.2)
                wait_for(checkpointed, "another checkpoint", 60,
                         until=lambda now: now > later, every=0.2)
                values = scrape(port)
            assert reset("earliest").returncode == 2, "refused while the daemon runs"
            return values
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)

    first = run_until_read(total + 1)  # the events and the qrels message
    done = reset("earliest")
    assert done.returncode == 0, done.stderr
    assert "reset-events/0: 0" in done.stdout and "moved checkpoints" in done.stdout
    assert list(tmp_path.glob("state/reset-*/checkpoints/*.ckpt"))
    again = run_until_read(total + 1)
    assert online_counts(again) == online_counts(first) == counts_of(expected(messages))
    assert "no checkpoint: reading from the group's committed offset 0" in log_of(tmp_path)
    done = reset("latest")
    assert done.returncode == 0, done.stderr
    ends = {f"reset-events/{p}: {len(m)}" for p, m in enumerate(messages)}
    assert all(line in done.stdout for line in ends), done.stdout
    assert "reset-judgments/0: 0" in done.stdout, "the judgments are read again"
    after = run_until_read(0)
    assert after.get("searchmon_judged_messages_total", 0.0) == 1.0  # the qrels, again
    assert after.get("searchmon_events_read_total", 0.0) == 1.0  # and no event
