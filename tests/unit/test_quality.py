"""Data-quality signals: the signs that a log makes a figure meaningless, counted, kept in the
state, reported with the figure each distorts."""

from __future__ import annotations

import json
from typing import Any

from monitor.config import Config, parse_config
from monitor.core.export import export
from monitor.core.pipeline import QUERY_IDS_KEPT, Pipeline
from monitor.serve.page import render
from monitor.serve.quality import data_quality
from monitor.serve.queries import query_report
from monitor.serve.report import format_table, report
from tests.support.checkpoints import round_trip
from tests.support.events import click, conversion, line, query, stamp

CONFIG = parse_config('[sessions]\ntimeout = "60s"\nallowed_lateness = "10s"\n')


def fed(*messages: bytes, config: Config = CONFIG) -> Pipeline:
    pipeline = Pipeline(config)
    for message in messages:
        assert pipeline.feed(message) is None, message
    return pipeline


def ubi_impression(event_id: str, at: float, query_id: str, **position: Any) -> bytes:
    return line({
        "action_name": "impression", "query_id": query_id, "session_id": "S1",
        "client_id": "c1", "timestamp": stamp(at), "event_attributes": {
            "object": {"object_id": f"d{event_id}"},
            **({"position": position} if position else {}),
        },
    })


def test_a_query_id_reused_with_another_text_or_session_is_counted() -> None:
    """The same search logged twice (same id, session and text, as an aggregation request
    beside the hits request) is no reuse; a refined text or another session under the id
    is."""
    pipeline = fed(
        query("e1", 0, "s1", "q1", text="laptop"),
        query("e2", 1, "s1", "q1", text="laptop", results=0),  # the same search, twice
        query("e3", 5, "s1", "q1", text="laptop bag"),  # refined under the same id
        query("e4", 9, "s2", "q1", text="laptop bag"),  # another session
        query("e5", 9, "s2", "q2", text="phone"),
    )
    assert pipeline.health.reused_query_ids == 2
    assert export(pipeline).reused_query_ids == 2
    assert round_trip(pipeline).health.reused_query_ids == 2, "kept in the state"


def test_the_query_ids_remembered_are_the_most_recent_ones() -> None:
    """The memory of query ids is bounded (``QUERY_IDS_KEPT``, in two generations of half as
    many) and forgets the oldest generation: an id reused after it was forgotten is no
    reuse; one reused while remembered is."""
    pipeline = Pipeline(CONFIG)
    over, half = 10, QUERY_IDS_KEPT // 2
    for i in range(QUERY_IDS_KEPT + over):
        pipeline.feed(query(f"e{i}", i / 1000, f"s{i}", f"q{i}", text=f"t{i}"))
    # the generations now: q32768..q65535, then the 10 newest
    pipeline.feed(query("again-1", 200, "other", f"q{over - 1}", text="another"))
    assert pipeline.health.reused_query_ids == 0, "forgotten: a search of its own"
    pipeline.feed(query("again-2", 200, "other", f"q{half - 1}", text="another"))
    assert pipeline.health.reused_query_ids == 0, "forgotten with its generation"
    pipeline.feed(query("again-3", 200, "other", f"q{half}", text="another"))
    assert pipeline.health.reused_query_ids == 1, "the oldest id remembered"
    pipeline.feed(query("again-4", 201, "more", f"q{QUERY_IDS_KEPT + over - 1}", text="more"))
    assert pipeline.health.reused_query_ids == 2, "the newest id"


def test_clicked_zero_results_and_events_without_their_query_are_counted() -> None:
    pipeline = fed(
        query("e1", 0, "s1", "q1", results=0), click("e2", 3, "s1", "q1"),
        conversion("e3", 4, "s2", "q-never"), click("e4", 5, "s2", "q-never"),
    )
    pipeline.close()
    assert sum(pipeline.counters.clicked_zero_result_queries) == 1
    assert pipeline.sessions.unmatched_events == 2, "the click and the conversion of s2"
    assert pipeline.sessions.unmatched_clicks == 1
    quality = report(pipeline)["data_quality"]
    assert quality["clicked_zero_result_queries"] == quality["zero_result_queries"] == 1
    assert quality["unmatched_events"] == 2
    assert any("1 of 1 zero-result queries were clicked" in w for w in quality["warnings"])
    assert any("2 clicks, impressions or conversions had no query" in w
               for w in quality["warnings"])


def test_impressions_without_a_position_are_counted() -> None:
    pipeline = fed(
        line({"query_id": "q1", "client_id": "c1", "user_query": "laptop",
              "timestamp": stamp(0)}),
        ubi_impression("1", 1, "q1", ordinal=0), ubi_impression("2", 2, "q1"),
    )
    assert pipeline.health.impressions_without_position == 1
    assert "1 impressions have no position" in " ".join(
        data_quality(export(pipeline))["warnings"]
    )


