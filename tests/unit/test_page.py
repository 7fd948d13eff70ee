"""The status page as rendered: the last hour beside the hour it is compared with, the totals
view, the data's age and the broker, the reloads, the judged trends and the worsened queries in
red only under a regression. The page's routes: its parameters and their errors."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from monitor.core.export import (
    CurveFigures,
    Export,
    OfflineFigures,
    SliceFigures,
    TrendFigures,
    VerdictFigures,
)
from monitor.core.history import HOUR, WEEK, History, Period, Point, Recent, recent
from monitor.core.online import OnlineCounters
from monitor.serve import page
from monitor.serve.http import Request
from monitor.serve.page import Broker, Status, render
from monitor.serve.routes import Routes
from tests.support.html import elements, table_after, tables

T = 1_790_000_100.0  # 2026-09-21 14:15:00 UTC


def counts(**named: int) -> tuple[int, ...]:
    return tuple(named.get(name, 0) for name in OnlineCounters.COUNTS)


def figures(time: float | None, verdicts: tuple[VerdictFigures, ...] = (),
            **per_class: tuple[int, ...]) -> Export:
    return Export(
        slices=tuple(SliceFigures((name,), values, ()) for name, values in per_class.items()),
        newest=time, offline=OfflineFigures(verdicts=verdicts) if verdicts else None,
    )


def with_trends(export: Export, trend: dict[tuple[str, str], list[float]]) -> Export:
    """``export`` whose offline figures carry ``trend``: per (class, measure), the means of
    the samples kept, oldest first."""
    offline = export.offline or OfflineFigures()
    return replace(export, offline=replace(offline, trends=tuple(
        TrendFigures((name,), measure, tuple(means)) for (name, measure), means in trend.items()
    )))


def shown(export: Export, **options: Any) -> str:
    options.setdefault("now", export.newest)
    options.setdefault("refresh", 30)
    return render(export, None, **options).decode()


def ctr_step() -> tuple[Export, Recent]:
    """Four hours of a web class at 60 queries a minute: CTR 0.74 for three, 0.32 in the last
    (44, then 19 clicked a minute); a news class at 10 a minute, CTR 0.5."""
    history = History()
    for minute in range(4 * 60):
        web = min(minute, 180) * 44 + max(minute - 180, 0) * 19
        history.observe(figures(
            T + minute * 60.0, web=counts(queries=60 * minute, clicked_queries=web),
            news=counts(queries=10 * minute, clicked_queries=5 * minute),
        ))
    now = figures(T + 4 * HOUR, web=counts(queries=14400, clicked_queries=180 * 44 + 60 * 19),
                  news=counts(queries=2400, clicked_queries=1200))
    return now, recent(history, now)


def test_the_online_table_shows_the_last_hour_beside_the_hour_before() -> None:
    now, last = ctr_step()
    html = shown(now, recent=last)
    rows = table_after(html, "Online: the last hour")
    assert rows[0][:4] == ["class", "period", "queries", "CTR"]
    by = {(row[0], row[1]) for row in rows}
    assert ("all", "last hour") in by and ("web", "last hour") in by
    web = rows[[row[0] for row in rows].index("web")]
    before = rows[[row[0] for row in rows].index("web") + 1]
    assert web[1:4] == ["last hour", "3,600", "0.317"]
    assert before[:4] == ["", "hour before", "3,600", "0.733"]
    everything = rows[1]
    assert everything[:4] == ["all", "last hour", "4,200", f"{(1140 + 300) / 4200:.3f}"]
    assert "against the hour before: 2026-09-21 16:15:00 to 17:15:00 UTC (60 min)" in html
    assert "Last hour: 2026-09-21 17:15:00 to 18:15:00 UTC (60 min)" in html
    totals = shown(now, recent=last, view="total")
    rows = table_after(totals, "Online: since the state began")
    assert rows[2][:3] == ["web", "14,400", f"{(180 * 44 + 60 * 19) / 14400:.3f}"]
    assert "0.317" not in totals, "the totals view has no last hour"
    assert "href='/?view=total'" in html and "href='/'" in totals


def test_a_week_of_history_is_compared_with_the_same_hour_a_week_earlier() -> None:
    start = Point(T - WEEK - HOUR, {("web",): counts(queries=100, clicked_queries=70)})
    end = Point(T - WEEK, {("web",): counts(queries=1100, clicked_queries=810)})
    hour = Period(Point(T - HOUR, {("web",): counts(queries=5000, clicked_queries=3000)}),
                  Point(T, {("web",): counts(queries=6000, clicked_queries=3300)}))
    html = shown(figures(T, web=counts(queries=6000)), recent=Recent(hour, Period(start, end),
                                                                    week=True))
    rows = table_after(html, "Online: the last hour")
    assert rows[3][:4] == ["web", "last hour", "1,000", "0.300"]
    assert rows[4][:4] == ["", "a week earlier", "1,000", "0.740"]
    assert "against the same hour a week earlier" in html


def test_what_the_history_cannot_tell_is_shown_as_unknown_never_negative() -> None:
    """A partition moved away: the replica's query counter went down over the hour."""
    hour = Period(Point(T - HOUR, {("web",): counts(queries=900, clicked_queries=300,
                                                    sessions=10)}),
                  Point(T, {("web",): counts(queries=700, clicked_queries=350, sessions=30)}))
    html = shown(figures(T, web=counts(queries=700)), recent=Recent(hour))
    web = table_after(html, "Online: the last hour")[2]
    assert web[:6] == ["web", "last hour", "-", "-", "-", "20"]
    assert not any(cell.startswith("-") and cell != "-" for cell in web), web
    assert "nothing to compare with yet" in html
    young = shown(figures(T, web=counts(queries=5)), recent=Recent())
    assert "No history yet" in young


