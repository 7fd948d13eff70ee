"""``searchmon replay``: the pipeline over JSONL files (plain, gzip or ``_bulk``), in event
time order, then the judgment files."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from monitor.cli.common import (
    EXIT_OK,
    HELD_TO_THE_END,
    UsageError,
    load,
    setup_logging,
    wait_for_signal,
)
from monitor.config import Config
from monitor.core.admission import OutOfOrder, feed
from monitor.core.export import Export, export
from monitor.core.history import History
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.inputs.files import Line, Sorting, lines, sorted_lines
from monitor.inputs.timestamps import zone

if TYPE_CHECKING:
    from monitor.serve.openmetrics import Steps

logger = logging.getLogger(__name__)


def replay(pipeline: Pipeline, path: Path, log: RejectionLog) -> None:
    """Feed every line of ``path`` to the pipeline in file order (see ``feed``)."""
    feed(pipeline, lines(path), log)


def replay_files(
    config: Config, events: list[Path], judgments: list[Path], log: RejectionLog
) -> Pipeline:
    """The pipeline over the event files, in event time order whatever the files' order,
    then the judgment files; every session closed, every sample completed."""
    pipeline = replay_input(config, events, judgments, log)
    pipeline.close()
    return pipeline


class Sampler(Protocol):
    """What keeps exports as the events' time passes: ``History``, the steps of
    ``--report openmetrics --step`` (``monitor.serve.openmetrics.Steps``)."""

    def due_from(self) -> float: ...
    def due(self, newest: float | None) -> bool: ...
    def observe(self, figures: Export) -> None: ...
    def clear(self) -> None: ...


@dataclass(frozen=True)
class Samplers:
    """Several samplers fed the same exports: each keeps those due to it."""

    each: tuple[Sampler, ...]

    def due_from(self) -> float:
        return min(sampler.due_from() for sampler in self.each)

    def due(self, newest: float | None) -> bool:
        return any(sampler.due(newest) for sampler in self.each)

    def observe(self, figures: Export) -> None:
        for sampler in self.each:
            sampler.observe(figures)

    def clear(self) -> None:
        for sampler in self.each:
            sampler.clear()


def replay_input(
    config: Config, events: list[Path], judgments: list[Path], log: RejectionLog,
    history: Sampler | None = None,
) -> Pipeline:
    """``replay_files`` but for the sessions still open at the end of the input, which stay
    open (as in a daemon that read as far: ``close()`` ends them). With ``history``, the
    counters go into it as the events' time passes, as the daemon's exports do.

    The event files are streamed as they are when they are in order within the allowed
    lateness (then that gives the same result as sorting them). At the first event further
    behind than that (an export ordered by index, queries first, say), the replay starts
    again on all the event files sorted by event time, in bounded memory (runs of
    ``RUN_LINES`` lines in temporary files, merged), and says so in the log.
    """
    now = time.time()  # the last events of a log are judged against it (see ``feed``)
    pipeline = Pipeline(config)
    attempt = RejectionLog(log.limit, deferred=True)
    try:
        for path in events:
            feed(pipeline, sampled(lines(path), pipeline, history), attempt, in_order=True,
                 now=now)
    except OutOfOrder as where:
        logger.info("%s: not in event time order; replaying the events sorted by event time",
                    where)
        pipeline = Pipeline(config)
        if history is not None:
            history.clear()
        sorting = Sorting(zone(config.input.naive_timezone), zone(config.ubi.naive_timezone))
        feed(pipeline, sampled(sorted_lines(events, sorting), pipeline, history), log, now=now)
    else:
        attempt.flush_into(log)
    if judgments:
        pipeline.offline_tick(pipeline.sessions.newest, False)
    for number, path in enumerate(judgments, 1):
        feed(pipeline, lines(path), log, now=now)
        # the same rule as the daemon's after each batch: with the last file read, no
        # judgment waits any more
        pipeline.offline_tick(pipeline.sessions.newest, number == len(judgments))
    if not judgments:
        pipeline.offline_tick(pipeline.sessions.newest, True)
    return pipeline


def sampled(lines: Iterable[Line], pipeline: Pipeline, history: Sampler | None) -> Iterable[Line]:
    """``lines``, and before each the pipeline's counters into ``history`` when its newest
    event time entered a step of the history not yet sampled; without a history, ``lines``
    as they are (no layer per line)."""
    if history is None:
        return lines
    return _sampling(lines, pipeline, history)


def _sampling(lines: Iterable[Line], pipeline: Pipeline, history: Sampler) -> Iterator[Line]:
    sessions = pipeline.sessions
    due_from = history.due_from()
    for line in lines:
        if sessions.newest >= due_from and history.due(sessions.newest):
            history.observe(export(pipeline))
            due_from = history.due_from()
        yield line


def command(args: argparse.Namespace) -> int:
    from monitor.core.history import Recent, recent
    from monitor.core.pipeline import RejectionLog
    from monitor.run.tuning import tune_for_throughput
    from monitor.serve.report import format_json as format_replay_json
    from monitor.serve.report import format_table, report

    if args.step is not None and args.report != "openmetrics":
        raise UsageError("--step: only with --report openmetrics (it times the samples of "
                         "the exposition)")
    config = load(args.config)
    setup_logging(args, "info", config)
    rejections = RejectionLog(config.input.rejection_log_limit)
    tune_for_throughput()
    for path in [*args.events, *args.judgments]:
        if not os.access(path, os.R_OK) or path.is_dir():
            raise UsageError(f"cannot read {path}: not a readable file")
    history = History() if args.serve else None
    steps = None
    if args.step is not None:
        from monitor.serve.openmetrics import Steps

        steps = Steps(args.step)
    samplers = tuple(s for s in (history, steps) if s is not None)
    try:
        pipeline = replay_input(config, args.events, args.judgments, rejections,
                                Samplers(samplers) if samplers else None)
    except OSError as error:
        raise UsageError(f"cannot read {error.filename}: {error.strerror or error}") from None
    # the last hour as the daemon would show it: sessions count when they end, and those
    # still open at the end of the input end only now, all at once
    before_close = export(pipeline)
    last_hour = recent(history, before_close) if history is not None else Recent()
    if steps is not None:
        steps.observe(before_close)
    # every session and id the close forgets is freed with the process, not one at a time:
    # 3% of a replay of 380,000 lines
    sessions = pipeline.sessions
    HELD_TO_THE_END.append((sessions.open, sessions.seen, sessions.seen_before,
                            sessions.ended, sessions.ended_before))
    pipeline.close()
    # the query lists (a tenth of a second for a day of traffic) only where they are shown
    result = report(pipeline, lists=args.report == "json" or args.serve)
    if args.report == "openmetrics":
        write_openmetrics(export(pipeline), steps, sys.stdout)
    else:
        sys.stdout.write(format_replay_json(result) if args.report == "json"
                         else format_table(result))
    sys.stdout.flush()
    if args.serve:  # the HTTP server's modules (asyncio among them) only when serving
        import ssl

        from monitor.serve.page import Status
        from monitor.serve.queries import query_state
        from monitor.serve.routes import serve

        figures = export(pipeline)
        state = query_state([pipeline], pipeline, config)
        status = Status(lambda: figures, lambda: result["queries"], lambda: state,
                         recent=lambda: last_hour)
        try:
            server = serve(config.http, status)
        except (OSError, ssl.SSLError) as error:
            raise UsageError(f"cannot listen on {config.http.listen}: {error}") from None
        scheme = "https" if config.http.tls_certfile else "http"
        print(f"serving {scheme}://{config.http.listen}/ (status page), /queries and /metrics "
              "(Ctrl-C to stop)", file=sys.stderr)
        try:
            wait_for_signal()
        finally:
            server.close()
    return EXIT_OK


def write_openmetrics(closed: Export, steps: Steps | None, out: TextIO) -> None:
    """The OpenMetrics text of the closed state ``closed``; with ``steps``, the samples of
    every step, the closed state the last one's."""
    from monitor.serve.openmetrics import exposition

    if steps is None:
        out.write(exposition(closed))
        return
    steps.finish(closed)
    if steps.first is None:
        logger.warning("no event: no time to put samples at, the exposition is empty")
    else:
        logger.info("%d steps of %gs of event time from %s", steps.count, steps.step,
                    _utc(steps.first))
    steps.write(out)


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
