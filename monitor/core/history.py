"""The recent past of the online counters, by event time: what the status page's "last hour"
and "the same hour a week earlier" are made of.

Counters only grow, so what happened in a period is the counts at its end minus the counts at
its start. ``History`` keeps the counts per slice as of the newest event time, once per
``STEP`` of event time (the first export whose newest event time enters a step), for ``SPAN``:
at most ``SPAN / STEP + 1`` samples (2,305), whatever the traffic. ``recent`` takes the last
hour from it (now: the export's newest event time, so a replay has one too), and the same hour
a week earlier, or the hour before when the history does not reach back a week.

A difference is unknown (None) where it would be negative (a replica's counters can drop
when partitions move) and for a counter a sample predates; a slice a sample predates had
counted nothing then.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from monitor.core.export import Export, Slice
from monitor.core.online import OnlineCounters
from monitor.core.snapshots import Float, Int, require, same_lengths

STEP = 300.0
"""Seconds of event time per sample."""
SPAN = 8 * 86400.0
"""Seconds of event time kept: a week and an hour back, and a margin."""
HOUR = 3600.0
WEEK = 7 * 86400.0
_WIDTH = len(OnlineCounters.COUNTS)


@dataclass(frozen=True)
class Point:
    """The counters as of an event time."""

    time: float
    counts: Mapping[Slice, tuple[int, ...]]
    """Per slice, in ``OnlineCounters.COUNTS`` order (fewer: the later ones unknown); a slice
    not here had counted nothing."""

    def count(self, slice: Slice, index: int) -> int | None:
        counts = self.counts.get(slice)
        if counts is None:
            return 0
        return counts[index] if index < len(counts) else None


def point(figures: Export) -> Point | None:
    """The counters of ``figures`` as of its newest event time (None: no event yet)."""
    if figures.newest is None:
        return None
    return Point(figures.newest, {part.slice: tuple(part.counts) for part in figures.slices})


@dataclass(frozen=True)
class Period:
    """What was counted between two points."""

    start: Point
    end: Point

    def counts(self, slices: Collection[Slice]) -> dict[str, int | None]:
        """The counters added over ``slices``, by name: None where unknown, or where one of
        the slices' counter went down."""
        added: dict[str, int | None] = {}
        for index, name in enumerate(OnlineCounters.COUNTS):
            total: int | None = 0
            for values in slices:
                later, earlier = self.end.count(values, index), self.start.count(values, index)
                if total is None or later is None or earlier is None or later < earlier:
                    total = None
                    break
                total += later - earlier
            added[name] = total
        return added


@dataclass(frozen=True)
class Recent:
    """The periods the status page shows (None: the history does not reach back so far)."""

    hour: Period | None = None
    """The last hour: from the sample an hour before the newest event (or the oldest sample,
    when the history is younger) to the newest event."""
    earlier: Period | None = None
    """The same hour a week earlier when the history reaches back that far (``week``), else
    the hour before ``hour`` (from the sample two hours before the newest event)."""
    week: bool = False


@dataclass(frozen=True)
class HistoryState:
    slices: list[list[str]]
    """Every slice the samples hold, in the order first seen."""
    times: list[Float]
    """Per sample, oldest first: the newest event time its counts are as of."""
    counts: list[list[list[Int]]]
    """Per sample, per slice of ``slices`` (one first seen after the sample is absent): the
    counters in ``OnlineCounters.COUNTS`` order (fewer when written before a counter was
    added)."""


@dataclass(frozen=True)
class Sample:
    time: float
    width: int
    """Counters per slice (``OnlineCounters.COUNTS`` then)."""
    values: array[int]
    """Slice after slice (in ``History.slices`` order), ``width`` counters each."""


