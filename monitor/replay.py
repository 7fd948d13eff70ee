"""``searchmon replay``: the pipeline over JSONL files, then a report (docs/reference/cli.md)."""

from __future__ import annotations

import gc
import gzip
import heapq
import itertools
import json
import logging
import struct
import tempfile
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

import msgspec

from monitor.classes import ALL
from monitor.config import Config
from monitor.events import Rejection
from monitor.judged import OVERALL
from monitor.online import OnlineCounters
from monitor.pipeline import JudgedMessage, Pipeline, Read, RejectionLog
from monitor.queryreport import query_report

GZIP_MAGIC = b"\x1f\x8b"
logger = logging.getLogger(__name__)


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
BATCH = 64
"""Messages admitted together, under one estimate of the event time around them."""


BULK_ACTIONS = tuple(
    ("{" + space + '"' + action + '"').encode()
    for action in ("index", "create", "update", "delete") for space in ("", " ")
)
"""How the action lines of an OpenSearch ``_bulk`` export begin."""
RUN_LINES = 200_000
"""Lines sorted in memory at a time when an input must be sorted by event time; longer
inputs are sorted in runs of this many lines, kept in temporary files, then merged."""

Line = tuple[str, int, bytes, str | None]
"""A line to replay: its file, its number there, its bytes, and the ``_bulk`` index it was
exported from (None outside ``_bulk`` exports)."""


class OutOfOrder(Exception):
    """An input's events are further apart from event time order than the allowed lateness."""


def replay(pipeline: Pipeline, path: Path, log: RejectionLog) -> None:
    """Feed every line of ``path`` to the pipeline in file order (see ``feed``)."""
    feed(pipeline, lines(path), log)


def replay_files(
    config: Config, events: list[Path], judgments: list[Path], log: RejectionLog
) -> Pipeline:
    """The pipeline over the event files, in event time order whatever the files' order,
    then the judgment files; every session closed, every sample completed.

    The event files are streamed as they are when they are in order within the allowed
    lateness (then that gives the same result as sorting them). At the first event further
    behind than that (an export ordered by index, queries first, say), the replay starts
    again on all the event files sorted by event time, in bounded memory (runs of
    ``RUN_LINES`` lines in temporary files, merged), and says so in the log.
    """
    pipeline = Pipeline(config)
    attempt = RejectionLog(log.limit, deferred=True)
    try:
        for path in events:
            feed(pipeline, lines(path), attempt, in_order=True)
    except OutOfOrder as where:
        logger.info("%s: not in event time order; replaying the events sorted by event time",
                    where)
        pipeline = Pipeline(config)
        feed(pipeline, sorted_lines(events), log)
    else:
        attempt.flush_into(log)
    if judgments:
        pipeline.offline_tick(pipeline.sessions.newest, False)
    for number, path in enumerate(judgments, 1):
        feed(pipeline, lines(path), log)
        # the same rule as the daemon's after each batch: with the last file read, no
        # judgment waits any more
        pipeline.offline_tick(pipeline.sessions.newest, number == len(judgments))
    if not judgments:
        pipeline.offline_tick(pipeline.sessions.newest, True)
    pipeline.close()
    return pipeline


def lines(path: Path) -> Iterator[Line]:
    """The lines of a file as they are. A file whose first line is a ``_bulk`` action is
    a ``_bulk`` export: its action lines become the hint of the document line after them (a
    ``delete`` action has none)."""
    source = str(path)
    with open_events(path) as stream:
        first = stream.readline()
        if not first:
            return
        if first.startswith(BULK_ACTIONS) and _bulk_action(first) is not None:
            yield from _bulk_lines(source, first, stream)
            return
        yield source, 1, first, None
        yield from ((source, number, line, None) for number, line in enumerate(stream, 2))


