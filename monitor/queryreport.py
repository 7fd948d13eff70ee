"""What ``/queries``, the status page, ``searchmon top`` and ``replay --report json`` show of
the query lists: plain JSON data, merged over the pipelines of every partition owned.

``lists``: one entry per (list, window, query class), ``all`` merging the classes. Rows of
``searches``, ``zero_results`` and ``no_clicks`` carry ``count`` and ``error``: the true
figure lies in ``[count - error, count]``. Rows of ``low_ctr`` carry the searches counted
since the query was kept, how many of them got a click, and their click-through rate.
``worsened``: one entry per (source, window, class, measure): the judged queries whose score
dropped most, with both scores (``sample``: the latest completed sample against its
baseline; ``live``: the live qrels join, the last window against the one before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from monitor.classes import ALL
from monitor.config import Config, parse_duration
from monitor.heavy import redact
from monitor.judged import OVERALL, Judged
from monitor.pipeline import Pipeline
from monitor.querylists import (
    LISTS,
    TallyState,
    lists,
    merge_tallies,
    redactions,
    window_name,
)

Report = dict[str, Any]


def query_report(pipelines: Sequence[Pipeline], offline: Pipeline | None, config: Config) -> (
    Report
):
    """The lists of ``pipelines`` merged, and the worsened queries of ``offline`` (the
    pipeline holding the offline state, if any)."""
    settings = config.query_lists
    report: Report = {
        "enabled": settings.enabled, "min_sessions": settings.min_sessions,
        "capacity": settings.capacity, "lists": [], "worsened": [],
    }
    if not settings.enabled:
        return report
    newest = max((p.sessions.newest for p in pipelines), default=float("-inf"))
    report["as_of"] = _utc(newest) if newest > float("-inf") else None
    for length in settings.windows:
        merged, overall, span = window_states(pipelines, length, config)
        if span is None:
            continue
        window = window_name(length)
        for name, state in [(ALL, overall), *merged.items()]:
            if state is None:
                continue
            for list_name, rows in lists(state, settings).items():
                report["lists"].append({
                    "list": list_name, "window": window, "query_class": name,
                    "from": _utc(span[0]), "to": _utc(min(span[1], newest)), "rows": rows,
                })
    if offline is not None and offline.judged.active:
        report["worsened"] = _worsened(offline.judged, offline.classes.names, config)
    return report


def window_states(
    pipelines: Sequence[Pipeline], length: float, config: Config
) -> tuple[dict[str, TallyState], TallyState | None, tuple[float, float] | None]:
    """One window of ``pipelines``: the merged tally per class name, the overall one (the
    merge of the classes), and the event time the window covers (None: nothing in it)."""
    capacity, min_sessions = config.query_lists.capacity, config.query_lists.min_sessions
    by_class: dict[str, list[TallyState]] = {}
    spans = []
    for pipeline in pipelines:
        assert pipeline.lists is not None, "the lists are enabled"
        span = pipeline.lists.span(length)
        if span is not None:
            spans.append(span)
        names = pipeline.classes.names
        for bucket in pipeline.lists.buckets[length].values():
            for klass, tally in bucket.items():
                by_class.setdefault(names[klass], []).append(tally.snapshot())
    merged = {}
    for name, states in sorted(by_class.items()):
        state = merge_tallies(states, capacity, min_sessions)
        if state is not None:
            merged[name] = state
    overall = merge_tallies(list(merged.values()), capacity, min_sessions)
    if not spans:
        return merged, overall, None
    return merged, overall, (min(a for a, _ in spans), max(b for _, b in spans))


def _worsened(judged: Judged, names: Sequence[str], config: Config) -> list[dict[str, Any]]:
    kept = redactions(config.query_lists)
    measures = [str(spec) for spec in judged.specs]

    def entries(
        cells: dict[tuple[int, int], list[tuple[str, float, float]]], head: dict[str, Any]
    ) -> list[dict[str, Any]]:
        return [
            {
                **head, "query_class": ALL if klass == OVERALL else names[klass],
                "measure": measures[m],
                "rows": [
                    {"query": redact(key, kept), "before": before, "after": after,
                     "delta": after - before}
                    for key, before, after in rows
                ],
            }
            for (klass, m), rows in sorted(cells.items(), key=lambda c: (c[0][0] != OVERALL,
                                                                        c[0]))
            if rows
        ]

    found = []
    if judged.worsened is not None:
        found += entries(judged.worsened.cells, {
            "source": "sample", "window": None, "sample_id": judged.worsened.sample_id,
            "baseline_id": judged.worsened.baseline_id,
        })
    for length in judged.config.windows:
        found += entries(judged.drifted(length), {"source": "live", "window": window_name(length)})
    return found


class FilterError(ValueError):
    """A filter of ``/queries`` that names nothing it could match."""


def select(
    report: Report, query_class: str | None = None, window: str | None = None,
    list_name: str | None = None,
) -> Report:
    """``report`` with only the entries of ``query_class``, ``window`` (``1h``, ``24h``,
    or any duration such as ``3600``) and ``list_name`` (one of ``LISTS`` or ``worsened``)."""
    if list_name is not None and list_name not in (*LISTS, "worsened"):
        raise FilterError(f"list {list_name!r}: expected one of {', '.join(LISTS)}, worsened")
    seconds = None
    if window is not None:
        try:
            seconds = parse_duration(window if not window.isdigit() else float(window))
        except ValueError:
            raise FilterError(f"window {window!r}: expected a duration such as 1h") from None

    def keep(entry: dict[str, Any], kind: str) -> bool:
        if query_class is not None and entry["query_class"] != query_class:
            return False
        if seconds is not None and entry["window"] is not None and (
            parse_duration(entry["window"]) != seconds
        ):
            return False  # a sample's worsened queries have no window: always kept
        return list_name is None or list_name == kind

    return {
        **report,
        "lists": [e for e in report.get("lists", []) if keep(e, e["list"])],
        "worsened": [e for e in report.get("worsened", []) if keep(e, "worsened")],
    }


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace(
        "+00:00", "Z"
    )


TITLES = {
    "searches": "top searches",
    "zero_results": "top searches without results",
    "no_clicks": "top searches without a click",
    "low_ctr": "lowest click-through rate",
}


def format_lists(report: Report, rows: int) -> str:
    """The lists of ``report`` for a terminal: a title line per list, then aligned rows."""
    if not report.get("enabled", True):
        return "query lists are disabled ([query_lists] enabled = false)\n"
    out: list[str] = []
    for entry in report.get("worsened", []):
        where = (f"sample {entry['sample_id']} against {entry['baseline_id']}"
                 if entry["source"] == "sample"
                 else f"live qrels join, last {entry['window']} against the one before")
        out.append(f"{entry['measure']} worsened · {entry['query_class']} · {where}")
        out += _aligned([["query", "before", "after", "change"]] + [
            [r["query"], f"{r['before']:.3f}", f"{r['after']:.3f}", f"{r['delta']:+.3f}"]
            for r in entry["rows"][:rows]
        ])
    for entry in report.get("lists", []):
        out.append(f"{TITLES[entry['list']]} · {entry['query_class']} · last {entry['window']}"
                   f" ({entry['from']} to {entry['to']})")
        if entry["list"] == "low_ctr":
            table = [["query", "ctr", "searches", "clicked"]] + [
                [r["query"], f"{r['ctr']:.3f}", str(r["searches"]), str(r["clicked"])]
                for r in entry["rows"][:rows]
            ]
        else:
            table = [["query", "count", "± error"]] + [
                [r["query"], str(r["count"]), str(r["error"])] for r in entry["rows"][:rows]
            ]
        out += _aligned(table) if len(table) > 1 else ["  (none shown)"]
    if not out:
        out.append("no list matches (or nothing counted yet)")
    return "\n".join(out) + "\n"


def _aligned(table: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:],
                                                                         strict=True)]
        lines.append("  " + "  ".join(cells).rstrip())
    return [*lines, ""]