@dataclass
class History:
    """The counters per slice, one sample per ``STEP`` of event time over ``SPAN``."""

    slices: list[Slice] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    """The samples' times, for lookups."""

    def __len__(self) -> int:
        return len(self.samples)

    def due(self, newest: float | None) -> bool:
        """Whether an export of newest event time ``newest`` would be kept: it is in a step
        after the newest sample's."""
        if newest is None or not math.isfinite(newest):
            return False
        return not self.times or _step(newest) > _step(self.times[-1])

    def due_from(self) -> float:
        """An event time before which no export is ``due`` (a check per event costs one
        comparison)."""
        return (_step(self.times[-1]) + 1) * STEP if self.times else float("-inf")

    def observe(self, figures: Export) -> None:
        """Keep the counters of ``figures`` if ``due``, and forget those older than
        ``SPAN`` before it."""
        newest = figures.newest
        if newest is None or not self.due(newest):
            return
        counts = {part.slice: part.counts for part in figures.slices}
        known = set(self.slices)
        self.slices.extend(s for s in counts if s not in known)
        values = array("q")
        for known_slice in self.slices:
            row = counts.get(known_slice, ())
            values.extend(row[i] if i < len(row) else 0 for i in range(_WIDTH))
        self._append(Sample(newest, _WIDTH, values))

    def at(self, time: float) -> Point | None:
        """The counters as of ``time``: the newest sample not after it (None: none)."""
        found = bisect_right(self.times, time)
        return self._point(self.samples[found - 1]) if found else None

    def oldest(self) -> Point | None:
        return self._point(self.samples[0]) if self.samples else None

    def clear(self) -> None:
        """Forget every sample (a replay that starts over)."""
        self.slices.clear()
        self.samples.clear()
        self.times.clear()

    def snapshot(self) -> HistoryState:
        counts = []
        for sample in self.samples:
            rows = len(sample.values) // sample.width
            counts.append([
                list(sample.values[r * sample.width:(r + 1) * sample.width]) for r in range(rows)
            ])
        return HistoryState([list(s) for s in self.slices], list(self.times), counts)

    @staticmethod
    def restore(state: HistoryState) -> History:
        """The history of ``state``; ``StateError`` unless its parts fit together."""
        same_lengths("history", state.times, state.counts)
        slices = [tuple(s) for s in state.slices]
        require(len(set(slices)) == len(slices), "history: a slice twice")
        require(all(s for s in slices), "history: a slice without labels")
        history = History(slices)
        for time, rows in zip(state.times, state.counts, strict=True):
            require(len(rows) <= len(slices), "history: a sample of unknown slices")
            widths = {len(row) for row in rows}
            require(len(widths) <= 1 and widths <= set(range(1, _WIDTH + 1)),
                    "history: counters not of this version")
            require(not history.times or _step(time) > _step(history.times[-1]),
                    "history: samples not one per step, oldest first")
            width = widths.pop() if widths else _WIDTH
            history._append(Sample(time, width, array("q", (v for row in rows for v in row))))
        return history

    def _append(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.times.append(sample.time)
        stale = bisect_right(self.times, sample.time - SPAN)
        del self.samples[:stale], self.times[:stale]

    def _point(self, sample: Sample) -> Point:
        width = sample.width
        return Point(sample.time, {
            values: tuple(sample.values[r * width:(r + 1) * width])
            for r, values in enumerate(self.slices[:len(sample.values) // width])
        })


def recent(history: History, figures: Export) -> Recent:
    """The last hour as of ``figures`` and the period it is compared with."""
    now = point(figures)
    if now is None:
        return Recent()
    start = history.at(now.time - HOUR)
    if start is None:
        start = history.oldest()
    if start is None or start.time >= now.time:
        return Recent()
    hour = Period(start, now)
    week_start, week_end = history.at(now.time - WEEK - HOUR), history.at(now.time - WEEK)
    if week_start is not None and week_end is not None:
        return Recent(hour, Period(week_start, week_end), week=True)
    before = history.at(now.time - 2 * HOUR)
    if before is not None:
        return Recent(hour, Period(before, start))
    return Recent(hour)


def _step(time: float) -> int:
    return math.floor(time / STEP)
