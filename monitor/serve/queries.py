"""What ``/queries``, the status page, ``searchmon top`` and ``replay --report json`` show of
the query lists: plain JSON data, merged over the pipelines of every partition owned.

``lists``: one entry per (list, window, query class), ``all`` merging the classes. Rows of
``searches``, ``zero_results`` and ``no_clicks`` carry ``count`` and ``error``: the true
figure lies in ``[count - error, count]``. Rows of ``low_ctr`` carry the searches counted
since the query was kept, how many of them got a click, and their click-through rate.
``worsened``: one entry per (source, window, class, measure): the judged queries whose score
dropped most, with both scores (``sample``: the latest completed sample against its
baseline; ``live``: the live qrels join, the last window against the one before it).

A replica's lists come from a ``QueryState``: the summaries of the partitions it owns,
merged per window and class. States of several replicas merge into one (``merge_replicas``:
``searchmon top`` with several ``--url``), as the partitions' did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from monitor.config import Config, parse_duration, window_label
from monitor.core.classes import ALL
from monitor.core.judged import OVERALL, Judged
from monitor.core.pipeline import Pipeline
from monitor.core.querylists import (
    BUCKETS,
    LISTS,
    Tally,
    check_public,
    lists,
    merge_public,
    merge_tallies,
    public,
)
from monitor.core.slices import QUERY_CLASS, Slice
from monitor.core.snapshots import Float, Int, require, same_lengths
from monitor.core.states import PublicTally, TallyState
from monitor.text import printable

Report = dict[str, Any]


@dataclass(frozen=True)
class WorsenedRow:
    query: str
    before: Float
    after: Float
    delta: Float


@dataclass(frozen=True)
class WorsenedEntry:
    source: str
    window: str | None
    sample_id: str | None
    baseline_id: str | None
    slice: list[str]
    """The label values of the slice (``all``: overall)."""
    measure: str
    rows: list[WorsenedRow]


@dataclass(frozen=True)
class WindowTallies:
    """One window: the event time its buckets cover and the public tally of ``all`` and of
    each slice (only queries that may be shown, no session ids)."""

    window: Float
    start: Float
    end: Float
    slices: list[list[str]]
    """The label values of each tally's slice (``all``: the overall one, no dimension)."""
    tallies: list[PublicTally]


@dataclass(frozen=True)
class QueryState:
    """What one replica (or replay) shows of the query lists, as data that merges with other
    replicas' (``/queries/state``)."""

    enabled: bool
    capacity: Int
    min_sessions: Int
    top: Int
    min_searches: Int
    newest: Float | None
    windows: list[WindowTallies]
    worsened: list[WorsenedEntry]
    labels: list[str] = field(default_factory=lambda: [QUERY_CLASS])
    """The label of each value of a window's slices: the class, then the dimensions the
    lists are kept by (``[query_lists] dimensions``)."""
    slice_labels: list[str] = field(default_factory=lambda: [QUERY_CLASS])
    """The label of each value of a worsened entry's slice (every ``[slices]`` dimension)."""


STATE = TypeAdapter(QueryState)
"""``/queries/state`` as JSON, and back (validated: it comes over the network)."""


def query_state(pipelines: Sequence[Pipeline], offline: Pipeline | None, config: Config) -> (
    QueryState
):
    """The lists of ``pipelines`` merged per window and slice, and the worsened queries of
    ``offline`` (the pipeline holding the offline state, if any)."""
    settings = config.query_lists
    none = tuple("" for _ in config.query_lists.dimensions)  # overall: no dimension value
    newest = max((p.sessions.newest for p in pipelines), default=float("-inf"))
    windows = []
    if settings.enabled:
        capacity, k = settings.capacity, settings.min_sessions
        for length in settings.windows:
            merged, span = window_states(pipelines, length, config)
            overall = merge_tallies(list(merged.values()), capacity, k)
            if span is not None and overall is not None:
                slices = [((ALL, *none), overall), *_per_class(merged, none, capacity, k),
                          *merged.items()]
                windows.append(WindowTallies(
                    length, span[0], min(span[1], newest), [list(name) for name, _ in slices],
                    [public(tally, capacity, k) for _, tally in slices],
                ))
    worsened = []
    if settings.enabled and offline is not None and offline.judged.active:
        worsened = _worsened(offline.judged, offline.slices.names,
                             tuple("" for _ in config.slices.dimensions))
    return QueryState(
        settings.enabled, settings.capacity, settings.min_sessions, settings.top,
        settings.min_searches, newest if newest > float("-inf") else None, windows, worsened,
        [QUERY_CLASS, *config.query_lists.dimensions], [QUERY_CLASS, *config.slices.dimensions],
    )


