"""History into Prometheus: three hours of generated traffic, replayed to OpenMetrics with a
sample every 5 minutes of event time, made into blocks by the real ``promtool tsdb
create-blocks-from openmetrics`` and queried from a real Prometheus started on them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.prometheus import Prometheus, start_prometheus, tool

SEARCHMON = [sys.executable, "-m", "monitor"]
STEP = 300.0
HOURS = 3


def run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The backfill file and the ``--report json`` of three hours of traffic that began two
    days ago (well within the retention of the Prometheus below)."""
    tmp = tmp_path_factory.mktemp("backfill")
    events = tmp / "events.jsonl"
    start = int(time.time()) - 2 * 86400
    run(*SEARCHMON, "generate", "--duration", f"{HOURS}h", "--start", str(start),
        "--sessions-per-second", "1", "--output", str(events))
    report = json.loads(run(*SEARCHMON, "replay", str(events), "--report", "json",
                            "--log-level", "error"))
    backfill = tmp / "backfill.om"
    backfill.write_text(run(*SEARCHMON, "replay", str(events), "--report", "openmetrics",
                            "--step", "5m", "--log-level", "error"))
    return backfill, report


@pytest.fixture
def prometheus(tmp_path: Path, replayed: tuple[Path, dict[str, Any]]) -> Iterator[Prometheus]:
    data = tmp_path / "data"
    run(tool("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(replayed[0]),
        str(data))
    assert any(data.glob("*/meta.json")), "promtool wrote no block"
    server = start_prometheus(tmp_path, data)
    try:
        yield server
    finally:
        server.stop()
        server.print_log()  # shown when the test fails


def span(backfill: Path) -> tuple[float, float]:
    """The first and the last timestamp of the file."""
    stamps = [float(t) for t in re.findall(r" (\d+(?:\.\d+)?)$", backfill.read_text(),
                                             flags=re.MULTILINE)]
    return min(stamps), max(stamps)


def values(result: list[dict[str, Any]]) -> dict[str, float]:
    """An instant query's values, by query class ('' for none)."""
    return {r["metric"].get("query_class", ""): float(r["value"][1]) for r in result}


def test_prometheus_serves_the_replayed_history(
    prometheus: Prometheus, replayed: tuple[Path, dict[str, Any]],
) -> None:
    backfill, report = replayed
    first, end = span(backfill)
    online = report["online"]
    total = online["all"]["queries"]
    assert end - first >= HOURS * 3600 and total > 5000

    # the last step, the closed state: the figures of --report json, overall and per class
    assert values(prometheus.query("sum(search_queries_total)", end)) == {"": total}
    by_class = values(prometheus.query("sum by (query_class) (search_queries_total)", end))
    assert by_class == {k: v["queries"] for k, v in online.items() if k != "all"}
    sessions = values(prometheus.query("sum(search_sessions_total)", end))
    assert sessions == {"": online["all"]["sessions"]}

    # the whole range: counters from 0 at the first step, never reset, so their increase is
    # the total (no extrapolation below 0, the last sample at the end)
    whole = f"{round(end - first)}s"
    increase = values(prometheus.query(f"sum(increase(search_queries_total[{whole}]))", end))
    assert increase[""] == pytest.approx(total)
    assert values(prometheus.query(f"sum(resets(search_queries_total[{whole}]))", end)) == {
        "": 0.0}
    steps = round((end - first) / STEP) + 1
    counted = prometheus.query(f"count_over_time(search_queries_total[{whole}])", end)
    assert {float(r["value"][1]) for r in counted} == {steps}, "every class at every step"
    opened = values(prometheus.query(f"max_over_time(searchmon_open_sessions[{whole}])", end))
    assert opened[""] > 0
    assert values(prometheus.query("searchmon_open_sessions", end)) == {"": 0.0}

    # a rate at every 5 minutes of the replayed hours, about the traffic generated (1 session
    # a second, a query or a few each)
    series = prometheus.query_range("sum(rate(search_queries_total[15m]))", first + 900, end,
                                    STEP)
    assert len(series) == 1
    points = [(float(t), float(v)) for t, v in series[0]["values"]]
    assert len(points) >= HOURS * 12 - 3
    assert points[-1][0] - points[0][0] >= (HOURS - 0.5) * 3600
    assert all(0.5 < rate < 5 for _, rate in points), points
