"""``searchmon replay``: the pipeline over JSONL files (plain, gzip or ``_bulk``), in event
time order, then the judgment files."""

from __future__ import annotations

import logging
from pathlib import Path

from monitor.config import Config
from monitor.core.admission import OutOfOrder, feed
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.inputs.files import lines, sorted_lines

logger = logging.getLogger(__name__)


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