def query_report(pipelines: Sequence[Pipeline], offline: Pipeline | None, config: Config) -> (
    Report
):
    return report_of(query_state(pipelines, offline, config))


def report_of(state: QueryState) -> Report:
    """The published lists of ``state``: per window, ``all`` and each class."""
    report: Report = {
        "enabled": state.enabled, "min_sessions": state.min_sessions,
        "capacity": state.capacity, "lists": [], "worsened": [],
    }
    if len(state.slice_labels) > 1:  # with [slices]: what the lists can be filtered by
        report["dimensions"] = state.labels[1:]
    if not state.enabled:
        return report
    report["as_of"] = _utc(state.newest) if state.newest is not None else None
    for window in state.windows:
        for values, tally in zip(window.slices, window.tallies, strict=True):
            for list_name, rows in lists(tally, state.top, state.min_searches).items():
                report["lists"].append({
                    "list": list_name, "window": window_label(window.window),
                    **_labelled(state.labels, values), "from": _utc(window.start),
                    "to": _utc(window.end), "rows": rows,
                })
    report["worsened"] = [
        {
            "source": e.source, "window": e.window,
            **({"sample_id": e.sample_id, "baseline_id": e.baseline_id}
               if e.source == "sample" else {}),
            **_labelled(state.slice_labels, e.slice), "measure": e.measure,
            "rows": [{"query": r.query, "before": r.before, "after": r.after,
                      "delta": r.delta} for r in e.rows],
        }
        for e in state.worsened
    ]
    return report


def merge_replicas(states: Sequence[QueryState]) -> QueryState:
    """The lists of several replicas (each owning other partitions) as one: public tallies
    merge per window and class (``all`` too); the worsened queries are those of the replica
    holding the offline state. Raises ``StateError`` when the replicas' settings differ or a
    state is malformed. A query only some replica could show stays unshown where no replica
    could: k-anonymity is decided per replica. As for partitions, one cutoff: a replica
    whose window ended a whole window before the newest one's (stuck, lagging or quiet)
    is not in that window."""
    first = states[0]
    for state in states:
        require((state.enabled, state.capacity, state.min_sessions) == (
            first.enabled, first.capacity, first.min_sessions
        ), "the replicas' [query_lists] settings differ")
        require(state.labels == first.labels and state.slice_labels == first.slice_labels,
                "the replicas' [slices] or [query_lists] dimensions differ")
        for window in state.windows:
            same_lengths("query lists: a window", window.slices, window.tallies)
            require(all(len(v) == len(state.labels) for v in window.slices),
                    "query lists: a slice not of the labels")
            for tally in window.tallies:  # read back from the network: checked whole
                check_public(tally, state.capacity)
    newest = [s.newest for s in states if s.newest is not None]
    windows = []
    for length in sorted({w.window for s in states for w in s.windows}):
        parts = [w for s in states for w in s.windows if w.window == length]
        latest = max(p.end for p in parts)
        parts = [p for p in parts if p.end > latest - length]
        by_slice: dict[tuple[str, ...], list[PublicTally]] = {}
        for part in parts:
            for values, tally in zip(part.slices, part.tallies, strict=True):
                by_slice.setdefault(tuple(values), []).append(tally)
        names = sorted(by_slice, key=lambda name: (name[0] != ALL, name))
        windows.append(WindowTallies(
            length, min(p.start for p in parts), max(p.end for p in parts),
            [list(name) for name in names],
            [merge_public(by_slice[name], first.capacity) for name in names],
        ))
    worsened = next((s.worsened for s in states if s.worsened), [])
    return QueryState(first.enabled, first.capacity, first.min_sessions, first.top,
                      first.min_searches, max(newest) if newest else None, windows, worsened,
                      first.labels, first.slice_labels)


