"""Builds deploy/grafana/searchmon.json, the Grafana dashboard, from the panel list below.

Run `python deploy/grafana/build.py` after changing a panel; a test checks that the JSON is
up to date and runs every panel's query against a real Prometheus that scraped a replay.

The online quality ratios come from the recording rules, which sum over every searchmon
target: they are what the alerts see, and the `job` and `instance` variables do not narrow
them. Every other query reads searchmon's own families and is narrowed by both variables.

The slice row and one variable per dimension follow DIMENSIONS, the dimension names the
slice:* recording rules keep; deploy/retarget.py --dimensions builds the dashboard for others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

OUT = Path(__file__).with_name("searchmon.json")
CLASS = 'query_class=~"$query_class"'
TARGET = 'job=~"$job", instance=~"$instance"'
RATE = "$__rate_interval"
# The [slices] dimensions of the shipped rules (deploy/prometheus/searchmon.rules.yml).
DIMENSIONS = ("platform", "locale", "variant")
# What Grafana substitutes for its variables with "All" selected; queries() hands Prometheus
# and promtool the expressions with these in place (a dimension's "All" matches its absence
# too: without [slices] the label is empty).
ALL_VALUES = {"$__rate_interval": "5m", "$query_class": ".*", "$job": ".*", "$instance": ".*",
              **{f"${name}": ".*" for name in DIMENSIONS}}
# runbook_url of the rules is relative to the repository root; set the `runbook` variable to
# where your copy of deploy/RUNBOOK.md is browsable.
RUNBOOK = "deploy/RUNBOOK.md"


class Panel(NamedTuple):
    title: str
    unit: str
    description: str
    targets: list[tuple[str, str]]  # (legend, expr)
    alerts: tuple[str, ...] = ()  # alerts whose runbook sections the panel links to
    needs: str = ""  # what must be configured or sent for it to have data (else: always)


def _rate(family: str, labels: str = TARGET, by: str = "") -> str:
    grouping = f" by ({by}) " if by else ""
    return f"sum{grouping}(rate({family}{{{labels}}}[{RATE}]))"


def _mean(family: str, by: str) -> str:
    labels = f"{CLASS}, {TARGET}"
    return f"{_rate(family + '_sum', labels, by)} / {_rate(family + '_count', labels, by)}"


def _quantile(q: float, family: str, by: str = "query_class") -> str:
    buckets = _rate(family + "_bucket", f"{CLASS}, {TARGET}", by + ", le")
    return f"histogram_quantile({q}, {buckets})"


def _recorded(
    name: str, level: str, last_week: bool, labels: str | None = None, legend: str | None = None,
) -> list[tuple[str, str]]:
    """The 5m and 1h recording rules of a ratio or rate, and the 1h one a week ago, which is
    what the week-over-week alerts compare with (absent until Prometheus holds a week).
    ``labels`` and ``legend`` default to the class's (none for the overall level)."""
    if legend is None:
        legend = "{{query_class}} " if level else ""
    if labels is None:
        labels = f"{{{CLASS}}}" if level else ""
    series = [(f"{legend}5m", f"{level}:{name}5m{labels}"),
              (f"{legend}1h", f"{level}:{name}1h{labels}")]
    if last_week:
        now = f"{level}:{name}1h{labels}"
        series.append((f"{legend}1h, last week", f"{now} offset 1w"))
    return series


OVERVIEW = ("From the recording rules: every searchmon target, whatever the job and "
            "instance selection; ")
CLASS_OVERVIEW = ("From the per-class recording rules, which the alerts read: every searchmon "
                  "target, whatever the job and instance selection; ")

WEEK = "'1h, last week' is what the week-over-week alert compares the 1h series with."


