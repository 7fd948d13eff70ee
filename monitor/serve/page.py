"""The status page at ``/``: one server-rendered HTML page for a person paged at 3 a.m.

Per query class: the online figures, the latest verdicts of the judged samples, the queries
that worsened (sample against baseline, and the live qrels join), and the top query lists.
``?class=NAME`` shows one class (the alerts link there). No script, no external asset.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

from monitor.core.classes import ALL
from monitor.core.export import Export, SliceFigures
from monitor.core.online import RATIOS, OnlineCounters, ratio
from monitor.serve.queries import QueryState, Report

ROWS = 10
"""Rows of each list on the page (``/queries`` has them all)."""


@dataclass(frozen=True)
class Status:
    """Where the page and ``/queries`` take their figures from."""

    export: Callable[[], Export]
    queries: Callable[[], Report | None]
    """None until the lists are computed (the daemon: at its first checkpoint)."""
    state: Callable[[], QueryState | None]
    """What the lists are made of, for ``searchmon top`` over several replicas."""


_STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:1.5em;color:#1b1b1b;background:#fff}
h1{font-size:1.4em;margin:0 0 .3em}h2{font-size:1.2em;margin:1.6em 0 .4em;
border-bottom:2px solid #ccc}h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.3em 0 .8em}td,th{padding:.15em .6em;
border-bottom:1px solid #e3e3e3;text-align:right}th{background:#f2f2f2}
td:first-child,th:first-child{text-align:left}.bad{background:#ffd6d6;font-weight:bold}
.ok{color:#246b24}.muted{color:#666}.grid{display:flex;flex-wrap:wrap;gap:1.5em}
nav a{margin-right:.8em}code{background:#f2f2f2;padding:0 .2em}
"""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; "
    f"style-src 'sha256-{base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()}'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""What a browser lets the page do: apply its one inline style sheet (named by its hash, so