def window_states(
    pipelines: Sequence[Pipeline], length: float, config: Config
) -> tuple[dict[Slice, TallyState], tuple[float, float] | None]:
    """One window of ``pipelines``: the merged tally per slice (label values), and the
    event time the window covers (None: nothing in it)."""
    capacity, min_sessions = config.query_lists.capacity, config.query_lists.min_sessions
    kept: list[tuple[int, Slice, Tally]] = []
    for pipeline in pipelines:
        assert pipeline.lists is not None, "the lists are enabled"
        pipeline.lists.flush()
        names = pipeline.slices.list_names
        for index, bucket in pipeline.lists.buckets[length].items():
            kept += [(index, names[klass], tally) for klass, tally in bucket.items()]
    if not kept:
        return {}, None
    # one cutoff for every partition: a quiet one's old buckets are not in the window
    newest = max(index for index, _, _ in kept)
    kept = [entry for entry in kept if entry[0] >= newest - BUCKETS]
    by_slice: dict[Slice, list[TallyState]] = {}
    for _, name, tally in kept:
        by_slice.setdefault(name, []).append(tally.snapshot())
    merged = {}
    for name, states in sorted(by_slice.items()):
        state = merge_tallies(states, capacity, min_sessions)
        if state is not None:
            merged[name] = state
    width = length / BUCKETS
    return merged, (min(index for index, _, _ in kept) * width, (newest + 1) * width)


def _per_class(
    merged: dict[Slice, TallyState], none: tuple[str, ...], capacity: int, k: int
) -> list[tuple[Slice, TallyState]]:
    """With dimensions, the lists of each class over all its slices (no dimension value):
    what the status page shows before a slice is picked."""
    if not none:
        return []
    by_class: dict[str, list[TallyState]] = {}
    for values, state in merged.items():
        by_class.setdefault(values[0], []).append(state)
    out = []
    for name, states in sorted(by_class.items()):
        whole = merge_tallies(states, capacity, k)
        if whole is not None:
            out.append(((name, *none), whole))
    return out


def _labelled(labels: Sequence[str], values: Sequence[str]) -> dict[str, str]:
    """A slice as the fields of a report entry: ``query_class``, and each dimension with a
    value (the overall entry has none)."""
    return {label: value for label, value in zip(labels, values, strict=True)
            if value or label == QUERY_CLASS}


def _worsened(
    judged: Judged, names: Sequence[Slice], none: tuple[str, ...]
) -> list[WorsenedEntry]:
    """The worsened queries the offline state kept (already redacted)."""
    measures = [str(spec) for spec in judged.specs]

    def entries(
        cells: dict[tuple[int, int], list[tuple[str, float, float]]], source: str,
        window: str | None, sample_id: str | None, baseline_id: str | None,
    ) -> list[WorsenedEntry]:
        return [
            WorsenedEntry(
                source, window, sample_id, baseline_of((klass, m), baseline_id),
                [ALL, *none] if klass == OVERALL else list(names[klass]), measures[m],
                [WorsenedRow(key, before, after, after - before) for key, before, after in rows],
            )
            for (klass, m), rows in sorted(cells.items(), key=lambda c: (c[0][0] != OVERALL,
                                                                        c[0]))
            if rows
        ]

    def baseline_of(cell: tuple[int, int], shown: str | None) -> str | None:
        """The baseline a sample's cell was compared with: its verdict's (each cell has its
        own under ``last_good``, and a flagged one keeps its last verdict's)."""
        verdict = judged.verdicts.get(cell) if shown is not None else None
        return verdict.baseline_id if verdict is not None else shown

    found = []
    if judged.worsened is not None:
        found += entries(judged.worsened.cells, "sample", None, judged.worsened.sample_id,
                         judged.worsened.baseline_id)
    for length in judged.config.windows:
        found += entries(judged.drifted(length), "live", window_label(length), None, None)
    return found


class FilterError(ValueError):
    """A filter of ``/queries`` that names nothing it could match."""


