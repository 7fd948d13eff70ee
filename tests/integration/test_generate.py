"""The generator as a command (the same seed, the same bytes) and on a real broker (keyed
messages)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter

from kafka import KafkaConsumer, TopicPartition

from monitor.inputs.generate import Traffic, World, events
from tests.support.broker import Broker


def test_same_seed_same_bytes() -> None:
    def run(seed: int) -> bytes:
        return subprocess.run(
            [sys.executable, "-m", "monitor", "generate", "--seed", str(seed), "--duration",
             "5m", "--judged-every", "2m", "--qrels"],
            capture_output=True, check=True, timeout=60,
        ).stdout

    first = run(4)
    assert first == run(4)
    assert first != run(5)
    kinds: Counter[str] = Counter()
    for line in first.splitlines():
        try:
            kinds[json.loads(line).get("type")] += 1
        except (ValueError, AttributeError):  # the trickle of malformed lines
            kinds["malformed"] += 1
    assert {"query", "click", "judgment", "qrels"} <= set(kinds)


def test_a_duplicate_goes_to_its_original_s_partition(broker: Broker) -> None:
    """``generate --kafka`` onto a 4-partition topic, read back: every line sent twice is in
    one partition under one key, and every event's key is its session (a duplicate keyed to
    the next message's session landed elsewhere and was counted as a new event)."""
    topic = f"generated-{uuid.uuid4().hex[:8]}"
    broker.create_topics({topic: 4, f"{topic}-judgments": 1})
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "generate", "--seed", "3", "--duration", "10m",
         "--sessions-per-second", "2", "--duplicate-rate", "0.05", "--malformed-rate", "0",
         "--kafka", broker.address, "--topic", topic, "--judgments-topic",
         f"{topic}-judgments"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    consumer = KafkaConsumer(bootstrap_servers=broker.address, enable_auto_commit=False)
    partitions = [TopicPartition(topic, p) for p in range(4)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    placed: dict[bytes, list[tuple[int, bytes]]] = {}
    idle = 0
    while idle < 6:
        batch = consumer.poll(timeout_ms=500)
        idle = 0 if batch else idle + 1
        for tp, records in batch.items():
            for record in records:
                placed.setdefault(record.value, []).append((tp.partition, record.key))
    consumer.close()
    sent = sum(map(len, placed.values()))
    generated = list(events(World.build(3), Traffic(
        seed=3, duration=600.0, sessions_per_second=2.0, duplicate_rate=0.05, malformed_rate=0,
    )))
    assert sent == len(generated), "everything was read back"
    twice = {value: where for value, where in placed.items() if len(where) > 1}
    assert len(twice) > 20, "duplicates to look at"
    for value, where in twice.items():
        assert len(set(where)) == 1, (value, where)
    partition_of: dict[bytes, int] = {}
    for value, where in placed.items():
        for partition, key in where:
            assert key == json.loads(value)["session_id"].encode(), (key, value)
            assert partition_of.setdefault(key, partition) == partition, "one session, one"
    assert len(set(partition_of.values())) == 4


def test_every_generated_message_says_its_topic() -> None:
    """``messages`` marks judged messages (for the judgments topic): nothing downstream
    looks into a line to route it."""
    import json

    from monitor.inputs.generate import messages

    kinds = set()
    for message in messages(World.build(3), Traffic(seed=3, duration=7200.0,
                                                    judged_every=3600.0, qrels=True)):
        try:
            kind = json.loads(message.line).get("type")
        except ValueError:
            kind = None  # a deliberately malformed line: an event's
        assert message.judged == (kind in ("judgment", "qrels")), message
        kinds.add(kind)
    assert {"query", "click", "judgment", "qrels"} <= kinds
