"""``searchmon replay``: the pipeline over JSONL files, then a report (README: ``replay``)."""

from __future__ import annotations

import gc
import gzip
import json
from collections import deque
from pathlib import Path
from typing import Any, BinaryIO, cast

from monitor.classes import ALL
from monitor.events import Rejection
from monitor.judged import OVERALL
from monitor.online import OnlineCounters
from monitor.pipeline import JudgedMessage, Pipeline, Read, RejectionLog

GZIP_MAGIC = b"\x1f\x8b"


def tune_for_throughput() -> None:
    """Collect cyclic garbage less often: the pipeline makes little, and keeps many objects.

    With CPython's default thresholds (700, 10, 10) the collector walks the open sessions
    over and over; these thresholds cut about 0.3 us per event. The daemon's consumer process
    uses them too (kafka-python allocates several objects per record). Memory is unaffected:
    the per-event objects are freed by reference counting, not by the collector.
    """
    gc.set_threshold(100_000, 50, 100)


def open_events(path: Path) -> BinaryIO:
    """A JSONL file, gzip-compressed or not (recognised by its first bytes)."""
    raw = path.open("rb")
    if raw.peek(2)[:2] == GZIP_MAGIC:
        return cast(BinaryIO, gzip.open(raw, "rb"))
    return raw


AHEAD = 128
"""Messages read ahead of those admitted: their event time is judged against these."""
BEHIND = 32
"""Event times admitted before them that are part of that judgement too."""
BATCH = 64
"""Messages admitted together, under one estimate of the event time around them."""


def replay(pipeline: Pipeline, path: Path, log: RejectionLog) -> None:
    """Feed every line of ``path`` to the pipeline, logging rejections with file:line.

    Lines are decoded when read and admitted ``AHEAD`` lines later, ``BATCH`` at a time, so
    that their times can be judged against the events after them: an event stamped more
    than ``[sessions] max_future`` after both the median time of the ``AHEAD`` messages read
    after its batch and the newest of the ``BEHIND`` events admitted before it is rejected
    as ``future_timestamp`` (the last ``AHEAD`` of a file are admitted one at a time, each
    against those after it). One clock, however wrong, cannot move that median; a log that
    resumes after a long pause is judged by the events after the pause.
    """
    read, source = pipeline.read, str(path)
    held: list[tuple[int, Read]] = []
    times: list[float] = []  # of the messages held
    behind: deque[float] = deque(maxlen=BEHIND)
    number = 0
    with open_events(path) as stream:
        for line in stream:  # the line ending is JSON whitespace: no need to strip it
            number += 1
            result = read(line)
            if result is None:
                continue
            if type(result) is Rejection:
                log.record(result, f"{source}:{number}")
                continue
            held.append((number, result))
            times.append(result.time if type(result) is JudgedMessage else result[0][0])
            if len(held) == AHEAD + BATCH:
                _admit(pipeline, held, times, BATCH, behind, log, source)
        while held:
            _admit(pipeline, held, times, 1, behind, log, source)
    pipeline.sessions.horizon = float("inf")