@pytest.mark.parametrize(("age", "broker", "text", "red"), [
    (12.0, Broker(True, None), "data 12 s old", False),
    (-3.0, Broker(True, None), "data 0 s old", False),  # stamped ahead of this clock
    (299.0, Broker(True, None), "data 4 min old", False),
    (610.0, Broker(True, None), "data 10 min old", True),
    (3 * 86400.0 + 7200, None, "data 3 d 2 h old", False),  # a replay's data is its input's
])
def test_the_header_says_how_old_the_data_is(
    age: float, broker: Broker | None, text: str, red: bool
) -> None:
    html = shown(figures(T, web=counts()), now=T + age, broker=broker)
    assert text in html
    assert (f"<span class=bad>{text}</span>" in html) is red


@pytest.mark.parametrize(("broker", "text", "red"), [
    (Broker(True, None), "broker connected", False),
    (Broker(False, "not connected to Kafka"), "broker unreachable: not connected to Kafka",
     True),
    (Broker(True, "restoring the state of events/0"),
     "not ready: restoring the state of events/0", True),
    (None, "replay", False),
])
def test_the_header_gives_the_broker_state_as_readyz_does(
    broker: Broker | None, text: str, red: bool
) -> None:
    html = shown(figures(T, web=counts()), broker=broker)
    assert text in html
    assert (f"<span class=bad>{text}</span>" in html) is red


def test_the_page_reloads_itself_unless_told_not_to() -> None:
    html = shown(figures(T, web=counts()), refresh=30, only="web")
    assert elements(html, "meta")[2] == {"http-equiv": "refresh", "content": "30"}
    assert "reloads every 30 s" in html and "href='/?class=web&refresh=0'" in html
    still = shown(figures(T, web=counts()), refresh=0)
    assert all(meta.get("http-equiv") is None for meta in elements(still, "meta"))
    assert "not reloading" in still and "href='/?view=total&refresh=0'" in still


def verdict(name: str, measure: str, regression: bool | None) -> VerdictFigures:
    return VerdictFigures((name,), measure, 40, regression, -0.12, 0.001, 0.002)