no other style, inline or not, applies) and follow links; load nothing else (no script, image,
font, frame or connection), submit no form, and be framed by no page. The endpoint sends it
with every answer."""


def render(export: Export, queries: Report | None, only: str | None = None) -> bytes:
    """The page; ``only``: a query class to show alone."""
    classes = [s.slice[0] for s in export.slices]
    if only is not None and only not in (ALL, *classes):
        only = None  # a class not (yet) known, or a dashboard's "All" (.*): every class
    shown = [only] if only is not None else [ALL, *classes]
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width,initial-scale=1'>",
        f"<title>searchmon{' - ' + escape(only) if only else ''}</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>searchmon: search quality</h1>",
        _summary(export, queries),
        "<nav>Classes: " + " ".join(
            f"<a href='/?class={quote(name)}'>{escape(name)}</a>" for name in [ALL, *classes]
        ) + " <a href='/'>(every class)</a> <a href='/queries'>/queries (JSON)</a> "
        "<a href='/metrics'>/metrics</a></nav>",
        _online(export, shown),
        _verdicts(export, shown),
    ]
    if queries is None:
        parts.append("<h2>Queries</h2><p class=muted>Not computed yet: the query lists "
                     "appear after the first checkpoint.</p>")
    elif not queries.get("enabled", False):
        parts.append("<h2>Queries</h2><p class=muted>Query lists are disabled "
                     "(<code>[query_lists] enabled = false</code>).</p>")
    else:
        for name in shown:
            parts.append(_queries(queries, name))
    parts.append("</body></html>\n")
    return "".join(parts).encode()


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


def _online(export: Export, shown: Sequence[str]) -> str:
    rows = []
    for name in shown:
        figures = _figures(export, name)
        if figures is None:
            continue
        rows.append([escape(name), *_online_row(figures.get)])
    return "<h2>Online, since the daemon's state began</h2>" + _table(
        ["class", *(title for _, title in ONLINE_COLUMNS)], rows,
    )


ONLINE_COLUMNS = (
    ("queries", "queries"), ("ctr", "CTR"), ("zero_result_rate", "zero-result rate"),
    ("sessions", "sessions"), ("abandonment_rate", "abandonment"),
    ("session_success_rate", "success"), ("conversions", "conversions"),
)
"""The columns of the online tables: counters of ``OnlineCounters.COUNTS`` and ratios of
``RATIOS``, by name, with their titles."""


def _online_row(counts: Callable[[str], int | None]) -> list[str]:
    """The cells of ``ONLINE_COLUMNS`` over the counters ``counts`` gives by name (None:
    unknown, shown as -)."""
    cells = []
    for name, _ in ONLINE_COLUMNS:
        if any(r.name == name for r in RATIOS):
            value = ratio(name, counts)
            cells.append("-" if value is None else f"{value:.3f}")
        else:
            count = counts(name)
            cells.append("-" if count is None else f"{count:,}")
    return cells


def _figures(export: Export, name: str) -> dict[str, int] | None:
    parts: list[SliceFigures] = (
        list(export.slices) if name == ALL else [s for s in export.slices if s.slice == (name,)]
    )
    if not parts:
        return None
    return {n: sum(p.count(n) for p in parts) for n in OnlineCounters.COUNTS}


def _verdicts(export: Export, shown: Sequence[str]) -> str:
    offline = export.offline
    if offline is None or not offline.verdicts:
        return "<h2>Judged samples</h2><p class=muted>No sample compared with a baseline yet.</p>"
    rows = []
    for v in offline.verdicts:
        if v.slice[0] not in shown:
            continue
        verdict = {True: "<span class=bad>REGRESSION</span>", False: "<span class=ok>ok</span>",
                   None: "<span class=muted>too few shared queries</span>"}[v.regression]
        rows.append([escape(v.slice[0]), escape(v.measure), verdict, f"{v.delta:+.4f}",
                     f"{v.p_permutation:.4g}", f"{v.shared:,}"])
    return "<h2>Judged samples: latest sample against its baseline</h2>" + _table(
        ["class", "measure", "verdict", "change of mean", "p (randomization)", "shared queries"],
        rows,
    )


def _queries(queries: Report, name: str) -> str:
    parts = [f"<h2 id='class-{escape(name)}'>Queries: {escape(name)}</h2>"]
    worsened = [e for e in queries.get("worsened", []) if e["query_class"] == name]
    parts.append("<div class=grid>")
    for entry in worsened:
        if entry["source"] == "sample":
            title = (f"{escape(entry['measure'])} worsened: sample "
                     f"{escape(entry['sample_id'])} against {escape(entry['baseline_id'])}")
        else:
            title = (f"{escape(entry['measure'])} worsened: live qrels join, last "
                     f"{escape(entry['window'])} against the {escape(entry['window'])} before")
        parts.append(f"<div><h3>{title}</h3>" + _table(
            ["query", "before", "after", "change"],
            [[escape(r["query"]), f"{r['before']:.3f}", f"{r['after']:.3f}",
              f"<span class=bad>{r['delta']:+.3f}</span>"] for r in entry["rows"][:ROWS]],
        ) + "</div>")
    parts.append("</div>")
    if not worsened:
        parts.append("<p class=muted>No judged query worsened (or no sample compared yet).</p>")
    entries = [e for e in queries.get("lists", []) if e["query_class"] == name]
    for window in dict.fromkeys(e["window"] for e in entries):
        of_window = {e["list"]: e for e in entries if e["window"] == window}
        first = next(iter(of_window.values()))
        parts.append(f"<h3>Last {escape(window)} ({escape(first['from'])} to "
                     f"{escape(first['to'])})</h3><div class=grid>")
        for list_name, (title, columns, cells) in _LISTS.items():
            entry = of_window.get(list_name)
            if entry is None:
                continue
            rows = [cells(row) for row in entry["rows"][:ROWS]]
            parts.append(f"<div><b>{title}</b>" + (
                _table(columns, rows) if rows else "<p class=muted>none shown</p>"
            ) + "</div>")
        parts.append("</div>")
    return "".join(parts)


def _bounded(row: dict[str, Any]) -> list[str]:
    error = f" <span class=muted>(&plusmn;{row['error']:,})</span>" if row["error"] else ""
    return [escape(row["query"]), f"{row['count']:,}{error}"]


_LISTS: dict[str, tuple[str, list[str], Callable[[dict[str, Any]], list[str]]]] = {
    "searches": ("Top searches", ["query", "searches"], _bounded),
    "zero_results": ("Top searches without results", ["query", "searches"], _bounded),
    "no_clicks": ("Top searches without a click", ["query", "searches"], _bounded),
    "low_ctr": ("Lowest click-through rate", ["query", "CTR", "searches"], lambda row: [
        escape(row["query"]), f"{row['ctr']:.3f}", f"{row['searches']:,}",
    ]),
}


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return "<p class=muted>none</p>"
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
