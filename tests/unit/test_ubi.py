"""UBI data as OpenSearch users have it: ``_bulk`` exports in index order, queries without
``session_id``, impressions instead of hit ids, 0-based ordinals, integer ids; the numbers
computed by hand, the same from replay in any order and from ``searchmon run``."""

from __future__ import annotations

import json
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from monitor.cli.replay import replay_files
from monitor.config import Config
from monitor.core.export import export
from monitor.core.pipeline import RejectionLog
from monitor.inputs import files as replay_module
from monitor.serve.report import report
from tests.broker import Broker, free_port
from tests.test_daemon import log_of, samples, start_daemon, wait_until_read
from tests.test_exposition import get

QUERIES: list[dict[str, Any]] = [
    # c1 asks twice; the first query's results were not logged (impressions say what was
    # shown), the second's were
    {"query_id": "q1", "client_id": "c1", "user_query": "laptop",
     "timestamp": "2026-11-22T10:00:00.000Z", "application": "shop"},
    {"query_id": "q2", "client_id": "c1", "user_query": "laptop bag",
     "timestamp": "2026-11-22T10:00:40Z", "query_response_hit_ids": [201, "202"]},
    # c2 finds nothing and leaves
    {"query_id": "q3", "client_id": "c2", "user_query": "xyz",
     "timestamp": "2026-11-22T10:05:00+00:00", "query_response_hit_ids": []},
    # c3: no offset in the timestamp (UTC), results shown as impressions
    {"query_id": "q4", "client_id": "c3", "user_query": "phone",
     "timestamp": "2026-11-22T10:10:00"},
]


def event(action: str, query_id: str, at: str, session: str, client: str,
          **attributes: Any) -> dict[str, Any]:
    return {"action_name": action, "query_id": query_id, "session_id": session,
            "client_id": client, "timestamp": f"2026-11-22T{at}Z",
            "event_attributes": attributes}


EVENTS: list[dict[str, Any]] = [
    *(event("impression", "q1", f"10:00:0{i}", "S1", "c1",
            object={"object_id": 101 + i}, position={"ordinal": i}) for i in range(3)),
    event("click", "q1", "10:00:10", "S1", "c1", object={"object_id": 102},
          position={"ordinal": 1}),
    event("item_click", "q2", "10:00:50", "S1", "c1", object={"object_id": "201"},
          position={"ordinal": 0}),
    event("add_to_cart", "q1", "10:01:00", "S1", "c1", object={"object_id": 102}),
    *(event("impression", "q4", f"10:10:0{i}", "S3", "c3",
            object={"object_id": f"p{i}"}, position={"ordinal": i}) for i in range(2)),
    event("click", "q4", "10:10:05", "S3", "c3", object={"object_id": "p1"},
          position={"xy": {"x": 120.5, "y": 388}}, dwell_time=45.0),
    event("hover", "q4", "10:10:06", "S3", "c3", object={"object_id": "p0"}),
]

EXPECTED = {
    "queries": 4, "zero_result_queries": 1, "clicked_queries": 3, "clicks": 3,
    # q1: 3 impressions (its hit ids unknown); q2: its 2 hit ids; q3: none; q4: 2 impressions
    "result_impressions": 7,
    "sessions": 3, "abandoned_sessions": 1, "successful_sessions": 2, "conversions": 1,
    # q1 is followed by q2 within 60 s, but c1 clicked between them
    "reformulated_queries": 0,
    "ctr": 0.75, "zero_result_rate": 0.25, "abandonment_rate": 1 / 3,
    "session_success_rate": 2 / 3,
}


def bulk(documents: list[tuple[str, dict[str, Any]]]) -> bytes:
    lines = []
    for index, document in documents:
        lines.append(json.dumps({"index": {"_index": index, "_id": uuid.uuid4().hex}}))
        lines.append(json.dumps(document))
    return ("\n".join(lines) + "\n").encode()


