"""Admission of a stream of lines into the pipeline by event time, for inputs read whole
(``searchmon replay``): what counts as the future when the input is a log from the past."""

from __future__ import annotations

from collections.abc import Iterable

from monitor.core.pipeline import Pipeline, Read, RejectionLog
from monitor.inputs.events import JudgedMessage, Rejection
from monitor.inputs.files import Line

AHEAD = 128
"""Messages read ahead of those admitted: their event time is judged against these."""
BATCH = 64
"""Messages admitted together, under one estimate of the event time around them."""


class OutOfOrder(Exception):
    """An input's events are further apart from event time order than the allowed lateness."""


def feed(
    pipeline: Pipeline, lines: Iterable[Line], log: RejectionLog, in_order: bool = False,
    now: float | None = None,
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
    The last events of the input have none after them: with ``now`` (the wall clock, as
    ``run`` judges live events), they are judged against it instead, so a log whose last
    event follows a pause loses nothing (and nothing is after it to be made late).
    """
    sessions = pipeline.sessions
    ahead = pipeline.config.sessions.max_future
    held: list[tuple[str, int, Read]] = []
    times: list[float] = []  # of the messages held
    limit = float("-inf")  # what is admitted at once: up to the newest admitted + max_future
    sessions.horizon = float("inf")
    for source, number, line, hint in lines:  # a line ending is JSON whitespace: kept
        result = pipeline.read(line, hint)
        if result is None:
            continue
        if type(result) is Rejection:
            log.record(result, f"{source}:{number}")
            continue
        time = result.time if type(result) is JudgedMessage else result[0][0]
        if not held and time <= limit:
            rejection = pipeline.admit(result)
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
            limit = _admit(pipeline, held, times, BATCH, limit, log, now)
            if max(times) <= limit:  # nothing is ahead any more: admitted at once
                limit = _admit(pipeline, held, times, len(held), limit, log, now)
            if in_order and sessions.behind:
                raise OutOfOrder(f"{source}:{number}")
    while held:
        limit = _admit(pipeline, held, times, 1, limit, log, now)
    if in_order and sessions.behind:
        raise OutOfOrder("the end of the input")
    sessions.horizon = float("inf")


def _admit(
    pipeline: Pipeline, held: list[tuple[str, int, Read]], times: list[float], count: int,
    limit: float, log: RejectionLog, now: float | None = None,
) -> float:
    """Admit the first ``count`` messages held, judged against those after them and against
    ``limit`` (the newest event admitted before, plus max_future); returns the new limit."""
    sessions = pipeline.sessions
    ahead = pipeline.config.sessions.max_future
    later = sorted(times[count:])
    around = (
        later[len(later) // 2] if later else now if now is not None else float("-inf")
    )
    horizon = max(around + ahead, limit)
    sessions.horizon = float("inf") if horizon == float("-inf") else horizon  # a lone event
    for (source, number, item), time in zip(held[:count], times[:count], strict=True):
        rejection = pipeline.admit(item)
        if rejection is not None:
            log.record(rejection, f"{source}:{number}")
        elif time + ahead > limit:
            limit = time + ahead
    del held[:count], times[:count]
    sessions.horizon = float("inf")
    return limit