def test_each_verdict_carries_the_trend_of_the_recent_samples() -> None:
    export = figures(T, (verdict("web", "nDCG@10", True), verdict("news", "nDCG@10", False),
                         verdict("all", "P@5", None)), web=counts(), news=counts())
    trend = {("web", "nDCG@10"): [0.61, 0.60, 0.62, 0.41], ("news", "nDCG@10"): [0.5, 0.5],
             ("all", "P@5"): [0.3]}
    html = shown(with_trends(export, trend))
    svgs = elements(html, "svg")
    assert len(svgs) == 2, "a trend of one sample draws nothing"
    noise = shown(with_trends(export, {("news", "nDCG@10"): [0.904, 0.914, 0.908]}))
    ys = [float(p.split(",")[1]) for p in str(elements(noise, "polyline")[0]["points"]).split()]
    assert max(ys) - min(ys) == pytest.approx(0.1 * (page.SPARK_HEIGHT - 6), abs=0.1), (
        "a wiggle of 0.01 takes a tenth of the height, not all of it"
    )
    lines = elements(html, "polyline")
    assert [len(str(line["points"]).split()) for line in lines] == [4, 2]
    assert all(line["stroke"] and line["fill"] == "none" for line in lines)
    web = [tuple(map(float, p.split(","))) for p in str(lines[0]["points"]).split()]
    assert web[3][1] == max(y for _, y in web), "the fall is drawn downwards"
    assert web[2][1] == min(y for _, y in web)
    assert web[0][1] - web[2][1] < 0.1 * (web[3][1] - web[2][1]), "as far apart as the means"
    news = [tuple(map(float, p.split(","))) for p in str(lines[1]["points"]).split()]
    assert news[0][1] == news[1][1] == page.SPARK_HEIGHT / 2, "a flat trend is a flat line"
    dots = elements(html, "circle")
    assert [dot["fill"] for dot in dots] == ["#c62828", "#4a4a4a"], "red under a regression"
    assert "oldest first: 0.610, 0.600, 0.620, 0.410" in html
    rows = table_after(html, "Judged samples")
    assert rows[0][-1] == "recent samples' means" and rows[1][-1] == "0.410\u20130.620"
    assert rows[3][-1] == "-"
    assert "style=" not in html and "<script" not in html, "the policy allows all of it"


def test_each_class_s_precision_recall_curve_is_drawn_against_its_baseline_s() -> None:
    export = figures(T, (verdict("web", "AP", True), verdict("news", "AP", False)),
                     web=counts(), news=counts())
    falling = tuple(1 - i / 10 for i in range(11))
    curves = (
        CurveFigures(("web",), "s2", tuple(p / 2 for p in falling), 30, "s1", falling, 28),
        CurveFigures(("news",), "s2", falling, 12),
    )
    assert export.offline is not None
    with_curves = replace(export, offline=replace(export.offline, curves=curves))
    html = shown(with_curves)
    charts = [svg for svg in elements(html, "svg") if svg.get("class") == "curve"]
    assert len(charts) == 2 and "Precision-recall: latest sample against its baseline" in html
    samples = [line for line in elements(html, "polyline") if line.get("class") == "sample"]
    baselines = [line for line in elements(html, "polyline") if line.get("class") == "baseline"]
    assert len(samples) == 2 and len(baselines) == 1, "news has no baseline curve"
    assert [line["stroke"] for line in samples] == ["#c62828", page.CURVE_SAMPLE], (
        "red under a regression of the class")
    web = [tuple(map(float, p.split(","))) for p in str(samples[0]["points"]).split()]
    before = [tuple(map(float, p.split(","))) for p in str(baselines[0]["points"]).split()]
    assert len(web) == len(before) == 11 and web[0][0] < web[10][0]
    assert web[0][1] > before[0][1], "half the precision: drawn lower"
    assert web[10][1] == before[10][1], "both at 0 at recall 1"
    assert "sample s2 (30 queries): 0.500, 0.450" in html
    assert "baseline s1 (28 queries): 1.000, 0.900" in html
    assert "news</b>" in html and "no baseline curve" in html
    assert "style=" not in html and "<script" not in html, "the policy allows all of it"
    only_news = shown(with_curves, only="news")
    assert len([s for s in elements(only_news, "svg") if s.get("class") == "curve"]) == 1


def worsened(name: str, measure: str) -> dict[str, Any]:
    return {"source": "sample", "sample_id": "s2", "baseline_id": "s1", "query_class": name,
            "measure": measure,
            "rows": [{"query": f"{name} query", "before": 0.9, "after": 0.4, "delta": -0.5}]}


