"""The status page at ``/``: one server-rendered HTML page for a person paged at 3 a.m.

At the top, how old the data is and the broker's state. Per query class: the online figures of
the last hour beside the same hour a week earlier (or the hour before), or since the state
began (``?view=total``); the latest verdicts of the judged samples with the trend of the
recent samples' means; the queries that worsened (sample against baseline, and the live qrels
join), red where the verdict is a regression; and the top query lists. ``?class=NAME`` shows
one class (the alerts link there). The page reloads itself every ``[http] page_refresh``
seconds (``?refresh=N``, 0: never). No script, no external asset.
"""

from __future__ import annotations

import base64
import hashlib
import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any, Literal
from urllib.parse import quote, urlencode

from monitor.config import PAGE_REFRESH, UNKNOWN
from monitor.core.classes import ALL
from monitor.core.experiments import analyse, preference
from monitor.core.export import AcceptanceFigures, CurveFigures, Export, Slice, SliceFigures
from monitor.core.history import Period, Recent
from monitor.core.online import RATIOS, OnlineCounters, ratio
from monitor.serve.quality import data_quality
from monitor.serve.queries import QueryState, Report

ROWS = 10
"""Rows of each query list on the page (``/queries`` has them all; ``top --rows`` shows as
many by default). The worsened queries of a judged comparison are shown whole: the 20 whose
score dropped most."""
STALE = 300.0
"""Seconds: data older than this is shown in red (by the daemon; a replay's is as old as its
input)."""

View = Literal["hour", "total"]
Trend = Mapping[tuple[str, str], Sequence[float]]
"""Per (query class, measure): the means of the recent judged samples, oldest first."""


@dataclass(frozen=True)
class Broker:
    """The daemon's link to the broker, as ``/readyz`` sees it."""

    connected: bool
    not_ready: str | None
    """Why ``/readyz`` answers 503 (None: ready)."""


@dataclass(frozen=True)
class Status:
    """Where the page and ``/queries`` take their figures from."""

    export: Callable[[], Export]
    queries: Callable[[], Report | None]
    """None until the lists are computed (the daemon: at its first checkpoint)."""
    state: Callable[[], QueryState | None]
    """What the lists are made of, for ``searchmon top`` over several replicas."""
    recent: Callable[[], Recent] = Recent
    """The last hour and what it is compared with (``monitor.core.history``)."""
    connected: Callable[[], bool] | None = None
    """Whether the broker is reachable (the daemon); None: a replay of files."""
    clock: Callable[[], float] = time.time
    """The wall clock, for the data's age."""


_STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1b1b;background:#fff}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.2em;margin:1.6em 0 .4em;
border-bottom:2px solid #ccc}h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.3em 0 .8em}td,th{padding:.15em .6em;
border-bottom:1px solid #e3e3e3;text-align:right}th{background:#f2f2f2}
td:first-child,th:first-child{text-align:left}.bad{background:#ffd6d6;font-weight:bold}
.ok{color:#246b24}.muted,tr.muted td{color:#666}.grid{display:flex;flex-wrap:wrap;gap:1.5em}
nav a{margin-right:.8em}code{background:#f2f2f2;padding:0 .2em}svg{vertical-align:middle}
.state{font-size:1.05em}.state span{padding:0 .3em}h2 a{font-size:.75em;font-weight:normal;
margin-left:1em}.period{text-align:left}
"""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; "
    f"style-src 'sha256-{base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()}'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""What a browser lets the page do: apply its one inline style sheet (named by its hash, so
no other style, inline or not, applies), draw its inline SVG sparklines (part of the page,
styled by presentation attributes) and follow links; load nothing else (no script, image,
font, frame or connection), submit no form, and be framed by no page. The endpoint sends it
with every answer. A reload by ``<meta http-equiv=refresh>`` needs no script."""


def render(
    export: Export, queries: Report | None, only: str | None = None, *,
    recent: Recent | None = None, now: float | None = None,
    broker: Broker | None = None, view: View = "hour", refresh: int = 0,
    values: Mapping[str, str] | None = None,
) -> bytes:
    """The page; ``only``: a query class to show alone; ``values``: dimension values to show
    alone (``{"platform": "ios"}``: the slice filter); ``recent``: the last hour and its
    comparison (the sparklines come from the export's trends); ``now``: the wall clock (None:
    no data age);
    ``broker``: None for a replay; ``view``: the online figures of the last hour or since the
    state began; ``refresh``: seconds between reloads (0: none)."""
    classes = list(dict.fromkeys(s.slice[0] for s in export.slices))
    if only is not None and only not in (ALL, *classes):
        only = None  # a class not (yet) known, or a dashboard's "All" (.*): every class
    shown = [only] if only is not None else [ALL, *classes]
    dimensions = export.labels[1:]
    known = {name: sorted({s.slice[1 + i] for s in export.slices})
             for i, name in enumerate(dimensions)}
    picked = {name: value for name, value in (values or {}).items()
              if value in known.get(name, ())}  # "All" (.*) or unknown: every value
    selection = Selection(export.labels, picked)

    def link(name: str | None = only, shown_view: View = view, every: int = refresh,
             chosen: Mapping[str, str] = picked) -> str:
        return _href(name, shown_view, every, chosen)

    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        f"<meta http-equiv=refresh content={refresh}>" if refresh > 0 else "",
        f"<title>searchmon{' - ' + escape(only) if only else ''}</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>searchmon: search quality</h1>",
        _state(export, now, broker, refresh, link),
        _summary(export, queries),
        "<nav>Classes: " + " ".join(
            f"<a href='{link(name)}'>{escape(name)}</a>" for name in [ALL, *classes]
        ) + f" <a href='{link(None)}'>(every class)</a> <a href='/queries'>/queries (JSON)</a> "
        "<a href='/metrics'>/metrics</a></nav>",
        *(f"<nav>{escape(name)}: " + " ".join(
            f"<a href='{link(chosen={**picked, name: value})}'>"
            + (f"<b>{escape(value)}</b>" if picked.get(name) == value else escape(value))
            + "</a>" for value in known[name]
        ) + f" <a href='{link(chosen={k: v for k, v in picked.items() if k != name})}'>"
            f"(every {escape(name)})</a></nav>" for name in dimensions),
        _quality(export),
        _online_total(export, shown, link(shown_view="hour"), selection) if view == "total"
        else _online_hour(recent or Recent(), shown, link(shown_view="total"), selection),
        _verdicts(export, shown, selection),
        _by_source(export, shown, selection),
        _experiments(export),
    ]
    if queries is None:
        parts.append("<h2>Queries</h2><p class=muted>Not computed yet: the query lists "
                     "appear after the first checkpoint.</p>")
    elif not queries.get("enabled", False):
        parts.append("<h2>Queries</h2><p class=muted>Query lists are disabled "
                     "(<code>[query_lists] enabled = false</code>).</p>")
    else:
        offline = export.offline
        regressions = {(v.slice, v.measure) for v in offline.verdicts if v.regression} if (
            offline is not None
        ) else set()
        kept = set(queries.get("dimensions", ()))
        unkept = sorted(set(picked) - kept)
        if unkept:
            parts.append("<p class=muted>The query lists are kept by class"
                         + "".join(f", {escape(name)}" for name in sorted(kept))
                         + f" (<code>[query_lists] dimensions</code>), not by "
                         f"{escape(', '.join(unkept))}: they show every value of it.</p>")
        listed = Selection(selection.labels, {k: v for k, v in picked.items() if k in kept})
        for name in shown:
            parts.append(_queries(queries, name, regressions, listed))
    parts.append("</body></html>\n")
    return "".join(parts).encode()


@dataclass(frozen=True)
class Selection:
    """The dimension values the page shows alone (none: every slice)."""

    labels: tuple[str, ...]
    values: Mapping[str, str]

    def holds(self, values: Slice) -> bool:
        """Whether the slice ``values`` is among those picked."""
        return all(values[self.labels.index(name)] == value
                   for name, value in self.values.items())

    def title(self, name: str) -> str:
        """A class's row, with the values picked."""
        return " ".join([name, *(f"{k}={v}" for k, v in self.values.items())])


def _href(only: str | None, view: View, refresh: int,
          values: Mapping[str, str] | None = None) -> str:
    """The page's address with these choices (the defaults left out)."""
    asked: dict[str, str | int] = {}
    if only is not None:
        asked["class"] = only
    asked.update(values or {})
    if view != "hour":
        asked["view"] = view
    if refresh != PAGE_REFRESH:
        asked["refresh"] = refresh
    return "/?" + urlencode(asked, quote_via=quote) if asked else "/"


def _state(
    export: Export, now: float | None, broker: Broker | None, refresh: int,
    link: Callable[..., str],
) -> str:
    """How old the data is, where it comes from, and the reloads."""
    parts = []
    if export.newest is None:
        parts.append("<span class=muted>no event yet</span>")
    elif now is not None:
        age = max(now - export.newest, 0.0)
        stale = broker is not None and age > STALE
        parts.append(f"<span{' class=bad' if stale else ''}>data {_duration(age)} old</span>")
    if broker is None:
        parts.append("<span>replay</span>")
    elif not broker.connected:
        reason = f": {escape(broker.not_ready)}" if broker.not_ready else ""
        parts.append(f"<span class=bad>broker unreachable{reason}</span>")
    elif broker.not_ready is not None:
        parts.append(f"<span>broker connected</span> <span class=bad>not ready: "
                     f"{escape(broker.not_ready)}</span>")
    else:
        parts.append("<span class=ok>broker connected</span>")
    if refresh > 0:
        parts.append(f"<span class=muted>reloads every {_duration(refresh)} "
                     f"(<a href='{link(every=0)}'>stop</a>)</span>")
    else:
        every = round(PAGE_REFRESH)
        parts.append(f"<span class=muted>not reloading (<a href='{link(every=every)}'>reload "
                     f"every {_duration(every)}</a>)</span>")
    return "<p class=state>" + " &middot; ".join(parts) + "</p>"


def _summary(export: Export, queries: Report | None) -> str:
    newest = _utc(export.newest) if export.newest is not None else "nothing yet"
    rejected = sum(export.rejected.values())
    lines = [
        f"Newest event: <b>{newest}</b>",
        f"events accepted {export.accepted:,}, rejected {rejected:,}",
        f"open sessions {export.open_sessions:,}",
    ]
    offline = export.offline
    if offline is not None and offline.last_sample_time is not None:
        lines.append(f"last judged sample completed at {_utc(offline.last_sample_time)}")
    if queries is not None and queries.get("enabled"):
        lines.append(f"queries shown once {queries['min_sessions']} distinct sessions issued "
                     "them")
    return "<p>" + " &middot; ".join(lines) + "</p>"


ONLINE_COLUMNS = (
    ("queries", "queries"), ("ctr", "CTR"), ("zero_result_rate", "zero-result rate"),
    ("sessions", "sessions"), ("abandonment_rate", "abandonment"),
    ("session_success_rate", "success"), ("conversions", "conversions"),
)
"""The columns of the online tables: counters of ``OnlineCounters.COUNTS`` and ratios of
``RATIOS``, by name, with their titles."""


def _online_row(counts: Callable[[str], int | None]) -> list[str]:
    """The cells of ``ONLINE_COLUMNS`` over the counters ``counts`` gives by name (None:
    unknown, shown as -). Both views of the online figures make their rows here."""
    cells = []
    for name, _ in ONLINE_COLUMNS:
        if any(r.name == name for r in RATIOS):
            value = ratio(name, counts)
            cells.append("-" if value is None else f"{value:.3f}")
        else:
            count = counts(name)
            cells.append("-" if count is None else f"{count:,}")
    return cells


def _online_hour(recent: Recent, shown: Sequence[str], total: str,
                 selection: Selection) -> str:
    """The last hour per class, each above the period it is compared with; with dimensions,
    then a table per dimension (per value, over the classes shown)."""
    heading = f"<h2>Online: the last hour <a href='{total}'>since the state began</a></h2>"
    hour, earlier = recent.hour, recent.earlier
    if hour is None:
        return heading + ("<p class=muted>No history yet: it keeps the counters every 5 "
                          "minutes of event time, from the first events on.</p>")
    compared = "the same hour a week earlier" if recent.week else "the hour before"
    where = f"Last hour: {_period(hour)}; "
    where += (f"against {compared}: {_period(earlier)}." if earlier is not None else
              "nothing to compare with yet (the history is younger than two hours).")
    every = [s for s in hour.end.counts if len(s) == len(selection.labels)
             and selection.holds(s)]

    def table(title: str, groups: list[tuple[str, list[Slice]]]) -> str:
        rows, kinds = [], []
        for name, slices in groups:
            if not slices:
                continue
            rows.append([escape(name), "<b>last hour</b>",
                         *_online_row(hour.counts(slices).get)])
            kinds.append("")
            if earlier is not None:
                rows.append(["", "a week earlier" if recent.week else "hour before",
                             *_online_row(earlier.counts(slices).get)])
                kinds.append("muted")
        return _table([title, "period", *(title for _, title in ONLINE_COLUMNS)], rows,
                      kinds, first_columns=2)

    groups = [(selection.title(name), [s for s in every if name == ALL or s[0] == name])
              for name in shown]
    out = heading + f"<p class=muted>{where}</p>" + table("class", groups)
    in_classes = [s for s in every if ALL in shown or s[0] in shown]
    for at, dimension in enumerate(selection.labels[1:], 1):
        out += f"<h3>by {escape(dimension)}</h3>" + table(dimension, [
            (value, [s for s in in_classes if s[at] == value])
            for value in sorted({s[at] for s in in_classes})
        ])
    return out


def _online_total(export: Export, shown: Sequence[str], hour: str,
                  selection: Selection) -> str:
    every = [s for s in export.slices if selection.holds(s.slice)]

    def table(title: str, groups: list[tuple[str, list[SliceFigures]]]) -> str:
        rows = []
        for name, parts in groups:
            if not parts:
                continue
            figures = {n: sum(p.count(n) for p in parts) for n in OnlineCounters.COUNTS}
            rows.append([escape(name), *_online_row(figures.get)])
        return _table([title, *(title for _, title in ONLINE_COLUMNS)], rows)

    out = (f"<h2>Online: since the state began <a href='{hour}'>the last hour</a></h2>"
           + table("class", [(selection.title(name), [
               s for s in every if name == ALL or s.slice[0] == name]) for name in shown]))
    in_classes = [s for s in every if ALL in shown or s.slice[0] in shown]
    for at, dimension in enumerate(selection.labels[1:], 1):
        out += f"<h3>by {escape(dimension)}</h3>" + table(dimension, [
            (value, [s for s in in_classes if s.slice[at] == value])
            for value in sorted({s.slice[at] for s in in_classes})
        ])
    return out


def _period(period: Period) -> str:
    start, end = period.start.time, period.end.time
    same_day = _utc(start)[:10] == _utc(end)[:10]
    shown_end = _utc(end)[11:] if same_day else _utc(end)
    return f"{_utc(start)[:-4]} to {shown_end} ({_duration(end - start)})"


def _verdicts(export: Export, shown: Sequence[str], selection: Selection) -> str:
    offline = export.offline
    if offline is None or not offline.verdicts:
        return "<h2>Judged samples</h2><p class=muted>No sample compared with a baseline yet.</p>"
    trend = {(t.slice, t.measure): t.means for t in offline.trends}
    rows = []
    for v in offline.verdicts:
        if v.slice[0] not in shown or not selection.holds(v.slice):
            continue
        verdict = {True: "<span class=bad>REGRESSION</span>", False: "<span class=ok>ok</span>",
                   None: "<span class=muted>too few shared queries</span>"}[v.regression]
        since = "-"
        if v.regression and v.since_time is not None:
            since = (f"<span class=bad>since {escape(_utc(v.since_time)[:16])} "
                     f"({v.flagged_samples} sample{'s' * (v.flagged_samples != 1)})</span>")
        rows.append([escape(_slice_text(selection.labels, v.slice)), escape(v.measure), verdict,
                     since, escape(v.baseline_id) or "-", f"{v.delta:+.4f}",
                     f"{v.p_permutation:.4g}", f"{v.shared:,}",
                     _sparkline(trend.get((v.slice, v.measure), ()), v.regression is True)])
    regressions = {v.slice for v in offline.verdicts if v.regression}
    curves = [c for c in offline.curves if c.slice[0] in shown and selection.holds(c.slice)]
    return "<h2>Judged samples: latest sample against its baseline</h2>" + _table(
        ["slice" if len(selection.labels) > 1 else "class", "measure", "verdict", "flagged",
         "baseline", "change of mean", "p (randomization)", "shared queries",
         "recent samples' means"],
        rows,
    ) + _precision_recall(curves, regressions, selection.labels) + _acceptances(
        offline.acceptances)


SOURCE_NAMES = {"sample": "human samples", "live": "live queries with human qrels",
                "implicit": "live queries with labels from clicks"}


def _by_source(export: Export, shown: Sequence[str], selection: Selection) -> str:
    """The offline measures of the shortest time window, per source: human samples, the
    live join with human qrels, and the implicit labels from clicks (shown once they scored
    a query)."""
    offline = export.offline
    if offline is None:
        return ""
    windows = [m.window for m in offline.means if isinstance(m.window, float)]
    if not windows or not any(m.source == "implicit" for m in offline.means):
        return ""
    shortest = min(windows)
    means = {(m.slice, m.measure, m.source): m for m in offline.means
             if m.window == shortest and isinstance(m.window, float)}
    slices = list(dict.fromkeys(key[0] for key in means))
    measures = list(dict.fromkeys(key[1] for key in means))
    rows = []
    for values in slices:
        if values[0] not in shown or not selection.holds(values):
            continue
        for measure in measures:
            cells = []
            for source in SOURCE_NAMES:
                found = means.get((values, measure, source))
                cells.append("-" if found is None else
                             f"{found.mean:.4f} <span class=muted>({found.queries:,})</span>")
            rows.append([escape(_slice_text(selection.labels, values)), escape(measure),
                         *cells])
    return (f"<h2>Offline measures by source, last {escape(_duration(shortest))}</h2>"
            "<p class=muted>Labels from clicks fill the gaps between human samples; they "
            "can disagree with human labels (users trust the top results, and judge from "
            "the snippet).</p>" + _table(
                ["slice" if len(selection.labels) > 1 else "class", "measure",
                 *SOURCE_NAMES.values()], rows))


def _number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _experiments(export: Export) -> str:
    """Each experiment: its variants, the sample ratio test, and every treatment against
    the control per metric with the always-valid verdict."""
    if not export.experiments and not export.interleaving:
        return ""
    parts = ["<h2>Experiments</h2>"]
    if export.interleaving:
        rows = []
        for pair in export.interleaving:
            found = preference(pair)
            ci = found["ci95"]
            rows.append([escape(f"{found['a']} vs {found['b']}"), f"{found['queries']:,}",
                         f"{found['wins_a']:,}", f"{found['wins_b']:,}", f"{found['ties']:,}",
                         _number(found["delta"], 3),
                         "-" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"])
        parts.append("<h3>Team-draft interleaving</h3>" + _table(
            ["rankers a vs b", "queries", "a won", "b won", "ties",
             "preference for a (&Delta;<sub>AB</sub>)", "95% bootstrap"], rows))
    for experiment in export.experiments:
        result = analyse(experiment)
        srm = result["srm"]
        state = (f"<span class=bad>sample ratio mismatch (p = {srm['p']:.2g}): verdicts "
                 "withheld</span>" if srm["mismatch"] else
                 f"<span class=ok>units as split (p = {srm['p']:.2g})</span>")
        approximate = " (units estimated past max_units)" if srm["approximate"] else ""
        parts.append(f"<h3>{escape(experiment.id)} &middot; unit: {escape(result['unit'])} "
                     f"&middot; {state}{approximate}</h3>")
        rows = [[escape(name), f"{v['units']:,}", f"{v['queries']:,}", f"{v['sessions']:,}",
                 *(_number(v[m], 3) for m in ("ctr", "zero_result_rate", "abandonment_rate",
                                              "session_success_rate"))]
                for name, v in result["variants"].items()]
        parts.append(_table(["variant", "units", "queries", "sessions", "CTR", "zero-result",
                             "abandonment", "success"], rows))
        rows = []
        for c in result["comparisons"]:
            verdict = c["verdict"]
            shown = {"better": "<span class=ok>better</span>",
                     "worse": "<span class=bad>worse</span>",
                     "inconclusive": "<span class=muted>inconclusive</span>",
                     None: "<span class=muted>withheld</span>"}[verdict]
            relative = c["relative"]
            rows.append([
                escape(c["metric"]), escape(f"{c['treatment']} vs {c['control']}"),
                f"{c['delta']:+.4g}", "-" if relative is None else f"{relative:+.2%}",
                f"[{c['ci95'][0]:+.3g}, {c['ci95'][1]:+.3g}]", _number(c["p"], 3),
                _number(c["p_adjusted"], 3), f"[{c['cs95'][0]:+.3g}, {c['cs95'][1]:+.3g}]",
                shown,
            ])
        parts.append(_table(["metric", "variants", "delta", "lift", "95% interval", "p",
                             "p (Holm)", "always-valid 95%", "verdict"], rows))
    return "".join(parts)


def _quality(export: Export) -> str:
    """The data-quality warnings, above the figures they distort (nothing when none)."""
    warnings = data_quality(export)["warnings"]
    if not warnings:
        return ""
    return "<div class=bad><b>Data quality</b><ul>" + "".join(
        f"<li>{escape(warning)}</li>" for warning in warnings
    ) + "</ul></div>"


def _acceptances(accepted: Sequence[AcceptanceFigures]) -> str:
    """The baselines accepted by ``baseline`` messages, newest first."""
    if not accepted:
        return ""
    rows = [
        [escape(_utc(a.time)[:16]), escape(a.sample_id), escape(a.query_class or "every class"),
         escape(a.measure or "every measure"), escape(a.by), escape(a.reason),
         "yes" if a.applied else "<span class=bad>no: sample not kept</span>"]
        for a in reversed(accepted)
    ]
    return "<h3>Accepted baselines (intended changes)</h3>" + _table(
        ["when", "sample", "class", "measure", "by", "reason", "applied"], rows
    )


CURVE_WIDTH, CURVE_HEIGHT = 220, 150
CURVE_SAMPLE, CURVE_BASELINE = "#1f5fa8", "#8a8a8a"


def _precision_recall(curves: Sequence[CurveFigures], regressions: Collection[Slice],
                      labels: Sequence[str]) -> str:
    """Per class, the newest sample's interpolated precision at the eleven recall levels
    against its baseline's, as small inline SVG charts (nothing before a sample has one)."""
    if not curves:
        return ""
    charts = "".join(
        f"<div><b>{escape(_slice_text(labels, c.slice))}</b> <span class=muted>"
        f"{escape(c.sample_id)} ({c.queries:,} queries) against "
        + (f"{escape(c.baseline_id)} ({c.baseline_queries:,})" if c.baseline_id else "nothing")
        + f"</span><br>{_curve_chart(c, c.slice in regressions)}</div>"
        for c in curves
    )
    return ("<h3>Precision-recall: latest sample against its baseline</h3>"
            "<p class=muted>Mean interpolated precision at recall 0, 0.1, ..., 1 (trec_eval's "
            "iprec_at_recall, labels from 1 relevant): the sample in blue (red in a "
            "regression), its baseline in grey, dashed.</p>"
            f"<div class=grid>{charts}</div>")


def _curve_chart(curve: CurveFigures, regression: bool) -> str:
    left, top, right, bottom = 30.0, 8.0, 8.0, 24.0
    width, height = CURVE_WIDTH - left - right, CURVE_HEIGHT - top - bottom

    def points(precision: Sequence[float]) -> str:
        return " ".join(
            f"{left + width * i / (len(precision) - 1):.1f},{top + height * (1 - p):.1f}"
            for i, p in enumerate(precision)
        )

    def listed(precision: Sequence[float]) -> str:
        return ", ".join(f"{p:.3f}" for p in precision)

    label = (f"sample {curve.sample_id} ({curve.queries} queries): {listed(curve.precision)}"
             + (f"; baseline {curve.baseline_id} ({curve.baseline_queries} queries): "
                f"{listed(curve.baseline)}" if curve.baseline else "; no baseline curve"))
    colour = "#c62828" if regression else CURVE_SAMPLE
    grid = "".join(
        f"<line x1={left} y1={top + height * (1 - v):.1f} x2={left + width} "
        f"y2={top + height * (1 - v):.1f} stroke='#e4e4e4' stroke-width=1 />"
        f"<text x={left - 4} y={top + height * (1 - v) + 4:.1f} text-anchor=end "
        f"font-size=10 fill='#555'>{v:g}</text>"
        for v in (0.0, 0.5, 1.0)
    )
    ticks = "".join(
        f"<text x={left + width * v:.1f} y={top + height + 12:.1f} text-anchor=middle "
        f"font-size=10 fill='#555'>{v:g}</text>"
        for v in (0.0, 0.5, 1.0)
    )
    baseline = (f"<polyline class=baseline points='{points(curve.baseline)}' fill=none "
                f"stroke='{CURVE_BASELINE}' stroke-width=1.5 stroke-dasharray='4 3' />"
                if curve.baseline else "")
    return (
        f"<svg class=curve width={CURVE_WIDTH} height={CURVE_HEIGHT} "
        f"viewBox='0 0 {CURVE_WIDTH} {CURVE_HEIGHT}' role=img aria-label='{escape(label)}'>"
        f"<title>{escape(label)}</title>{grid}{ticks}"
        f"<rect x={left} y={top} width={width} height={height} fill=none stroke='#888' "
        "stroke-width=1 />"
        f"<text x={left + width / 2:.1f} y={CURVE_HEIGHT - 2} text-anchor=middle font-size=10 "
        "fill='#555'>recall</text>"
        f"{baseline}<polyline class=sample points='{points(curve.precision)}' fill=none "
        f"stroke='{colour}' stroke-width=2 stroke-linejoin=round />"
        "</svg>"
    )


SPARK_WIDTH, SPARK_HEIGHT = 120, 24
SPARK_SPAN = 0.1
"""The least range of means a sparkline's height stands for: noise stays small."""


def _sparkline(means: Sequence[float], regression: bool) -> str:
    """The means as an inline SVG line, oldest left, its height their range (at least
    ``SPARK_SPAN``, around their middle); the newest marked (red in a regression); its
    title lists them. Fewer than two: none."""
    values = [m for m in means if math.isfinite(m)]
    if len(values) < 2:
        return "<span class=muted>-</span>"
    low, high = min(values), max(values)
    span = max(high - low, SPARK_SPAN)
    top = (low + high + span) / 2
    pad = 3.0
    width, height = SPARK_WIDTH - 2 * pad, SPARK_HEIGHT - 2 * pad

    def xy(i: int, value: float) -> tuple[float, float]:
        return pad + width * i / (len(values) - 1), pad + height * (top - value) / span

    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in enumerate(values)))
    last_x, last_y = xy(len(values) - 1, values[-1])
    listed = ", ".join(f"{v:.3f}" for v in values)
    label = f"means of the last {len(values)} samples, oldest first: {listed}"
    return (
        f"<svg class=spark width={SPARK_WIDTH} height={SPARK_HEIGHT} "
        f"viewBox='0 0 {SPARK_WIDTH} {SPARK_HEIGHT}' role=img aria-label='{label}'>"
        f"<title>{label}</title>"
        f"<polyline points='{points}' fill=none stroke='#4a4a4a' stroke-width=1.5 "
        "stroke-linejoin=round stroke-linecap=round />"
        f"<circle cx={last_x:.1f} cy={last_y:.1f} r=2.5 "
        f"fill='{'#c62828' if regression else '#4a4a4a'}' /></svg> "
        f"<span class=muted>{low:.3f}&ndash;{high:.3f}</span>"
    )


def _slice_text(labels: Sequence[str], values: Slice) -> str:
    """A slice for a reader: its class, then ``dimension=value`` for each value it has
    (``unknown``, the value of a judged sample that names none, left out)."""
    return " ".join([values[0], *(f"{label}={value}" for label, value in
                                  zip(labels[1:], values[1:], strict=True)
                                  if value and value != UNKNOWN)])


def _entry_slice(labels: Sequence[str], entry: dict[str, Any]) -> Slice:
    """The slice of a ``/queries`` entry (``""``: a dimension it has no value of)."""
    return tuple(str(entry.get(label, "")) for label in labels)


def _queries(queries: Report, name: str, regressions: Collection[tuple[Slice, str]],
             selection: Selection) -> str:
    """The worsened queries and the lists of class ``name`` (of the slices picked, each apart,
    or of the whole class); the worsened ones in red only where that slice's verdict on that
    measure is a regression (``regressions``)."""
    labels = selection.labels
    parts = []
    groups: dict[Slice, list[dict[str, Any]]] = {}
    whole = (name, *("" for _ in labels[1:]))  # the class over every slice
    for entry in [*queries.get("worsened", []), *queries.get("lists", [])]:
        values = _entry_slice(labels, entry)
        if values[0] != name:
            continue
        if selection.values:
            if selection.holds(values):
                groups.setdefault(values, []).append(entry)
        elif values == whole or "source" in entry:  # the worsened queries of every slice
            groups.setdefault(whole, []).append(entry)
    if not groups:
        groups[whole] = []
    for values, entries in groups.items():
        parts.append(_slice_queries(values, entries, regressions, labels))
    return "".join(parts)


def _slice_queries(values: Slice, entries: list[dict[str, Any]],
                   regressions: Collection[tuple[Slice, str]], labels: Sequence[str]) -> str:
    name = _slice_text(labels, values)
    parts = [f"<h2 id='class-{escape(values[0])}'>Queries: {escape(name)}</h2>"]
    worsened = [e for e in entries if "source" in e]
    parts.append("<div class=grid>")
    for entry in worsened:
        if entry["source"] == "sample":
            title = (f"{escape(entry['measure'])} worsened: sample "
                     f"{escape(entry['sample_id'])} against {escape(entry['baseline_id'])}")
        else:
            title = (f"{escape(entry['measure'])} worsened: live qrels join, last "
                     f"{escape(entry['window'])} against the {escape(entry['window'])} before")
        own = _entry_slice(labels, entry)
        if own != values:  # a slice's, shown with its class
            title += f" · {escape(_slice_text(labels, own))}"
        change = "{:+.3f}"
        if (own, entry["measure"]) in regressions:
            title += " <span class=bad>REGRESSION</span>"
            change = "<span class=bad>{:+.3f}</span>"
        parts.append(f"<div><h3>{title}</h3>" + _table(
            ["query", "before", "after", "change"],
            [[escape(r["query"]), f"{r['before']:.3f}", f"{r['after']:.3f}",
              change.format(r["delta"])] for r in entry["rows"]],  # (at most 20: all)
        ) + "</div>")
    parts.append("</div>")
    if not worsened:
        parts.append("<p class=muted>No judged query worsened (or no sample compared yet).</p>")
    entries = [e for e in entries if "source" not in e]
    for window in dict.fromkeys(e["window"] for e in entries):
        of_window = {e["list"]: e for e in entries if e["window"] == window}
        first = next(iter(of_window.values()))
        parts.append(f"<h3>Last {escape(window)} ({escape(first['from'])} to "
                     f"{escape(first['to'])})</h3><div class=grid>")
        for list_name, (title, columns, cells) in _LISTS.items():
            listed = of_window.get(list_name)
            if listed is None:
                continue
            rows = [cells(row) for row in listed["rows"][:ROWS]]
            parts.append(f"<div><b>{title}</b>" + (
                _table(columns, rows) if rows else "<p class=muted>none shown</p>"
            ) + "</div>")
        parts.append("</div>")
    return "".join(parts)


def _bounded(row: dict[str, Any]) -> list[str]:
    # the true count lies in [count - error, count]: an overestimate, never below
    error = (f" <span class=muted>(at least {row['count'] - row['error']:,})</span>"
             if row["error"] else "")
    return [escape(row["query"]), f"{row['count']:,}{error}"]


_LISTS: dict[str, tuple[str, list[str], Callable[[dict[str, Any]], list[str]]]] = {
    "searches": ("Top searches", ["query", "searches"], _bounded),
    "zero_results": ("Top searches without results", ["query", "searches"], _bounded),
    "no_clicks": ("Top searches without a click", ["query", "searches"], _bounded),
    "low_ctr": ("Lowest click-through rate", ["query", "CTR", "searches"], lambda row: [
        escape(row["query"]), f"{row['ctr']:.3f}", f"{row['searches']:,}",
    ]),
}


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], kinds: Sequence[str] = (),
    first_columns: int = 1,
) -> str:
    """A table; ``kinds``: a class per row (empty: none); the ``first_columns`` are text
    (left-aligned), the others figures."""
    if not rows:
        return "<p class=muted>none</p>"
    text = " class=period"

    def cells(row: Sequence[str], tag: str) -> str:
        return "".join(f"<{tag}{text if 0 < i < first_columns else ''}>{c}</{tag}>"
                       for i, c in enumerate(row))

    body = "".join(
        f"<tr{f' class={kind}' if kind else ''}>{cells(row, 'td')}</tr>"
        for row, kind in zip(rows, [*kinds, *[""] * (len(rows) - len(kinds))], strict=True)
    )
    return f"<table><tr>{cells(header, 'th')}</tr>{body}</table>"


def _duration(seconds: float) -> str:
    """``12 s``, ``4 min``, ``3 h 20 min``, ``2 d 5 h``: at most two units (to the nearest
    second, then down)."""
    whole = round(seconds)
    if whole < 120:
        return f"{whole} s"
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if hours < 2:
        return f"{minutes} min"
    if days < 2:
        return f"{hours} h" + (f" {minutes % 60} min" if minutes % 60 else "")
    return f"{days} d" + (f" {hours % 24} h" if hours % 24 else "")


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