def _admit(
    pipeline: Pipeline, held: list[tuple[int, Read]], times: list[float], count: int,
    behind: deque[float], log: RejectionLog, source: str,
) -> None:
    """Admit the first ``count`` messages held, judged against those after them."""
    sessions, admit = pipeline.sessions, pipeline.admit
    ahead = sorted(times[count:])
    median = ahead[len(ahead) // 2] if ahead else float("-inf")
    horizon = max(median, max(behind, default=float("-inf")))
    sessions.horizon = horizon + pipeline.config.sessions.max_future if horizon > float(
        "-inf"
    ) else float("inf")  # a lone event: nothing to judge it by
    for (position, item), time in zip(held[:count], times[:count], strict=True):
        rejection = admit(item)
        if rejection is not None:
            log.record(rejection, f"{source}:{position}")
        elif item.__class__ is not JudgedMessage:
            behind.append(time)
    del held[:count], times[:count]


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _online_entry(counters: OnlineCounters, classes: list[int]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        name: sum(getattr(counters, name)[c] for c in classes) for name in OnlineCounters.COUNTS
    }
    entry["ctr"] = _ratio(entry["clicked_queries"], entry["queries"])
    entry["zero_result_rate"] = _ratio(entry["zero_result_queries"], entry["queries"])
    entry["abandonment_rate"] = _ratio(entry["abandoned_sessions"], entry["sessions"])
    entry["session_success_rate"] = _ratio(entry["successful_sessions"], entry["sessions"])
    return entry


def report(pipeline: Pipeline) -> dict[str, Any]:
    """The replay report: online and offline results overall and per class, rejections."""
    names = pipeline.classes.names
    online = {"all": _online_entry(pipeline.counters, list(range(len(names))))}
    for klass, name in enumerate(names):
        online[name] = _online_entry(pipeline.counters, [klass])
    rejected = {r.value: n for r, n in pipeline.health.rejected.items() if n}
    return {
        "online": online,
        "offline": _offline(pipeline),
        "regressions": _regressions(pipeline),
        "rejected": rejected,
    }


def _offline(pipeline: Pipeline) -> dict[str, Any]:
    """All judged-sample queries replayed: their number and mean per measure, by class."""
    judged = pipeline.judged
    out: dict[str, Any] = {}
    names = pipeline.classes.names
    for klass, name in [(OVERALL, ALL), *enumerate(names)]:
        count = judged.judged_queries.get(klass, 0)
        if klass != OVERALL and count == 0:
            continue
        entry: dict[str, Any] = {"judged_queries": count}
        for m, spec in enumerate(judged.specs):
            total, n = judged.totals.get((klass, m), (0.0, 0))
            entry[str(spec)] = total / n if n else None
        out[name] = entry
    return out


def _regressions(pipeline: Pipeline) -> dict[str, Any]:
    """The latest completed sample against its baseline, per class and measure."""
    judged = pipeline.judged
    names = pipeline.classes.names
    out: dict[str, dict[str, Any]] = {}
    for (klass, m), verdict in sorted(judged.verdicts.items()):
        name = ALL if klass == OVERALL else names[klass]
        comparison = verdict.comparison
        out.setdefault(name, {})[str(judged.specs[m])] = {
            "sample": verdict.sample_id,
            "baseline": verdict.baseline_id,
            "shared_queries": comparison.shared,
            "delta": comparison.delta if comparison.shared else None,
            "p_permutation": comparison.p_permutation if comparison.shared else None,
            "p_t": comparison.p_t if comparison.shared else None,
            "regression": verdict.regression,
        }
    return out


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
    """Rows as fixed-width columns, the first left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                  enumerate(zip(row, widths, strict=True))) + "\n"
        for row in rows
    )


def format_table(result: dict[str, Any]) -> str:
    """A fixed-width table: one row per class, then ``all``; rejections below."""
    rows = [["class", *(title for _, title, _ in TABLE_COLUMNS)]]
    online = result["online"]
    for name in [*sorted(n for n in online if n != "all"), "all"]:
        entry = online[name]
        rows.append([name, *(
            "-" if entry[key] is None else fmt.format(entry[key]) for key, _, fmt in TABLE_COLUMNS
        )])
    text = _columns(rows)
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
        rows = [["class", "measure", "sample", "baseline", "shared", "delta", "p", "regression"]]
        for name in sorted(regressions):
            for measure, v in regressions[name].items():
                rows.append([
                    name, measure, v["sample"], v["baseline"], str(v["shared_queries"]),
                    "-" if v["delta"] is None else f"{v['delta']:+.4f}",
                    "-" if v["p_permutation"] is None else f"{v['p_permutation']:.4f}",
                    {True: "REGRESSION", False: "no", None: "too few queries"}[v["regression"]],
                ])
        text += _columns(rows)
    rejected = result["rejected"]
    if rejected:
        text += "\nrejected: " + ", ".join(f"{k} {v}" for k, v in sorted(rejected.items()))
        text += "\n"
    return text
