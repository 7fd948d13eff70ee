"""Every exported metric family, its help text and labels, and the collector that reads them.

The collector reads the pipeline's state at scrape time (no lock or label lookup per event).
Counters and histograms are the source of truth; ratios are left to Prometheus recording
rules. Every ``query_class`` series exists from start-up, at 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from monitor import __version__
from monitor.online import Histogram
from monitor.pipeline import Pipeline


class Family(NamedTuple):
    name: str
    help: str


# Online counters: attribute of OnlineCounters -> exported family (name without _total).
COUNTERS = {
    "queries": Family("search_queries", "Queries, by query class."),
    "zero_result_queries": Family(
        "search_zero_result_queries",
        "Queries with result_count 0 (or, without result_count, an empty result list).",
    ),
    "clicked_queries": Family(
        "search_clicked_queries", "Queries with at least one click carrying their query_id."
    ),
    "clicks": Family("search_clicks", "Clicks, by the query class of the clicked query."),
    "result_impressions": Family(
        "search_result_impressions", "Results shown (length of result_ids of each query)."
    ),
    "sessions": Family(
        "search_sessions", "Closed sessions with at least one query, by their first query's class."
    ),
    "abandoned_sessions": Family(
        "search_abandoned_sessions", "Closed sessions with at least one query and no click."
    ),
    "successful_sessions": Family(
        "search_successful_sessions",
        "Closed sessions with a click of dwell >= success_dwell or a conversion.",
    ),
    "conversions": Family("search_conversions", "Conversions, by query class."),
    "reformulated_queries": Family(
        "search_reformulated_queries",
        "Queries followed in their session by another query within the reformulation window, "
        "with no click between.",
    ),
}

HISTOGRAMS = {
    "query_latency": Family("search_query_latency_seconds", "Query latency (latency_ms)."),
    "click_position": Family("search_click_position", "1-based position of each click."),
    "time_to_first_click": Family(
        "search_time_to_first_click_seconds", "Time from a query to its first click."
    ),
    "queries_per_session": Family(
        "search_queries_per_session", "Queries per closed session."
    ),
    "first_click_reciprocal_rank": Family(
        "search_first_click_reciprocal_rank", "1 / position of each clicked query's first click."
    ),
}

CLASS_LABEL = "query_class"


class PipelineCollector(Collector):
    """Reads a pipeline's counters when Prometheus scrapes.

    ``pipeline`` returns the state to expose: the live pipeline, or (for the daemon) the state
    as of the newest durable checkpoint. ``extra`` yields further families of the caller.
    """

    def __init__(
        self,
        pipeline: Callable[[], Pipeline],
        extra: Callable[[], Iterable[Metric]] = lambda: (),
    ) -> None:
        self._pipeline = pipeline
        self._extra = extra

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterator[Metric]:
        pipeline = self._pipeline()
        names = list(pipeline.classes.names)
        counters = pipeline.counters
        for attribute, family in COUNTERS.items():
            metric = CounterMetricFamily(family.name, family.help, labels=[CLASS_LABEL])
            values = getattr(counters, attribute)
            for klass, name in enumerate(names):
                metric.add_metric([name], values[klass])
            yield metric
        for attribute, family in HISTOGRAMS.items():
            yield _histogram(family, names, getattr(counters, attribute))
        yield from _health(pipeline)
        yield from self._extra()


def _histogram(family: Family, names: list[str], histogram: Histogram) -> Metric:
    metric = HistogramMetricFamily(family.name, family.help, labels=[CLASS_LABEL])
    bounds = [*(_le(b) for b in histogram.bounds), "+Inf"]
    for klass, name in enumerate(names):
        cumulative, buckets = 0, []
        for bound, count in zip(bounds, histogram.counts[klass], strict=True):
            cumulative += count
            buckets.append((bound, float(cumulative)))
        metric.add_metric([name], buckets, histogram.sums[klass])
    return metric


def _le(bound: float) -> str:
    return repr(float(bound))


def _health(pipeline: Pipeline) -> Iterator[Metric]:
    health = pipeline.health
    read = CounterMetricFamily("searchmon_events_read", "Messages read from every source.")
    read.add_metric([], health.events_read)
    yield read
    rejected = CounterMetricFamily(
        "searchmon_events_rejected", "Messages rejected, by reason.", labels=["reason"]
    )
    for reason, count in health.rejected.items():
        rejected.add_metric([reason.value], count)
    yield rejected
    simple = [
        ("searchmon_events_accepted", "Search-log events accepted into sessions.",
         health.accepted),
        ("searchmon_late_events", "Events behind the watermark for a closed session "
         "(also rejected with reason too_late).", health.rejected_late),
        ("searchmon_duplicate_events", "Events whose event_id was seen before "
         "(also rejected with reason duplicate).", health.rejected_duplicate),
        ("searchmon_ignored_actions", "Valid UBI events with an action that is not measured.",
         health.ignored_actions),
        ("searchmon_unmatched_clicks", "Clicks whose query_id is not among their session's "
         "recent queries (counted under the session's class).", pipeline.sessions.unmatched_clicks),
        ("searchmon_judged_messages", "judgment and qrels messages received.",
         health.judged_messages),
    ]
    for name, text, value in simple:
        counter = CounterMetricFamily(name, text)
        counter.add_metric([], value)
        yield counter
    open_sessions = GaugeMetricFamily("searchmon_open_sessions", "Sessions currently open.")
    open_sessions.add_metric([], len(pipeline.sessions.open))
    yield open_sessions
    classes = GaugeMetricFamily(
        "searchmon_query_classes", "Query classes in use, 'other' included."
    )
    classes.add_metric([], len(pipeline.classes.names))
    yield classes
    if pipeline.sessions.newest > float("-inf"):
        last = GaugeMetricFamily(
            "searchmon_last_event_timestamp_seconds", "Event time of the newest accepted event."
        )
        last.add_metric([], pipeline.sessions.newest)
        yield last
        watermark = GaugeMetricFamily(
            "searchmon_watermark_timestamp_seconds",
            "Event time up to which sessions are closed (newest event time - allowed lateness).",
        )
        watermark.add_metric([], pipeline.sessions.watermark)
        yield watermark
    info = InfoMetricFamily("searchmon_build", "Version of the running searchmon.")
    info.add_metric([], {"version": __version__})
    yield info