def _bulk_lines(source: str, first: bytes, stream: BinaryIO) -> Iterator[Line]:
    hint: str | None = None
    expect_document = False
    for number, line in enumerate(itertools.chain([first], stream), 1):
        if line.startswith(BULK_ACTIONS) and not expect_document:
            action = _bulk_action(line)
            if action is not None:
                kind, hint = action
                expect_document = kind != "delete"
                continue
        if expect_document and hint is not None and line.startswith(b'{"doc"'):
            line = _unwrap_update(line)
        yield source, number, line, hint
        expect_document = False


def _bulk_action(line: bytes) -> tuple[str, str | None] | None:
    """(action, index) of a ``_bulk`` action line, or None when it is not one."""
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):  # the document line then says what is wrong
        return None
    if not isinstance(parsed, dict) or len(parsed) != 1:
        return None
    (kind, meta), = parsed.items()
    if not isinstance(meta, dict):
        return None
    index = meta.get("_index")
    return kind, index if isinstance(index, str) else None


def _unwrap_update(line: bytes) -> bytes:
    """The partial document of a ``_bulk`` update line (``{"doc": {...}}``)."""
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):  # the document line then says what is wrong
        return line
    if isinstance(parsed, dict) and isinstance(parsed.get("doc"), dict):
        return json.dumps(parsed["doc"]).encode()
    return line


def sorted_lines(paths: list[Path]) -> Iterator[Line]:
    """Every line of ``paths`` in event time order (then in file order), in bounded memory.

    A line's time is read cheaply (its ``timestamp`` only); a line without a readable time
    sorts first (it is rejected when fed, with its position). Runs of ``RUN_LINES`` lines are
    sorted in memory; longer inputs spill each run to a temporary file and merge them."""
    sources = [str(path) for path in paths]
    index = {source: number for number, source in enumerate(sources)}
    with tempfile.TemporaryDirectory(prefix="searchmon-sort-") as scratch:
        runs: list[Iterator[tuple[float, int, int, int, bytes, str | None]]] = []
        run: list[tuple[float, int, int, int, bytes, str | None]] = []
        sequence = 0
        for path in paths:
            for source, number, line, hint in lines(path):
                sequence += 1
                run.append((sort_time(line), sequence, index[source], number, line, hint))
                if len(run) == RUN_LINES:
                    run.sort()
                    runs.append(_spill(run, Path(scratch) / f"run-{len(runs)}"))
                    run = []
        run.sort()
        merged = heapq.merge(*runs, iter(run)) if runs else iter(run)
        for _, _, file_number, number, line, hint in merged:
            yield sources[file_number], number, line, hint


def _spill(
    run: list[tuple[float, int, int, int, bytes, str | None]], path: Path
) -> Iterator[tuple[float, int, int, int, bytes, str | None]]:
    """Write a sorted run to ``path``; return a reader of it (in the same order)."""
    with path.open("wb") as out:
        for time, sequence, file_number, number, line, hint in run:
            hint_bytes = (hint or "").encode()
            out.write(_RECORD.pack(time, sequence, file_number, number, len(line),
                                   len(hint_bytes)))
            out.write(line)
            out.write(hint_bytes)
    return _read_run(path)


_RECORD = struct.Struct("<dqiqii")


def _read_run(path: Path) -> Iterator[tuple[float, int, int, int, bytes, str | None]]:
    with path.open("rb") as run:
        while header := run.read(_RECORD.size):
            time, sequence, file_number, number, length, hint_length = _RECORD.unpack(header)
            line = run.read(length)
            hint = run.read(hint_length).decode() or None
            yield time, sequence, file_number, number, line, hint


class _Stamped(msgspec.Struct):
    timestamp: int | str | None = None


_STAMP = msgspec.json.Decoder(_Stamped)


def sort_time(line: bytes) -> float:
    """The event time of a line for sorting (-inf when it has none it can be sorted by):
    epoch milliseconds, or an ISO 8601 string (one without an offset read as UTC here)."""
    try:
        stamp = _STAMP.decode(line).timestamp
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        return float("-inf")  # rejected when fed, with its position
    if isinstance(stamp, int):
        return stamp / 1000.0
    if stamp is None:
        return float("-inf")
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return float("-inf")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.timestamp()
    except (OverflowError, ValueError):
        return float("-inf")