def test_worsened_queries_are_red_only_under_a_regression() -> None:
    export = figures(T, (verdict("web", "nDCG@10", True), verdict("news", "nDCG@10", False)),
                     web=counts(), news=counts())
    report = {"enabled": True, "min_sessions": 3, "lists": [],
              "worsened": [worsened("web", "nDCG@10"), worsened("news", "nDCG@10")]}
    html = render(export, report, now=T).decode()
    web = html[html.index("Queries: web"):html.index("Queries: news")]
    news = html[html.index("Queries: news"):]
    assert "<span class=bad>-0.500</span>" in web and "REGRESSION" in web
    assert "-0.500" in news and "class=bad" not in news
    assert tables(news)[0][1] == ["news query", "0.900", "0.400", "-0.500"]


def test_the_page_shows_the_20_worsened_queries_of_a_comparison_whole() -> None:
    export = figures(T, (verdict("web", "nDCG@10", True),), web=counts())
    entry = worsened("web", "nDCG@10")
    entry["rows"] = [{"query": f"q{i}", "before": 0.9, "after": 0.9 - i / 100, "delta": -i / 100}
                     for i in range(20, 0, -1)]
    report = {"enabled": True, "min_sessions": 3, "lists": [], "worsened": [entry]}
    html = render(export, report, now=T).decode()
    rows = tables(html[html.index("Queries: web"):])[0][1:]
    assert [row[0] for row in rows] == [f"q{i}" for i in range(20, 0, -1)]


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (119.4, "119 s"), (119.6, "2 min"), (120, "2 min"), (3599.6, "60 min"),
    (3600, "60 min"), (7199, "119 min"), (7200, "2 h"), (7260, "2 h 1 min"),
    (172799, "47 h 59 min"), (172800, "2 d"), (190800, "2 d 5 h"),
])
def test_durations_read_in_at_most_two_units(seconds: float, text: str) -> None:
    assert page._duration(seconds) == text


def answer(routes: Routes, path: str, query: str = "") -> tuple[HTTPStatus, str]:
    reply = routes.answer(Request("GET", path, "", False, False, 0.0, query))
    return reply.status, reply.body.decode()


def test_the_page_takes_a_view_and_a_refresh_and_says_what_is_wrong() -> None:
    from prometheus_client.registry import CollectorRegistry

    from monitor.serve.routes import Pages

    now, last = ctr_step()
    connected = [True]
    status = Status(lambda: now, lambda: None, lambda: None, recent=lambda: last,
                    connected=lambda: connected[0], clock=lambda: T + 4 * HOUR + 42)
    registry = CollectorRegistry()
    routes = Routes(registry, lambda: None if connected[0] else "not connected to Kafka",
                    lambda: None, Pages(registry, 1.0, lambda: 0.0), status, refresh=45)
    status_code, html = answer(routes, "/")
    assert status_code == HTTPStatus.OK
    assert "<meta http-equiv=refresh content=45>" in html and "data 42 s old" in html
    assert "broker connected" in html and "Online: the last hour" in html
    connected[0] = False
    assert "broker unreachable: not connected to Kafka" in answer(routes, "/")[1]
    assert "http-equiv" not in answer(routes, "/", "refresh=0")[1]
    assert "content=5>" in answer(routes, "/", "refresh=5&class=web")[1]
    assert "Online: since the state began" in answer(routes, "/", "view=total")[1]
    for query, problem in [("refresh=-1", "refresh:"), ("refresh=1e3", "refresh:"),
                           ("refresh=86401", "refresh:"), ("refresh=%C2%B2", "refresh:"),
                           ("view=week", "view:"), ("colour=red", "class, view and refresh")]:
        status_code, body = answer(routes, "/", query)
        assert status_code == HTTPStatus.BAD_REQUEST and problem in body, (query, body)
    status_code, body = answer(routes, "/queries", "view=total")
    assert status_code == HTTPStatus.BAD_REQUEST and "filters are class" in body


