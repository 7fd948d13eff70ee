"""The /metrics exposition of a small replay, against a golden file, and a failing collector over
HTTP (``replay --serve``: tests/integration/test_exposition.py)."""

from __future__ import annotations

import os
import re

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from monitor.cli.replay import replay
from monitor.config import Config
from monitor.core.export import export
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.serve.metrics import ExportCollector
from monitor.serve.routes import MetricsServer
from tests.support.files import DATA
from tests.support.http import get

GOLDEN = DATA / "replay_small.metrics"


def replayed() -> CollectorRegistry:
    """A private registry exposing the replay of ``replay_small.jsonl``."""
    pipeline = Pipeline(Config())
    replay(pipeline, DATA / "replay_small.jsonl", RejectionLog(0))
    pipeline.close()
    registry = CollectorRegistry()
    registry.register(ExportCollector(lambda: export(pipeline)))
    return registry


def exposition() -> str:
    text = generate_latest(replayed()).decode()
    # the versions and the build depend on the installation, not on the replay
    return re.sub(r'(version|python|kafka_python|compiled)="[^"]*"', r'\1="X"', text)


def test_golden_exposition() -> None:
    text = exposition()
    if os.environ.get("SEARCHMON_WRITE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_values_read_back_through_a_private_registry() -> None:
    value = replayed().get_sample_value
    assert value("search_queries_total", {"query_class": "travel"}) == 2
    assert value("search_queries_total", {"query_class": "other"}) == 0
    assert value("search_abandoned_sessions_total", {"query_class": "travel"}) == 1
    assert value("search_reformulated_queries_total", {"query_class": "news"}) == 1
    assert value("search_query_latency_seconds_bucket",
                 {"query_class": "travel", "le": "0.05"}) == 2
    assert value("search_query_latency_seconds_count", {"query_class": "news"}) == 1
    assert value("searchmon_events_rejected_total", {"reason": "duplicate"}) == 1
    assert value("searchmon_events_rejected_total", {"reason": "too_large"}) == 0
    assert value("searchmon_events_read_total") == 10


class Broken:
    def collect(self) -> list[object]:
        raise ValueError("no figures today")


def test_a_failing_collector_answers_500_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    registry.register(Broken())  # type: ignore[arg-type]
    server = MetricsServer(("127.0.0.1", 0), registry).start()
    try:
        status, body = get(f"http://127.0.0.1:{server.port}/metrics")
        assert get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
    finally:
        server.close()
    assert status == 500 and "no figures today" in body
    assert "collecting /metrics failed" in caplog.text and "ValueError" in caplog.text