def _online(level: str) -> list[Panel]:
    scope = "by class" if level else ""
    what = OVERVIEW if not level else CLASS_OVERVIEW

    def title(text: str) -> str:
        return f"{text} {scope}".strip()

    return [
        Panel(title("Queries per second"), "reqps",
              what + "1h is the volume guard of the alerts.",
              _recorded("search_queries:rate", level, not level),
              ("SearchQueriesStopped",) if not level else ()),
        Panel(title("Sessions per second"), "reqps",
              what + "closed sessions with at least one query.",
              _recorded("search_sessions:rate", level, False)),
        Panel(title("Click-through rate"), "percentunit",
              what + "share of queries with a click. " + WEEK,
              _recorded("search_ctr:ratio_rate", level, True),
              ("SearchCTRDropWeekOverWeek", "SearchCTRAnomaly")),
        Panel(title("Click rate per impression"), "percentunit",
              what + "clicks per result shown.",
              _recorded("search_click_rate_per_impression:ratio_rate", level, False)),
        Panel(title("Zero-result rate"), "percentunit",
              what + "share of queries that returned nothing. " + WEEK,
              _recorded("search_zero_result_rate:ratio_rate", level, True),
              ("SearchZeroResultRateRise",)),
        Panel(title("Abandonment rate"), "percentunit",
              what + "share of sessions without a click. " + WEEK,
              _recorded("search_abandonment_rate:ratio_rate", level, True),
              ("SearchAbandonmentRise",)),
        Panel(title("Session success rate"), "percentunit",
              what + "share of sessions with a long click or a conversion. " + WEEK,
              _recorded("search_session_success_rate:ratio_rate", level, True),
              ("SearchSessionSuccessDropWeekOverWeek",)),
    ]


SLICE_OVERVIEW = ("From the per-slice recording rules, which the slice alerts read: every "
                  "searchmon target, narrowed by the class and dimension variables (without "
                  "[slices] configured, one series per class, its dimension labels empty); ")


def _slices(dimensions: Sequence[str]) -> list[Panel]:
    """The slice:* recording rules, one series per class and value of each dimension, with
    last week's 1h series, which the slice alerts compare with or guard on."""
    labels = "{" + ", ".join([CLASS, *(f'{d}=~"${d}"' for d in dimensions)]) + "}"
    legend = " ".join("{{" + name + "}}" for name in ("query_class", *dimensions)) + " "

    def recorded(name: str, last_week: bool = True) -> list[tuple[str, str]]:
        return _recorded(name, "slice", last_week, labels, legend)

    return [
        Panel("Queries per second by slice", "reqps",
              SLICE_OVERVIEW + "1h is the volume guard of the slice alerts: 2 queries/s now "
              "and a week ago for CTR, now for zero-result rate.",
              recorded("search_queries:rate"),
              ("SearchSliceCTRDropWeekOverWeek", "SearchSliceZeroResultRateRise")),
        Panel("Sessions per second by slice", "reqps",
              SLICE_OVERVIEW + "1h is the volume guard of the slice session success and "
              "abandonment alerts: 1 session/s now and a week ago.",
              recorded("search_sessions:rate"),
              ("SearchSliceSessionSuccessDropWeekOverWeek", "SearchSliceAbandonmentRise")),
        Panel("Click-through rate by slice", "percentunit",
              SLICE_OVERVIEW + "share of queries with a click. " + WEEK,
              recorded("search_ctr:ratio_rate"),
              ("SearchSliceCTRDropWeekOverWeek",)),
        Panel("Click rate per impression by slice", "percentunit",
              SLICE_OVERVIEW + "clicks per result shown.",
              recorded("search_click_rate_per_impression:ratio_rate", last_week=False)),
        Panel("Zero-result rate by slice", "percentunit",
              SLICE_OVERVIEW + "share of queries that returned nothing. " + WEEK,
              recorded("search_zero_result_rate:ratio_rate"),
              ("SearchSliceZeroResultRateRise",)),
        Panel("Abandonment rate by slice", "percentunit",
              SLICE_OVERVIEW + "share of sessions without a click. " + WEEK,
              recorded("search_abandonment_rate:ratio_rate"),
              ("SearchSliceAbandonmentRise",)),
        Panel("Session success rate by slice", "percentunit",
              SLICE_OVERVIEW + "share of sessions with a long click or a conversion. " + WEEK,
              recorded("search_session_success_rate:ratio_rate"),
              ("SearchSliceSessionSuccessDropWeekOverWeek",)),
        Panel("Slices in use and values folded", "short", "Label sets of the online "
              "families (bounded by [slices] max_series), and queries per second whose value "
              "of a dimension counted as other (outside its value set, or past the budget).",
              [("{{instance}} slices", f"searchmon_slices{{{TARGET}}}"),
               ("folded {{dimension}}",
                _rate("searchmon_slice_values_folded_total", by="dimension"))],
              needs="[slices] dimensions, for the folded values"),
    ]


