"""The replay report: a pipeline's online and offline figures as JSON or a table
(``searchmon replay --report``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from monitor.core.classes import ALL
from monitor.core.experiments import analyse, preference
from monitor.core.export import SliceFigures, export
from monitor.core.judged import OVERALL
from monitor.core.online import RATIOS, OnlineCounters, ratio
from monitor.core.pipeline import Pipeline
from monitor.core.slices import slice_key
from monitor.serve.quality import data_quality
from monitor.serve.queries import query_report
from monitor.text import printable


def _online_entry(parts: Iterable[SliceFigures]) -> dict[str, Any]:
    """The counters added over ``parts``, and the ratios (``RATIOS``) of the sums."""
    parts = list(parts)
    entry: dict[str, Any] = {
        name: sum(part.counts[i] for part in parts)
        for i, name in enumerate(OnlineCounters.COUNTS)
    }
    for r in RATIOS:
        entry[r.name] = ratio(r.name, entry.get)
    return entry


def report(pipeline: Pipeline, lists: bool = True) -> dict[str, Any]:
    """The replay report: online and offline results overall and per slice (per class
    without dimensions; with them, also per value of each dimension), rejections, and
    unless ``lists`` is false (the table, which does not show them) the query lists."""
    figures = export(pipeline)
    labels = figures.labels
    online = {"all": _online_entry(figures.slices)}
    for part in figures.slices:
        online[slice_key(labels, part.slice)] = _online_entry([part])
    rejected = {r.value: n for r, n in pipeline.health.rejected.items() if n}
    dimensions: dict[str, Any] = {}
    if len(labels) > 1:
        dimensions = {"dimensions": list(labels[1:]), "by_dimension": {
            label: {
                value: _online_entry(p for p in figures.slices if p.slice[at] == value)
                for value in sorted({part.slice[at] for part in figures.slices})
            }
            for at, label in enumerate(labels)
        }, "folded_values": dict(figures.folded_values)}
    if figures.experiments:
        dimensions["experiments"] = {e.id: analyse(e) for e in figures.experiments}
        for e in figures.experiments:  # an interleaving of two of its variants: with it
            names = {v.name for v in e.variants}
            pairs = [preference(p) for p in figures.interleaving if {p.a, p.b} <= names]
            if pairs:
                dimensions["experiments"][e.id]["interleaving"] = pairs
    if figures.interleaving:
        dimensions["interleaving"] = [preference(p) for p in figures.interleaving]
    return {
        **dimensions,
        "online": online,
        "offline": _offline(pipeline),
        "regressions": _regressions(pipeline),
        "acceptances": _acceptances(pipeline),
        "data_quality": data_quality(figures),
        "rejected": rejected,
        "unmatched_clicks": pipeline.sessions.unmatched_clicks,
        "ignored_actions": pipeline.health.ignored_actions,
        **({"queries": query_report([pipeline], pipeline, pipeline.config)} if lists else {}),
    }


def _offline(pipeline: Pipeline) -> dict[str, Any]:
    """All judged-sample queries replayed: their number and mean per measure, by class."""
    judged = pipeline.judged
    out: dict[str, Any] = {}
    slices = pipeline.slices
    for klass in [OVERALL, *range(len(slices.names))]:
        count = judged.judged_queries.get(klass, 0)
        if klass != OVERALL and (count == 0 or not slices.canonical(klass)):
            continue
        name = ALL if klass == OVERALL else slices.key(klass)
        entry: dict[str, Any] = {"judged_queries": count}
        for m, spec in enumerate(judged.specs):
            total, n = judged.totals.get((klass, m), (0.0, 0))
            entry[str(spec)] = total / n if n else None
        out[name] = entry
    return out


def _regressions(pipeline: Pipeline) -> dict[str, Any]:
    """The latest completed sample against its baseline, per class and measure."""
    judged = pipeline.judged
    slices = pipeline.slices
    out: dict[str, dict[str, Any]] = {}
    for (klass, m), verdict in sorted(judged.verdicts.items()):
        if klass != OVERALL and not slices.canonical(klass):
            continue
        name = ALL if klass == OVERALL else slices.key(klass)
        comparison = verdict.comparison
        since = judged.flagged.get((klass, m)) if verdict.regression else None
        out.setdefault(name, {})[str(judged.specs[m])] = {
            "sample": verdict.sample_id,
            "baseline": verdict.baseline_id,
            "shared_queries": comparison.shared,
            "delta": comparison.delta if comparison.shared else None,
            "p_permutation": comparison.p_permutation if comparison.shared else None,
            "p_t": comparison.p_t if comparison.shared else None,
            "regression": verdict.regression,
            "since_sample": since.sample_id if since is not None else None,
            "since": _utc(since.time) if since is not None else None,
            "flagged_samples": since.samples if since is not None else 0,
        }
    return out


def _acceptances(pipeline: Pipeline) -> list[dict[str, Any]]:
    """The baselines accepted by ``baseline`` messages, oldest first (the newest 20)."""
    judged = pipeline.judged
    return [
        {
            "time": _utc(a.time), "sample": a.sample_id,
            "query_class": a.query_class,
            "measure": None if a.measure is None else str(judged.specs[a.measure]),
            "reason": a.reason, "by": a.by, "applied": a.applied,
        }
        for a in judged.acceptances
    ]


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def format_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2) + "\n"


TABLE_COLUMNS = (
    ("queries", "queries", "{:d}"),
    ("ctr", "CTR", "{:.3f}"),
    ("zero_result_rate", "zero-result", "{:.3f}"),
    ("sessions", "sessions", "{:d}"),
    ("abandonment_rate", "abandonment", "{:.3f}"),
    ("session_success_rate", "success", "{:.3f}"),
    ("reformulated_queries", "reformulated", "{:d}"),
    ("conversions", "conversions", "{:d}"),
)


def _columns(rows: list[list[str]]) -> str:
    """Rows as fixed-width columns, the first left-aligned, the others right-aligned; class
    and dimension values come from the events: a control character is shown escaped, never
    sent to the terminal."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                  enumerate(zip(row, widths, strict=True))) + "\n"
        for row in rows
    )