def select(
    report: Report, query_class: str | None = None, window: str | None = None,
    list_name: str | None = None, values: Mapping[str, str] | None = None,
) -> Report:
    """``report`` with only the entries of ``query_class``, ``window`` (``1h``, ``24h``,
    or any duration such as ``3600``), ``list_name`` (one of ``LISTS`` or ``worsened``)
    and the dimension ``values`` (``{"platform": "ios"}``: the slices with that value).
    A class or a window that no list of the report has raises ``FilterError`` (naming
    those it has), once anything is counted."""
    unkept = sorted(set(values or ()) - set(report.get("dimensions", ())))
    if unkept:
        kept = ", ".join(report.get("dimensions", ())) or "none"
        raise FilterError(f"{unkept[0]}: the query lists are not kept by it ([query_lists] "
                          f"dimensions: {kept})")
    if list_name is not None and list_name not in (*LISTS, "worsened"):
        raise FilterError(f"list {list_name!r}: expected one of {', '.join(LISTS)}, worsened")
    seconds = None
    if window is not None:
        try:
            seconds = parse_duration(window)
        except ValueError:
            raise FilterError(f"window {window!r}: expected a duration such as 1h") from None
    entries = [*report.get("lists", []), *report.get("worsened", [])]
    if report.get("lists"):  # a value no entry has is a mistake, not "nothing counted"
        classes = sorted({e["query_class"] for e in entries})
        if query_class is not None and query_class not in classes:
            raise FilterError(f"class {query_class!r}: no list of it (classes: "
                              f"{', '.join(classes)})")
        windows = sorted({e["window"] for e in entries if e["window"] is not None},
                         key=parse_duration)
        if seconds is not None and all(parse_duration(w) != seconds for w in windows):
            raise FilterError(f"window {window!r}: no list of it (windows: "
                              f"{', '.join(windows)})")

    def keep(entry: dict[str, Any], kind: str) -> bool:
        if query_class is not None and entry["query_class"] != query_class:
            return False
        if values and any(entry.get(name) != value for name, value in values.items()):
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


ENTRY_FIELDS = frozenset({
    "list", "window", "from", "to", "rows", "measure", "source", "sample_id", "baseline_id",
    "query_class",
})
"""The fields of a report entry that are not dimensions of its slice."""


def _where(entry: dict[str, Any]) -> str:
    """An entry's slice for a terminal: its class, then ``dimension=value`` for each."""
    dimensions = [f"{k}={v}" for k, v in entry.items() if k not in ENTRY_FIELDS]
    return " ".join([str(entry["query_class"]), *dimensions])


def format_lists(report: Report, rows: int) -> str:
    """The lists of ``report`` for a terminal: a title line per list, then aligned rows.
    Every text is ``printable``: query texts, class names and sample ids come from the
    events, and a report from another endpoint may hold anything."""
    if not report.get("enabled", True):
        return "query lists are disabled ([query_lists] enabled = false)\n"
    out: list[str] = []
    for entry in report.get("worsened", []):
        where = (f"sample {entry['sample_id']} against {entry['baseline_id']}"
                 if entry["source"] == "sample"
                 else f"live qrels join, last {entry['window']} against the one before")
        out.append(f"{entry['measure']} worsened · {_where(entry)} · {where}")
        out += _aligned([["query", "before", "after", "change"]] + [
            [r["query"], f"{r['before']:.3f}", f"{r['after']:.3f}", f"{r['delta']:+.3f}"]
            for r in entry["rows"][:rows]
        ])
    for entry in report.get("lists", []):
        out.append(f"{TITLES[entry['list']]} · {_where(entry)} · last {entry['window']}"
                   f" ({entry['from']} to {entry['to']})")
        if entry["list"] == "low_ctr":
            table = [["query", "ctr", "searches", "clicked"]] + [
                [r["query"], f"{r['ctr']:.3f}", str(r["searches"]), str(r["clicked"])]
                for r in entry["rows"][:rows]
            ]
        else:
            # the true count lies in [count - error, count]
            table = [["query", "count", "may overcount by"]] + [
                [r["query"], str(r["count"]), str(r["error"])] for r in entry["rows"][:rows]
            ]
        out += _aligned(table) if len(table) > 1 else ["  (none shown)"]
    if not out:
        out.append("no list matches (or nothing counted yet)")
    return "\n".join(printable(line) for line in out) + "\n"


def _aligned(table: list[list[str]]) -> list[str]:
    table = [[printable(cell) for cell in row] for row in table]  # measured as shown
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = []
    for row in table:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:],
                                                                         strict=True)]
        lines.append("  " + "  ".join(cells).rstrip())
    return [*lines, ""]
