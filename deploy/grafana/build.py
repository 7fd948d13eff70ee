"""Builds deploy/grafana/searchmon.json, the Grafana dashboard, from the panel list below.

Run `python deploy/grafana/build.py` after changing a panel; a test checks that the JSON is
up to date and runs every panel's query against a real Prometheus that scraped a replay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("searchmon.json")
CLASS = 'query_class=~"$query_class"'

# (row title, [(panel title, unit, [(legend, expr), ...]), ...])
ROWS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    ("Overview (all classes)", [
        ("Queries per second", "reqps", [("queries/s", "sum(rate(search_queries_total[5m]))")]),
        ("Click-through rate", "percentunit", [("CTR", ":search_ctr:ratio_rate5m")]),
        ("Zero-result rate", "percentunit",
         [("zero-result", ":search_zero_result_rate:ratio_rate5m")]),
        ("Abandonment rate", "percentunit",
         [("abandonment", ":search_abandonment_rate:ratio_rate5m")]),
        ("Session success rate", "percentunit",
         [("success", ":search_session_success_rate:ratio_rate5m")]),
    ]),
    ("Per query class", [
        ("Queries per second by class", "reqps",
         [("{{query_class}}", f"query_class:search_queries:rate5m{{{CLASS}}}")]),
        ("CTR by class", "percentunit",
         [("{{query_class}}", f"query_class:search_ctr:ratio_rate5m{{{CLASS}}}")]),
        ("Click rate per impression by class", "percentunit",
         [("{{query_class}}",
           f"query_class:search_click_rate_per_impression:ratio_rate5m{{{CLASS}}}")]),
        ("Zero-result rate by class", "percentunit",
         [("{{query_class}}", f"query_class:search_zero_result_rate:ratio_rate5m{{{CLASS}}}")]),
        ("Abandonment rate by class", "percentunit",
         [("{{query_class}}", f"query_class:search_abandonment_rate:ratio_rate5m{{{CLASS}}}")]),
        ("Session success rate by class", "percentunit",
         [("{{query_class}}",
           f"query_class:search_session_success_rate:ratio_rate5m{{{CLASS}}}")]),
        ("Query latency p95 by class", "s",
         [("{{query_class}}", "histogram_quantile(0.95, sum by (query_class, le) "
           f"(rate(search_query_latency_seconds_bucket{{{CLASS}}}[5m])))")]),
        ("Clicks by position", "short",
         [("<= {{le}}", "sum by (le) "
           f"(rate(search_click_position_bucket{{{CLASS}}}[5m]))")]),
        ("Reformulated queries per second", "reqps",
         [("{{query_class}}", "sum by (query_class) "
           f"(rate(search_reformulated_queries_total{{{CLASS}}}[5m]))")]),
    ]),
    ("Offline: judged quality", [
        ("Judged means, latest sample", "short",
         [("{{query_class}} {{measure}}", "search_judged_score_mean"
           f'{{{CLASS}, source="sample", window="last_1_samples"}}')]),
        ("Judged queries behind the means", "short",
         [("{{query_class}} {{measure}}", "search_judged_queries"
           f'{{{CLASS}, source="sample", window="last_1_samples"}}')]),
        ("Live traffic scored against qrels, 1h", "short",
         [("{{query_class}} {{measure}}", "search_judged_score_mean"
           f'{{{CLASS}, source="live", window="1h"}}')]),
        ("Regression flags (latest sample vs baseline)", "short",
         [("{{query_class}} {{measure}}", f"search_judged_regression{{{CLASS}}}")]),
        ("Delta against baseline", "short",
         [("{{query_class}} {{measure}}", f"search_judged_delta{{{CLASS}}}")]),
        ("Judged@10 coverage", "percentunit",
         [("{{query_class}}", 'search_judged_score_mean{measure="Judged@10", source="sample", '
           f'window="last_1_samples", {CLASS}}}')]),
    ]),
    ("searchmon health", [
        ("Scrape target up", "short", [("{{instance}}", 'up{job="searchmon"}')]),
        ("Messages read per second", "reqps",
         [("read", "sum(rate(searchmon_events_read_total[5m]))")]),
        ("Rejected messages by reason", "reqps",
         [("{{reason}}", "sum by (reason) (rate(searchmon_events_rejected_total[5m]))")]),
        ("Open sessions", "short", [("{{instance}}", "searchmon_open_sessions")]),
        ("Event time behind wall clock", "s",
         [("{{instance}}", "time() - searchmon_last_event_timestamp_seconds")]),
        ("Consumer lag", "short",
         [("{{topic}}/{{partition}}", "sum by (topic, partition) (searchmon_consumer_lag)")]),
        ("Broker connected", "short", [("{{instance}}", "searchmon_broker_connected")]),
        ("Checkpoint age", "s",
         [("{{instance}}", "time() - searchmon_checkpoint_timestamp_seconds")]),
        ("Dead-lettered messages per second", "reqps",
         [("{{instance}}", "rate(searchmon_dead_lettered_total[5m])")]),
    ]),
]


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row_title, row_panels in ROWS:
        panels.append({
            "type": "row", "title": row_title, "id": next_id, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": [],
        })
        next_id += 1
        y += 1
        for i, (title, unit, targets) in enumerate(row_panels):
            panels.append({
                "type": "timeseries",
                "title": title,
                "id": next_id,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 8, "x": 8 * (i % 3), "y": y + 8 * (i // 3)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [
                    {"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                    for j, (legend, expr) in enumerate(targets)
                ],
            })
            next_id += 1
        y += 8 * ((len(row_panels) + 2) // 3)
    return {
        "title": "searchmon: search quality",
        "uid": "searchmon",
        "tags": ["search", "searchmon"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus"},
            {"name": "query_class", "type": "query", "label": "Query class",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": "label_values(search_queries_total, query_class)",
             "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
             "current": {"text": "All", "value": "$__all"}},
        ]},
        "panels": panels,
    }


def queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target."""
    return [(title, expr) for _, panels in ROWS for title, _, targets in panels
            for _, expr in targets]


if __name__ == "__main__":
    OUT.write_text(json.dumps(dashboard(), indent=2) + "\n")
    print(f"wrote {OUT}")
