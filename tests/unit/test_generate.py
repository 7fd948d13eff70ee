"""The generator: reproducible, and realistic where the metrics depend on it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter

from kafka import KafkaConsumer, TopicPartition

from monitor.config import Config
from monitor.core.pipeline import Pipeline
from monitor.inputs.generate import Regression, Traffic, World, events
from monitor.serve.report import report
from tests.broker import Broker

HOUR = 3600.0


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


def clicks_by_position(seed: int) -> tuple[Counter[int], Counter[int], int, int]:
    world = World.build(seed)
    clicks: Counter[int] = Counter()
    relevant_clicks = clicked = 0
    shown: Counter[int] = Counter()
    queries: dict[str, tuple[str, list[str]]] = {}
    by_text = {q.text: q for q in world.queries}
    for _, _, line in events(world, Traffic(seed=seed, sessions_per_second=5, duration=1800,
                                            malformed_rate=0, duplicate_rate=0)):
        event = json.loads(line)
        if event["type"] == "query":
            queries[event["query_id"]] = (event["query_text"], event["result_ids"])
            for position in range(1, len(event["result_ids"]) + 1):
                shown[position] += 1
        elif event["type"] == "click":
            clicks[event["position"]] += 1
            text, _ = queries[event["query_id"]]
            clicked += 1
            relevant_clicks += by_text[text].relevance[event["doc_id"]] > 0
    return clicks, shown, relevant_clicks, clicked


def test_click_through_falls_with_position_and_favours_relevant_results() -> None:
    clicks, shown, relevant_clicks, clicked = clicks_by_position(2)
    rate = [clicks[p] / shown[p] for p in range(1, 11)]
    assert rate[0] > rate[2] > rate[5] > rate[9]
    # about half of the documents in result lists are relevant; clicks favour them strongly
    assert relevant_clicks / clicked > 0.8


def test_injected_regression_moves_only_its_class() -> None:
    def replay(regression: Regression | None) -> dict[str, dict[str, float]]:
        world = World.build(6)
        traffic = Traffic(seed=6, sessions_per_second=3, duration=2 * HOUR,
                          judged_every=HOUR, judged_queries=300, regression=regression)
        pipeline = Pipeline(Config())
        for _, _, line in events(world, traffic):
            pipeline.feed(line)
        pipeline.close()
        online = report(pipeline)["online"]
        ndcg = {name: pipeline.judged.samples_mean(1, k, 0)
                for k, name in enumerate(pipeline.classes.names)}
        return {name: {"ctr": online[name]["ctr"] or 0.0,
                       "ndcg": (ndcg[name] or (0.0, 0))[0]}
                for name in online if name not in ("all", "other")}

    base = replay(None)
    broken = replay(Regression("navigational", Traffic().start))
    assert broken["navigational"]["ctr"] < base["navigational"]["ctr"] - 0.1
    assert broken["navigational"]["ndcg"] < base["navigational"]["ndcg"] - 0.2
    for klass in ("informational", "product", "local"):
        assert abs(broken[klass]["ctr"] - base[klass]["ctr"]) < 0.05, klass
        assert abs(broken[klass]["ndcg"] - base[klass]["ndcg"]) < 0.05, klass


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