C = "{{query_class}}"
CT = f"{CLASS}, {TARGET}"
SAMPLE = f'{CT}, source="sample", window="last_1_samples"'

ROWS: list[tuple[str, list[Panel]]] = [
    ("Overview (all classes)", _online("")),
    ("Per query class", [*_online("query_class"),
        Panel("Query latency p95 by class", "s", "95th percentile of the latency the search "
              "service reported, from search_query_latency_seconds.",
              [(C, _quantile(0.95, "search_query_latency_seconds"))]),
        Panel("Clicks by position", "short", "Clicks per second at or above each position "
              "(cumulative buckets of search_click_position).",
              [("<= {{le}}", _rate("search_click_position_bucket", CT, "le"))]),
        Panel("Mean reciprocal rank of the first click by class", "short",
              "Mean of 1 / position of each clicked query's first click: 1 when users click "
              "the top result.",
              [(C, _mean("search_first_click_reciprocal_rank", "query_class"))]),
        Panel("Time to first click by class", "s", "Median and 95th percentile of the time "
              "from a query to its first click.",
              [(f"{C} p50", _quantile(0.5, "search_time_to_first_click_seconds")),
               (f"{C} p95", _quantile(0.95, "search_time_to_first_click_seconds"))]),
        Panel("Queries per session by class", "short", "Mean number of queries of a closed "
              "session, by its first query's class; a rise means users reformulate more.",
              [(f"{C} mean", _mean("search_queries_per_session", "query_class"))]),
        Panel("Reformulated queries per second", "reqps", "Queries that reformulate the "
              "previous query of their session.",
              [(C, _rate("search_reformulated_queries_total", CT, "query_class"))]),
        Panel("Conversions per second by class", "reqps", "Conversions attributed to a query "
              "of the class; session success counts them.",
              [(C, _rate("search_conversions_total", CT, "query_class"))],
              ("SearchSessionSuccessDropWeekOverWeek",)),
    ]),
    ("Offline: judged quality", [
        Panel("Judged means, latest sample", "short", "Mean score of each measure over the "
              "judged queries of the latest completed sample.",
              [(f"{C} {{{{measure}}}}", f"search_judged_score_mean{{{SAMPLE}}}")]),
        Panel("Judged queries behind the means", "short", "How many judged queries each mean "
              "of the latest sample rests on.",
              [(f"{C} {{{{measure}}}}", f"search_judged_queries{{{SAMPLE}}}")]),
        Panel("Live traffic scored against qrels, 1h", "short", "Rolling 1h mean of live "
              "queries scored against the qrels.",
              [(f"{C} {{{{measure}}}}",
                f'search_judged_score_mean{{{CT}, source="live", window="1h"}}')]),
        Panel("Judged score means, 1h and 1d (recorded)", "short", "From the recording rules "
              "over the search_judged_score histogram, every target, by source.",
              [(f"{C} {{{{measure}}}} {{{{source}}}} 1h",
                f"query_class_measure_source:search_judged_score:mean1h{{{CLASS}}}"),
               (f"{C} {{{{measure}}}} {{{{source}}}} 1d",
                f"query_class_measure_source:search_judged_score:mean1d{{{CLASS}}}")]),
        Panel("Regression flags (latest sample vs baseline)", "short", "1 where the latest "
              "sample is significantly worse than its baseline. query_class=\"all\" (a test "
              "over every shared query) pages only for a measure no class is flagged on.",
              [(f"{C} {{{{measure}}}}", f"search_judged_regression{{{CT}}}")],
              ("SearchJudgedRegression",)),
        Panel("Delta against baseline", "short", "Mean paired difference, latest sample minus "
              "baseline, with the p-value of the paired test and the shared queries it rests "
              "on.",
              [(f"{C} {{{{measure}}}} delta", f"search_judged_delta{{{CT}}}"),
               (f"{C} {{{{measure}}}} p-value", f"search_judged_pvalue{{{CT}}}"),
               (f"{C} {{{{measure}}}} shared queries",
                f"search_judged_shared_queries{{{CT}}}")],
              ("SearchJudgedRegression",)),
        Panel("A lasting regression: time since first flagged", "s", "While a class and "
              "measure stay flagged: how long since the event time of the sample it was "
              "first flagged at (the alert's description says since when).",
              [(f"{C} {{{{measure}}}}",
                f"time() - search_judged_regression_since_timestamp_seconds{{{CT}}}")],
              ("SearchJudgedRegression",), needs="a regression flagged"),
        Panel("A lasting regression: samples in a row", "short", "While a class and measure "
              "stay flagged: how many samples in a row are flagged, up to the latest.",
              [(f"{C} {{{{measure}}}}", f"search_judged_regression_samples{{{CT}}}")],
              ("SearchJudgedRegression",), needs="a regression flagged"),
        Panel("Raters' agreement", "short", "Agreement of the raters over the newest judged "
              "sample that carried one (judgments import with several raters): Cohen's or "
              "Fleiss' kappa, Krippendorff's alpha.",
              [("{{statistic}}", f"search_judged_rater_agreement{{{TARGET}}}")],
              needs="judgments of several raters imported"),
        Panel("Judged@10 coverage", "percentunit", "Share of the top 10 results that are "
              "judged, latest sample; below 0.8 the means drift down.",
              [(C, 'search_judged_score_mean{measure="Judged@10", source="sample", '
                f'window="last_1_samples", {CT}}}')],
              ("SearchJudgedCoverageLow",)),
        Panel("Age of the newest judged sample", "s", "Time since the newest judged sample "
              "completed.",
              [("age", f"time() - max(search_judged_last_sample_timestamp_seconds{{{TARGET}}})")],
              ("SearchJudgedSamplesStale",)),
        Panel("Judged messages and skipped scores per second", "reqps", "judgment and qrels "
              "messages received, and judged scores skipped.",
              [("messages", _rate("searchmon_judged_messages_total")),
               ("skipped", _rate("searchmon_judged_scores_skipped_total"))]),
    ]),
    ("searchmon health", [
        Panel("Scrape target up", "short", "1 while Prometheus scrapes the target. Shows every "
              "target of the shipped selector (deploy/retarget.py rewrites it), whatever the "
              "job and instance selection, so that a target that is gone still shows.",
              [("{{instance}}", 'up{job="searchmon"}')], ("SearchmonDown", "SearchmonAbsent")),
        Panel("Messages read and accepted per second", "reqps", "Messages read from every "
              "source, and search-log events accepted into sessions.",
              [("read", _rate("searchmon_events_read_total")),
               ("accepted", _rate("searchmon_events_accepted_total"))],
              ("SearchQueriesStopped",)),
        Panel("Rejected messages by reason", "reqps", "Messages rejected, by reason; the log "
              "has the first ones with topic, partition and offset.",
              [("{{reason}}", _rate("searchmon_events_rejected_total", by="reason"))],
              ("SearchmonRejectedRateHigh",)),
        Panel("Late and duplicate events per second", "reqps", "Events behind the watermark "
              "for a closed session, and events whose event_id was seen before.",
              [("late", _rate("searchmon_late_events_total")),
               ("duplicate", _rate("searchmon_duplicate_events_total"))]),
        Panel("Unmatched clicks and ignored actions per second", "reqps", "Clicks whose "
              "query_id is not among their session's queries, and valid UBI events with an "
              "action that is not measured.",
              [("unmatched clicks", _rate("searchmon_unmatched_clicks_total")),
               ("ignored actions", _rate("searchmon_ignored_actions_total"))]),
        Panel("Dead-lettered messages per second", "reqps", "Rejected messages written to the "
              "dead-letter topic, and those truncated to fit.",
              [("dead-lettered", _rate("searchmon_dead_lettered_total")),
               ("truncated", _rate("searchmon_dead_letters_truncated_total"))],
              ("SearchmonRejectedRateHigh",)),
        Panel("Dead letters waiting, and wall-clock steps back", "short", "Dead-letter copies "
              "held until the dead-letter topic acknowledges them (consumption pauses at the "
              "bound), and the wall clock's steps back per second (future timestamps are "
              "judged against the clock before a step).",
              [("{{instance}} waiting", f"searchmon_dead_letters_pending{{{TARGET}}}"),
               ("clock steps back", _rate("searchmon_clock_jumps_total"))]),
        Panel("Open sessions", "short", "Sessions currently open; bounded by the configuration.",
              [("{{instance}}", f"searchmon_open_sessions{{{TARGET}}}")]),
        Panel("Event time and watermark behind wall clock", "s", "Wall clock minus the event "
              "time of the newest accepted event, and minus the watermark.",
              [("{{instance}} newest event",
                f"time() - searchmon_last_event_timestamp_seconds{{{TARGET}}}"),
               ("{{instance}} watermark",
                f"time() - searchmon_watermark_timestamp_seconds{{{TARGET}}}")]),
        Panel("Consumer lag", "short", "Messages behind each partition's highwater mark.",
              [("{{topic}}/{{partition}}",
                f"sum by (topic, partition) (searchmon_consumer_lag{{{TARGET}}})")],
              ("SearchmonConsumerLagGrowing",)),
        Panel("Broker connected", "short", "1 while the consumer is connected to Kafka.",
              [("{{instance}}", f"searchmon_broker_connected{{{TARGET}}}")],
              ("SearchmonBrokerDisconnected",)),
        Panel("Checkpoint age", "s", "Age of the newest durable checkpoint, which /metrics "
              "shows.",
              [("{{instance}}", f"time() - searchmon_checkpoint_timestamp_seconds{{{TARGET}}}")],
              ("SearchmonCheckpointOld",)),
        Panel("Checkpoint failures per second", "reqps", "Failed checkpoint writes; /readyz "
              "answers 503 until one succeeds.",
              [("{{instance}}",
                f"rate(searchmon_checkpoint_failures_total{{{TARGET}}}[{RATE}])")],
              ("SearchmonCheckpointFailing",)),
        Panel("Process resident memory", "bytes", "Resident set size of the daemon "
              "(process_resident_memory_bytes).",
              [("{{instance}}", f"process_resident_memory_bytes{{{TARGET}}}")]),
        Panel("Query classes in use", "short", "Query classes configured, 'other' included.",
              [("{{instance}}", f"searchmon_query_classes{{{TARGET}}}")]),
        Panel("Data quality per second", "reqps", "Signs of a log that misleads: clicks, "
              "impressions and conversions whose query never came; query ids reused with "
              "another session or text; queries without their result list; impressions "
              "without a position; UBI query records merged into a search already counted; "
              "zero-result queries that got a click.",
              [("unmatched events", _rate("searchmon_unmatched_events_total")),
               ("reused query ids", _rate("searchmon_reused_query_ids_total")),
               ("unlisted queries", _rate("searchmon_unlisted_queries_total")),
               ("impressions without position",
                _rate("searchmon_impressions_without_position_total")),
               ("merged query records", _rate("searchmon_merged_query_records_total")),
               ("clicked zero-result queries",
                _rate("search_clicked_zero_result_queries_total", CT))]),
        Panel("Build", "short", "The running versions (searchmon, Python, kafka-python), "
              "whether the hot path runs compiled, and the scheme the status page is served "
              "with (https once [http] has its TLS files): one series each, 1 while it runs.",
              [("{{instance}} {{version}} compiled={{compiled}}",
                f"searchmon_build_info{{{TARGET}}}"),
               ("{{instance}} serves {{scheme}}", f"searchmon_http_info{{{TARGET}}}")]),
    ]),
    ("Experiments", [
        Panel("Units per variant, and sample ratio mismatch", "short", "Randomization units "
              "seen per variant; the chi-square p-value of the units against the configured "
              "split (below 0.001 the verdicts are not to be trusted: the mismatch flag is 1).",
              [("{{experiment}} {{variant}} units", f"search_experiment_units{{{TARGET}}}"),
               ("{{experiment}} SRM p-value", f"search_experiment_srm_pvalue{{{TARGET}}}"),
               ("{{experiment}} mismatch",
                f"search_experiment_sample_ratio_mismatch{{{TARGET}}}")],
              needs="[[experiments]] configured"),
        Panel("Metric per variant", "short", "Each metric of each variant, pooled over its "
              "units (ctr: clicked queries / queries, ...).",
              [("{{experiment}} {{variant}} {{metric}}", f"search_experiment_value{{{TARGET}}}")],
              needs="[[experiments]] configured"),
        Panel("Treatment minus control, with its intervals", "short", "The delta of each "
              "treatment against the control, its relative lift, and the bounds of its 95% "
              "intervals (fixed-horizon and always-valid).",
              [("{{experiment}} {{variant}} {{metric}} delta",
                f"search_experiment_delta{{{TARGET}}}"),
               ("{{experiment}} {{variant}} {{metric}} lift",
                f"search_experiment_relative_lift{{{TARGET}}}"),
               ("{{experiment}} {{variant}} {{metric}} {{kind}} {{bound}}",
                f"search_experiment_interval{{{TARGET}}}")],
              needs="[[experiments]] configured"),
        Panel("Verdicts and p-values", "short", "The always-valid verdict of each treatment "
              "on each metric (1 better, 0 inconclusive, -1 worse) and the p-values of its "
              "delta (fixed-horizon, Holm-adjusted, always-valid).",
              [("{{experiment}} {{variant}} {{metric}} verdict",
                f"search_experiment_verdict{{{TARGET}}}"),
               ("{{experiment}} {{variant}} {{metric}} {{kind}} p",
                f"search_experiment_pvalue{{{TARGET}}}")],
              needs="[[experiments]] configured"),
        Panel("Interleaving: preference and outcomes", "short", "Team-draft interleaving: "
              "the preference for ranker a (positive: a is preferred) with its 95% bootstrap "
              "interval, and the interleaved queries with a credited click per second, by "
              "outcome.",
              [("{{a}} vs {{b}} preference", f"search_interleaving_preference{{{TARGET}}}"),
               ("{{a}} vs {{b}} {{bound}}", f"search_interleaving_interval{{{TARGET}}}"),
               ("{{a}} vs {{b}} {{outcome}}",
                _rate("search_interleaving_queries_total", by="a, b, outcome"))],
              needs="interleaved result lists (result_teams)"),
    ]),
]