def feed(
    pipeline: Pipeline, lines: Iterable[Line], log: RejectionLog, in_order: bool = False
) -> None:
    """Feed ``lines`` to the pipeline, logging rejections with file:line; with ``in_order``,
    raise ``OutOfOrder`` at the first event further behind the newest one than the allowed
    lateness.

    An event stamped no later than ``[sessions] max_future`` after the newest event admitted
    so far is admitted at once. Any other is judged against the events after it: it waits,
    with every line after it, until ``AHEAD`` more have been read; then the waiting ones are
    admitted ``BATCH`` at a time, and one stamped more than ``max_future`` after both the
    median time of the ``AHEAD`` messages read after its batch and the newest event admitted
    before is rejected as ``future_timestamp`` (at the end of the input, one at a time,
    each against those after it). One clock, however wrong, cannot move that median; a log
    that resumes after a long pause is judged by the events after the pause, and admitted.
    """
    read, admit, sessions = pipeline.read, pipeline.admit, pipeline.sessions
    ahead = pipeline.config.sessions.max_future
    held: list[tuple[str, int, Read]] = []
    times: list[float] = []  # of the messages held
    limit = float("-inf")  # what is admitted at once: up to the newest admitted + max_future
    sessions.horizon = float("inf")
    for source, number, line, hint in lines:  # a line ending is JSON whitespace: kept
        result = read(line, hint)
        if result is None:
            continue
        if type(result) is Rejection:
            log.record(result, f"{source}:{number}")
            continue
        time = result.time if type(result) is JudgedMessage else result[0][0]
        if not held and time <= limit:
            rejection = admit(result)
            if rejection is not None:
                log.record(rejection, f"{source}:{number}")
            elif time + ahead > limit:
                limit = time + ahead
            if in_order and sessions.behind:
                raise OutOfOrder(f"{source}:{number}")
            continue
        held.append((source, number, result))
        times.append(time)
        if len(held) == AHEAD + BATCH:
            limit = _admit(pipeline, held, times, BATCH, limit, log)
            if max(times) <= limit:  # nothing is ahead any more: admitted at once
                limit = _admit(pipeline, held, times, len(held), limit, log)
            if in_order and sessions.behind:
                raise OutOfOrder(f"{source}:{number}")
    while held:
        limit = _admit(pipeline, held, times, 1, limit, log)
    if in_order and sessions.behind:
        raise OutOfOrder("the end of the input")
    sessions.horizon = float("inf")


def _admit(
    pipeline: Pipeline, held: list[tuple[str, int, Read]], times: list[float], count: int,
    limit: float, log: RejectionLog,
) -> float:
    """Admit the first ``count`` messages held, judged against those after them and against
    ``limit`` (the newest event admitted before, plus max_future); returns the new limit."""
    sessions, admit = pipeline.sessions, pipeline.admit
    ahead = pipeline.config.sessions.max_future
    later = sorted(times[count:])
    horizon = max(later[len(later) // 2] + ahead if later else float("-inf"), limit)
    sessions.horizon = float("inf") if horizon == float("-inf") else horizon  # a lone event
    for (source, number, item), time in zip(held[:count], times[:count], strict=True):
        rejection = admit(item)
        if rejection is not None:
            log.record(rejection, f"{source}:{number}")
        elif time + ahead > limit:
            limit = time + ahead
    del held[:count], times[:count]
    sessions.horizon = float("inf")
    return limit


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
    """The replay report: online and offline results overall and per class, rejections,
    the query lists."""
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
        "unmatched_clicks": pipeline.sessions.unmatched_clicks,
        "ignored_actions": pipeline.health.ignored_actions,
        "queries": query_report([pipeline], pipeline, pipeline.config),
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
    if result["unmatched_clicks"] or result["ignored_actions"]:
        text += (f"\nclicks on a query not seen in their session: {result['unmatched_clicks']}"
                 f"; UBI actions ignored: {result['ignored_actions']}\n")
    return text
