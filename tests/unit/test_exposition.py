"""The /metrics exposition of a small replay, against a golden file; and the HTTP endpoint."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from monitor.cli.replay import replay
from monitor.config import Config
from monitor.core.export import export
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.serve.http import MetricsServer
from monitor.serve.metrics import ExportCollector
from tests.conftest import DATA

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
    # the versions depend on the installation, not on the replay
    return re.sub(r'(version|python|kafka_python)="[^"]*"', r'\1="X"', text)


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_replay_serve_over_http_from_a_gzip_file(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl.gz"
    with gzip.open(events, "wb") as packed, (DATA / "replay_small.jsonl").open("rb") as src:
        shutil.copyfileobj(src, packed)
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "replay", str(events), "--config", str(config),
         "--report", "json", "--serve"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = get(f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(0.1)
        assert status == 200
        assert 'search_queries_total{query_class="travel"} 2.0' in body
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        assert get(f"http://127.0.0.1:{port}/nothing")[0] == 404
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    result = json.loads(out)
    assert result["online"]["all"]["queries"] == 4
    assert result["online"]["travel"]["session_success_rate"] == 1.0
    assert result["rejected"] == {"duplicate": 1, "invalid_json": 1, "schema": 1}
    assert f"{events}:10" in err


def test_replay_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", str(tmp_path / "absent.jsonl")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "cannot read" in done.stderr
    assert "Traceback" not in done.stderr


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
