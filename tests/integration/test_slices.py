"""Slices through the daemon: events with dimension values from a real broker, counted per
slice exactly as an independent count says, on /metrics, /queries and the status page."""

from __future__ import annotations

import json
import random
import re
import signal
import uuid
from collections import Counter
from pathlib import Path

from tests.support.broker import Broker, free_port
from tests.support.daemon import start_daemon, wait_for_log
from tests.support.http import get, scrape
from tests.support.wait import wait_for
from tests.unit.test_slices import DIMENSIONS, expected, traffic

SAMPLE = re.compile(r'^search_(queries|clicks|clicked_queries|sessions)_total\{(.*)\}$')


def per_slice(values: dict[str, float]) -> dict[tuple[str, ...], Counter[str]]:
    """The online counters of a scrape by slice (query_class, then the dimensions)."""
    out: dict[tuple[str, ...], Counter[str]] = {}
    for name, value in values.items():
        match = SAMPLE.match(name)
        if match is None or not value:
            continue
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', match[2]))
        key = (labels["query_class"], *(labels[d] for d in DIMENSIONS))
        out.setdefault(key, Counter())[match[1]] = int(value)
    return out


def test_per_slice_counts_of_the_daemon_equal_an_independent_count(
    tmp_path: Path, broker: Broker
) -> None:
    """Two partitions, each session's events in one (keyed by session), arriving shuffled
    within the allowed lateness: once the partitions are idle every session has closed, and
    every slice's queries, clicks, clicked queries and sessions are those counted apart."""
    events = traffic(seed=31, sessions=300)
    want = expected(events, limit=20)  # fewer distinct values than the bound: none folded
    rng = random.Random(5)
    arrival = sorted(events, key=lambda event: event[0] + rng.uniform(0, 100))
    topic = f"slices-{uuid.uuid4().hex[:8]}"
    broker.create_topics({topic: 2, f"{topic}-judged": 1})

    def session_of(line: bytes) -> bytes:
        return str(json.loads(line)["session_id"]).encode()

    broker.produce(topic, [(session_of(line), line) for _, _, line in arrival])
    kafka = f'events_topic = "{topic}"\njudgments_topic = "{topic}-judged"\n'
    slices = ('[slices]\ndimensions = ["platform", "locale"]\n'
              '[query_lists]\ndimensions = ["platform"]\n')
    port = free_port()
    daemon = start_daemon(tmp_path, broker, f"g-{uuid.uuid4().hex}", port, kafka,
                          state=slices, idle_after="2s")
    try:
        wait_for_log(tmp_path, daemon, "caught up", 120)
        counted = wait_for(lambda: per_slice(scrape(port)), "every slice counted", 90,
                           until=lambda found: found == want, every=0.5)
        assert counted == want
        assert len(want) > 20, "many slices"
        values = scrape(port)
        assert values['searchmon_slice_values_folded_total{dimension="platform"}'] == 0.0
        status, body = get(f"http://127.0.0.1:{port}/queries?platform=ios")
        assert status == 200
        entries = json.loads(body)["lists"]
        assert entries and all(e["platform"] == "ios" for e in entries)
        status, _ = get(f"http://127.0.0.1:{port}/queries?planet=mars")
        assert status == 400
        status, body = get(f"http://127.0.0.1:{port}/queries?locale=de-DE")
        assert status == 400 and "not kept by it" in body
        status, page = get(f"http://127.0.0.1:{port}/?platform=ios&view=total")
        assert status == 200
        assert "by platform" in page and "by locale" in page and "<b>ios</b>" in page
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