def test_the_export_gives_each_class_the_means_of_the_samples_it_keeps() -> None:
    """The trends (the daemon's and ``replay --serve``'s alike): per class and measure, the
    mean of each completed sample kept (the last ``max(last_samples)``, 4 by default), the
    newest last, as the export's mean over the last sample has it."""
    from monitor.config import Config
    from monitor.core.export import export
    from monitor.core.pipeline import Pipeline
    from monitor.inputs.generate import Traffic, World, events

    pipeline = Pipeline(Config())
    for _, _, line in events(World.build(3), Traffic(
        seed=5, duration=6 * 3600.0, sessions_per_second=0.05, qrels=True,
        judged_every=3600.0, judged_queries=30,
    )):
        pipeline.feed(line)
    pipeline.close()
    offline = export(pipeline).offline
    assert offline is not None
    means = {(t.slice[0], t.measure): t.means for t in offline.trends}
    assert means and {len(m) for m in means.values()} <= {1, 2, 3, 4}
    assert max(len(m) for m in means.values()) == 4, "six samples, the last four kept"
    latest = [m for m in offline.means if m.source == "sample" and m.window == 1]
    assert {m.slice[0] for m in latest} >= {"all", "navigational"}
    for last in latest:
        assert means[(last.slice[0], last.measure)][-1] == pytest.approx(last.mean)


def test_a_replay_keeps_the_history_as_its_events_time_passes(tmp_path: Path) -> None:
    """``replay --serve``: a sample per 5 minutes of the input's event time (where a batch of
    events admitted together does not span more), and a last hour that holds the queries
    stamped in it (but those the allowed lateness still holds back)."""
    import json

    from monitor.cli.replay import replay_input
    from monitor.config import Config
    from monitor.core.export import export
    from monitor.core.history import STEP
    from monitor.core.pipeline import RejectionLog
    from monitor.inputs.generate import Traffic, World, events

    lines = [line for _, _, line in events(World.build(3), Traffic(
        seed=7, duration=2.5 * 3600.0, sessions_per_second=0.2,
    ))]
    data = tmp_path / "events.jsonl"
    data.write_bytes(b"\n".join(lines) + b"\n")
    history = History()
    pipeline = replay_input(Config(), [data], [], RejectionLog(0), history)
    stamps = sorted(
        datetime.fromisoformat(event["timestamp"]).timestamp()
        for event in map(json.loads, lines) if event["type"] == "query"
    )
    steps = [int(t // STEP) for t in history.times]
    assert steps == sorted(set(steps)), "at most one sample per step"
    assert history.times[0] - stamps[0] < STEP and steps[-1] == int(stamps[-1] // STEP)
    assert len(steps) >= 0.8 * (steps[-1] - steps[0] + 1), "a step passes between batches"
    last = recent(history, export(pipeline))
    assert last.hour is not None and last.earlier is not None and not last.week
    start, end = last.hour.start.time, last.hour.end.time
    assert HOUR <= end - start < HOUR + STEP
    stamped = sum(start < t <= end for t in stamps)
    counted = last.hour.counts([(name,) for name in pipeline.slices.classes.names])["queries"]
    assert counted is not None and 0.9 * stamped <= counted <= stamped


def test_a_lasting_regression_says_since_when_and_acceptances_are_listed() -> None:
    from monitor.core.export import AcceptanceFigures

    lasting = replace(verdict("web", "nDCG@10", True), baseline_id="s1", since_sample="s2",
                      since_time=T - 3 * 3600, flagged_samples=4)
    accepted = (
        AcceptanceFigures(T - 600, "s5", "news", None, "new boost", "alice", True),
        AcceptanceFigures(T - 60, "gone", None, "P@5", "typo", "bob", False),
    )
    export = figures(T, (lasting, verdict("news", "nDCG@10", False)), web=counts(),
                     news=counts())
    assert export.offline is not None
    export = replace(export, offline=replace(export.offline, acceptances=accepted))
    html = shown(export)
    rows = table_after(html, "Judged samples: latest sample against its baseline")
    web = next(row for row in rows if row[0] == "web")
    since = datetime.fromtimestamp(T - 3 * 3600, UTC).strftime("%Y-%m-%d %H:%M")
    assert web[2:5] == ["REGRESSION", f"since {since} (4 samples)", "s1"]
    assert next(row for row in rows if row[0] == "news")[3] == "-"
    listed = table_after(html, "Accepted baselines (intended changes)")
    assert [row[:5] for row in listed[1:]] == [
        [datetime.fromtimestamp(T - 60, UTC).strftime("%Y-%m-%d %H:%M"), "gone",
         "every class", "P@5", "bob"],
        [datetime.fromtimestamp(T - 600, UTC).strftime("%Y-%m-%d %H:%M"), "s5", "news",
         "every measure", "alice"],
    ]
    assert listed[1][6] == "no: sample not kept" and listed[2][6] == "yes"