def replayed(tmp: Path, files: dict[str, bytes]) -> dict[str, Any]:
    paths = []
    for name, data in files.items():
        (tmp / name).write_bytes(data)
        paths.append(tmp / name)
    pipeline = replay_files(Config(), paths, [], RejectionLog(0))
    result = report(pipeline)
    assert result["rejected"] == {}
    assert (result["unmatched_clicks"], result["ignored_actions"]) == (0, 1)
    return result


def check(result: dict[str, Any]) -> None:
    entry = result["online"]["all"]
    for key, value in EXPECTED.items():
        assert abs(entry[key] - value) < 1e-12, (key, entry[key], value)


def test_a_bulk_export_in_index_order_gives_the_hand_computed_metrics(tmp_path: Path) -> None:
    """All queries first, then all events, as `_bulk` exports are: the replay sorts by event
    time (the events are an hour behind the last query), sessions come from the queries'
    client ids, each event reaches its query through query_id whatever its session_id."""
    data = bulk([("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS])
    check(replayed(tmp_path, {"ubi.ndjson": data}))


def test_any_order_and_any_split_into_files_gives_the_same_numbers(tmp_path: Path) -> None:
    documents = [("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS]
    for seed in range(5):
        random.Random(seed).shuffle(documents)
        check(replayed(tmp_path, {"shuffled.ndjson": bulk(documents)}))
    plain = {
        "queries.jsonl": b"".join(json.dumps(q).encode() + b"\n" for q in QUERIES),
        "events.jsonl": b"".join(json.dumps(e).encode() + b"\n" for e in EVENTS),
    }
    check(replayed(tmp_path, plain))


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
        deadline = time.monotonic() + 30
        while True:  # the checkpoint after the last batch is what /metrics shows
            values = samples(get(f"http://127.0.0.1:{port}/metrics")[1])
            if values.get('search_sessions_total{query_class="other"}') == 3:
                break
            assert time.monotonic() < deadline, values
            time.sleep(0.1)
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


def test_a_large_unordered_input_is_sorted_in_bounded_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of RUN_LINES lines are sorted, spilled to temporary files and merged: the
    numbers equal those of the in-memory sort."""
    documents = [("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS]
    data = bulk(documents[::-1])  # newest first: far out of order
    check(replayed(tmp_path, {"reversed.ndjson": data}))
    monkeypatch.setattr(replay_module, "RUN_LINES", 3)
    spilled: list[Path] = []
    real_spill = replay_module._spill

    def spill(run: Any, path: Path) -> Any:
        spilled.append(path)
        return real_spill(run, path)

    monkeypatch.setattr(replay_module, "_spill", spill)
    check(replayed(tmp_path, {"reversed.ndjson": data}))
    assert len(spilled) == 4, "14 documents in runs of 3 (the last 2 stay in memory)"


def test_impressions_rebuild_the_served_list_for_the_qrels_join(tmp_path: Path) -> None:
    """`laptop` logged no hit ids; its impressions showed 101, 102, 103 (ordinals 0 to 2).
    With qrels judging 102 relevant, the live join scores that rebuilt list: RR 1/2,
    P@5 1/5. `phone` (no qrels) and `laptop bag` (no qrels) are not joined."""
    qrels = {"type": "qrels", "timestamp": "2026-11-22T09:00:00Z", "query_text": "laptop",
             "labels": {"101": 0, "102": 2, "103": 0}}
    data = bulk([("ubi_queries", q) for q in QUERIES] + [("ubi_events", e) for e in EVENTS])
    (tmp_path / "ubi.ndjson").write_bytes(json.dumps(qrels).encode() + b"\n" + data)
    pipeline = replay_files(Config(), [tmp_path / "ubi.ndjson"], [], RejectionLog(0))
    figures = export(pipeline).offline
    assert figures is not None
    live = {
        (m.measure, m.window): (m.mean, m.queries) for m in figures.means
        if m.source == "live" and m.slice == ("all",) and m.queries
    }
    assert live[("RR", 3600.0)] == (0.5, 1)
    assert live[("P@5", 3600.0)] == (0.2, 1)