def rows(dimensions: Sequence[str] = DIMENSIONS) -> list[tuple[str, list[Panel]]]:
    """ROWS with the slice row, over these dimension names, after the per-class one."""
    at = [title for title, _ in ROWS].index("Per query class") + 1
    return [*ROWS[:at], ("Per slice", _slices(dimensions)), *ROWS[at:]]


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {"name": name, "type": "query", "label": label,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": query, "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
            "current": {"text": "All", "value": "$__all"}}


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "id": panel_id,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 8, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "links": [{"title": f"Runbook: {alert}", "url": f"${{runbook}}#{alert.lower()}",
                   "targetBlank": True} for alert in panel.alerts],
        "targets": [
            {"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
             "datasource": {"type": "prometheus", "uid": "${datasource}"}}
            for j, (legend, expr) in enumerate(panel.targets)
        ],
    }


def dashboard(dimensions: Sequence[str] = DIMENSIONS) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row_title, row_panels in rows(dimensions):
        panels.append({
            "type": "row", "title": row_title, "id": next_id, "collapsed": False,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": [],
        })
        next_id += 1
        y += 1
        for i, panel in enumerate(row_panels):
            panels.append(_panel(panel, next_id, 8 * (i % 3), y + 8 * (i // 3)))
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
        # The daemon's own page: which queries moved (pick one instance and class first).
        "links": [{"title": "Status page: which queries", "type": "link",
                   "url": "${scheme}://${instance}/?class=${query_class}", "targetBlank": True,
                   "icon": "external link",
                   "tooltip": "searchmon's status page for the selected instance and class: "
                   "top queries, queries without results or clicks, worsened judged queries"}],
        "annotations": {"list": [
            {"name": "Annotations & Alerts", "type": "dashboard", "builtIn": 1, "enable": True,
             "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
             "datasource": {"type": "grafana", "uid": "-- Grafana --"}},
            # Watchdog always fires by design: it would mark every step.
            {"name": "Firing alerts", "enable": True, "iconColor": "red",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "expr": 'ALERTS{alertstate="firing", alertname!="Watchdog"}', "step": "60s",
             "titleFormat": "{{alertname}}",
             "textFormat": " ".join("{{" + label + "}}" for label in (
                 "severity", "query_class", *dimensions, "measure", "instance")),
             "tagKeys": "alertname,severity",
             "useValueForTime": False},
        ]},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus"},
            # searchmon_build_info: only searchmon targets export it, whatever their job.
            _variable("job", "Job", "label_values(searchmon_build_info, job)"),
            _variable("instance", "Instance",
                      'label_values(searchmon_build_info{job=~"$job"}, instance)'),
            _variable("query_class", "Query class",
                      'label_values(search_queries_total{job=~"$job"}, query_class)'),
            # a dimension that is not configured has no values: its "All" matches everything
            *(_variable(name, name, f'label_values(search_queries_total{{job=~"$job"}}, {name})')
              for name in dimensions),
            {"name": "runbook", "type": "constant", "label": "Runbook", "hide": 2,
             "query": RUNBOOK},
            # the status page link's scheme: the selected instance's (https with TLS)
            {"name": "scheme", "type": "query", "label": "Scheme", "hide": 2,
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": 'label_values(searchmon_http_info{job=~"$job", instance=~"$instance"}, '
                      "scheme)",
             "refresh": 2, "includeAll": False, "multi": False},
        ]},
        "panels": panels,
    }


def queries(dimensions: Sequence[str] = DIMENSIONS) -> list[tuple[str, str]]:
    """(panel title, expr) of every panel target, with the values Grafana substitutes for
    its variables when "All" is selected, so that Prometheus and promtool can run them."""
    values = {**ALL_VALUES, **{f"${name}": ".*" for name in dimensions}}
    found = []
    for _, panels in rows(dimensions):
        for panel in panels:
            for _, expr in panel.targets:
                # whole variable names: $job is not the start of a dimension named job_type
                expr = re.sub(r"\$\w+", lambda m: values.get(m.group(0), m.group(0)), expr)
                found.append((panel.title, expr))
    return found


def needs() -> dict[str, str]:
    """Panel title -> what must be configured or sent for its data (the panels that have
    data whatever the configuration are not in it)."""
    return {panel.title: panel.needs for _, panels in rows() for panel in panels if panel.needs}


def dashboard_json(dimensions: Sequence[str] = DIMENSIONS) -> str:
    """The dashboard as searchmon.json spells it."""
    return json.dumps(dashboard(dimensions), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(dashboard_json())
    print(f"wrote {OUT}")
