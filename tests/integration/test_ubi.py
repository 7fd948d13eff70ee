"""The worked UBI example through Kafka and `searchmon run` gives the numbers computed by hand."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

from kafka import KafkaProducer

from tests.support.broker import Broker, free_port
from tests.support.daemon import log_of, start_daemon, wait_until_read
from tests.support.http import get, samples
from tests.support.ubi import EVENTS, EXPECTED, QUERIES
from tests.support.wait import wait_for


def test_the_same_records_through_kafka_give_the_same_numbers(
    tmp_path: Path, broker: Broker
) -> None:
    """Producers key UBI records by client_id (queries and events carry it), so a client's
    records share a partition; in event time order, as an application logs them."""
    documents = sorted(QUERIES + EVENTS, key=lambda d: d["timestamp"].rstrip("Z")[:19])
    # a later query moves the watermark past every session, so they close as in replay
    closing = {"query_id": "late", "client_id": "c9", "user_query": "later",
               "timestamp": "2026-11-22T12:00:00Z", "query_response_hit_ids": ["x"]}
    topic = f"ubi-{uuid.uuid4().hex[:8]}"
    broker.create_topics({topic: 1, f"{topic}-judgments": 1})
    producer = KafkaProducer(bootstrap_servers=broker.address)
    for document in [*documents, closing]:
        producer.send(topic, key=document["client_id"].encode(),
                      value=json.dumps(document).encode())
    producer.flush()
    producer.close()
    port = free_port()
    daemon = start_daemon(
        tmp_path, broker, f"g-{uuid.uuid4().hex}", port,
        kafka=f'events_topic = "{topic}"\njudgments_topic = "{topic}-judgments"\n',
    )
    try:
        wait_until_read(port, len(documents) + 1)
        # the checkpoint after the last batch is what /metrics shows
        values = wait_for(lambda: samples(get(f"http://127.0.0.1:{port}/metrics")[1]),
                          "the sessions of the last batch on /metrics", 30,
                          until=lambda v: v.get('search_sessions_total{query_class="other"}') == 3)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert daemon.returncode == 0, log_of(tmp_path)

    def total(name: str) -> float:
        return values[f'search_{name}_total{{query_class="other"}}']

    assert total("queries") == EXPECTED["queries"] + 1
    for name in ("zero_result_queries", "clicked_queries", "clicks", "sessions",
                 "abandoned_sessions", "successful_sessions", "conversions"):
        assert total(name) == EXPECTED[name], name
    assert total("result_impressions") == EXPECTED["result_impressions"] + 1
    assert values["searchmon_ignored_actions_total"] == 1
    assert values["searchmon_unmatched_clicks_total"] == 0