def test_sessions_all_successful_are_an_artefact_and_clean_data_warns_of_nothing() -> None:
    messages = []
    for n in range(120):
        messages += [query(f"q{n}", 100 * n, f"s{n}", f"q{n}"),
                     click(f"c{n}", 100 * n + 1, f"s{n}", f"q{n}", dwell_ms=60000)]
    pipeline = fed(*messages)
    pipeline.close()
    warnings = data_quality(export(pipeline))["warnings"]
    assert warnings == ["100.0% of 120 sessions are successful: session success and "
                        "abandonment are a logging artefact here"]
    assert "data quality: 100.0% of 120 sessions" in format_table(report(pipeline))
    page = render(export(pipeline), None).decode()
    assert "<b>Data quality</b>" in page and "120 sessions are successful" in page
    clean = fed(query("e1", 0, "s1", "q1"), click("e2", 1, "s1", "q1"),
                query("e3", 5, "s2", "q2"))
    clean.close()
    assert data_quality(export(clean))["warnings"] == []
    assert "Data quality" not in render(export(clean), None).decode()


def test_the_report_keeps_its_keys_and_adds_data_quality() -> None:
    pipeline = fed(query("e1", 0, "s1", "q1"))
    pipeline.close()
    result = report(pipeline)
    assert {"online", "offline", "regressions", "acceptances", "data_quality"} <= set(result)
    json.dumps(result)  # plain data


def ubi_query(query_id: str, at: float, text: str, hits: list[str], **extra: Any) -> bytes:
    return line({"query_id": query_id, "client_id": "c1", "user_query": text,
                 "timestamp": stamp(at), "query_response_hit_ids": hits, **extra})


def test_records_of_one_ubi_search_are_one_search() -> None:
    """A search logged twice (same query_id, client and text; other bytes) is merged into
    the first, not rejected; identical bytes are one record (a duplicate); an aggregation-only
    request is no search; another text under the id is a new search."""
    pipeline = Pipeline(CONFIG)
    first = ubi_query("q1", 0, "laptop", ["d1", "d2"])
    assert pipeline.feed(first) is None
    assert pipeline.feed(ubi_query("q1", 0.5, "laptop", ["d1", "d2"], page=2)) is None
    again = pipeline.feed(first)
    assert again is not None and again.reason.value == "duplicate"
    facets = ubi_query("q1", 0.2, "laptop", [], query='{"size":0,"aggs":{"brand":{}}}')
    assert pipeline.feed(facets) is None
    assert pipeline.feed(ubi_query("q1", 3, "laptop bag", [])) is None
    pipeline.close()
    assert sum(pipeline.counters.queries) == 2 and sum(pipeline.counters.zero_result_queries) == 1
    health = pipeline.health
    assert (health.merged_query_records, health.ignored_actions, health.reused_query_ids) == (
        1, 1, 1
    )
    assert health.events_read == 5 == export(pipeline).events_read, "every record accounted"
    assert round_trip(pipeline).health.merged_query_records == 1


def ubi_click(event_id: str, at: float, query_id: str) -> bytes:
    return line({"action_name": "click", "query_id": query_id, "client_id": "c1",
                 "timestamp": stamp(at), "event_attributes": {
                     "object": {"object_id": "d1"}, "position": {"ordinal": 1}}})


def test_a_search_found_nothing_only_if_none_of_its_records_had_hits() -> None:
    """Records of one search: results are the union of their hits, and it is zero-result
    only when no record had any, in whichever order they come, whether the second comes
    before the first was applied (waiting for the watermark) or after, and in every count
    that took it as zero-result: the zero-result rate, clicked zero-result queries, the
    zero-result query list and the experiments."""
    config = parse_config(
        '[sessions]\ntimeout = "60s"\nallowed_lateness = "10s"\n'
        '[query_lists]\nmin_sessions = 1\n'
    )
    for later in (0.5, 30):  # the second record before, or after, the watermark passed
        for order in ("empty first", "hits first"):
            empty = ubi_query("q1", 0, "laptop", [])
            hits = ubi_query("q1", 0.2, "laptop", ["d1", "d2", "d3"])
            records = [empty, hits] if order == "empty first" else [hits, empty]
            pipeline = Pipeline(config)
            assert pipeline.feed(records[0]) is None
            # a second search moves the watermark past the first (or not)
            assert pipeline.feed(ubi_query("q2", later, "phone", ["p1"], client_id="c2")) is None
            assert pipeline.feed(records[1]) is None
            assert pipeline.feed(ubi_query("q1", later + 1, "laptop", ["d1", "d4"],
                                           page=2)) is None
            assert pipeline.feed(ubi_click("k1", later + 2, "q1")) is None
            pipeline.close()
            counters, case = pipeline.counters, (later, order)
            assert sum(counters.queries) == 2, case
            assert sum(counters.zero_result_queries) == 0, case
            assert sum(counters.clicked_zero_result_queries) == 0, case
            assert sum(counters.result_impressions) == 4 + 1, case  # d1..d4, and p1
            assert pipeline.health.merged_query_records == 2, case
            zero = [row for e in query_report([pipeline], pipeline, config)["lists"]
                    if e["list"] == "zero_results" for row in e["rows"]]
            assert zero == [], case
            searched = [row["query"] for e in query_report([pipeline], pipeline, config)["lists"]
                        if e["list"] == "searches" for row in e["rows"]]
            assert "laptop" in searched, case


def test_a_search_none_of_whose_records_had_hits_is_zero_result() -> None:
    pipeline = Pipeline(CONFIG)
    for at in (0, 0.3):
        assert pipeline.feed(ubi_query("q1", at, "laptop", [])) is None
    assert pipeline.feed(ubi_click("k1", 2, "q1")) is None
    pipeline.close()
    assert sum(pipeline.counters.zero_result_queries) == 1
    assert sum(pipeline.counters.clicked_zero_result_queries) == 1