def format_table(result: dict[str, Any]) -> str:
    """A fixed-width table: one row per class, then ``all`` (with dimensions, then a table
    per dimension, one row per value; every slice is in the JSON report); rejections below."""
    online = result["online"]
    tables = {"class": online}
    if "by_dimension" in result:
        tables = {name: {**values, "all": online["all"]}
                  for name, values in result["by_dimension"].items()}
        tables = {("class" if name == "query_class" else name): values
                  for name, values in tables.items()}
    text = ""
    for title, entries in tables.items():
        rows = [[title, *(title for _, title, _ in TABLE_COLUMNS)]]
        for name in [*sorted(n for n in entries if n != "all"), "all"]:
            entry = entries[name]
            rows.append([name, *(
                "-" if entry[key] is None else fmt.format(entry[key])
                for key, _, fmt in TABLE_COLUMNS
            )])
        text += ("\n" if text else "") + _columns(rows)
    offline = result["offline"]
    if offline.get("all", {}).get("judged_queries"):
        text += "\njudged samples (all replayed):\n"
        measures = [k for k in offline["all"] if k != "judged_queries"]
        rows = [["class", "judged", *measures]]
        for name in [*sorted(n for n in offline if n != "all"), "all"]:
            entry = offline[name]
            rows.append([name, str(entry["judged_queries"]), *(
                "-" if entry[m] is None else f"{entry[m]:.4f}" for m in measures
            )])
        text += _columns(rows)
    regressions = result["regressions"]
    if regressions:
        text += "\nlatest judged sample against its baseline:\n"
        rows = [["class", "measure", "sample", "baseline", "shared", "delta", "p", "regression",
                 "since"]]
        for name in sorted(regressions):
            for measure, v in regressions[name].items():
                rows.append([
                    name, measure, v["sample"], v["baseline"], str(v["shared_queries"]),
                    "-" if v["delta"] is None else f"{v['delta']:+.4f}",
                    "-" if v["p_permutation"] is None else f"{v['p_permutation']:.4f}",
                    {True: "REGRESSION", False: "no", None: "too few queries"}[v["regression"]],
                    f"{v['since']}, {v['flagged_samples']} samples" if v["since"] else "-",
                ])
        text += _columns(rows)
    for accepted in result["acceptances"]:
        text += "\n" + printable(
            f"baseline accepted at {accepted['time']} by {accepted['by']}: sample "
            f"{accepted['sample']} for {accepted['query_class'] or 'every class'}, "
            f"{accepted['measure'] or 'every measure'} ({accepted['reason']})"
            + ("" if accepted["applied"] else " - not applied: sample not kept")
        ) + "\n"
    for warning in result["data_quality"]["warnings"]:
        text += f"\ndata quality: {printable(warning)}\n"
    rejected = result["rejected"]
    if rejected:
        text += "\nrejected: " + ", ".join(f"{k} {v}" for k, v in sorted(rejected.items()))
        text += "\n"
    if result["unmatched_clicks"] or result["ignored_actions"]:
        text += (f"\nclicks on a query not seen in their session: {result['unmatched_clicks']}"
                 f"; UBI actions ignored: {result['ignored_actions']}\n")
    return text
