"""The OpenMetrics text of a replay: the families of ``/metrics`` as of the end of the input
(``replay --report openmetrics``), or at every step of event time over it (``--step``), each
sample with its timestamp, as ``promtool tsdb create-blocks-from openmetrics`` reads it to
backfill Prometheus.

Both render through ``ExportCollector``, so the families and their labels are those of the
daemon's ``/metrics`` (and of ``replay --serve``, which adds no family of its own: the
daemon's Kafka, checkpoint and process families describe a running process, not a log).

The steps (``Steps``) are the multiples of the step in epoch seconds:

- the first, at or before the first event, holds the state before any event;
- each later one, T, holds the export taken when the newest event time first reached T or
  passed it (``replay``'s sampling, between two lines: the event that did it is counted);
  every step a pause in the traffic skips holds the state after the pause's first event;
- the last, the first step after the newest event, holds the closed state (every session
  ended, every sample completed): the values ``--report openmetrics`` prints without steps.

Counters and histograms only grow, so a series of theirs first exported at a later step (a
query class first seen then) is 0 at every step before. A gauge is what it was at each step
(open sessions, the watermark, the judged means then), absent where it was not exported.

The output groups each family's samples, then each series' (one label set; a histogram's
buckets, count and sum are one point), in time order: families never interleave, nor do the
series of a family. What is kept until then is the rendered values per series, one run per
stretch of steps with the same values (a pause costs one), never a pipeline.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from monitor.core.export import Export
from monitor.serve.metrics import ExportCollector

ENCODE = choose_encoder("application/openmetrics-text")[0]
"""OpenMetrics 1.0 text, as ``/metrics`` answers a scrape that asks for it."""
EOF = "# EOF\n"
CUMULATIVE = frozenset({"counter", "histogram"})
"""Types whose values only grow: 0 before the step their series is first exported at."""
POINT_LABEL = {"histogram": "le", "gaugehistogram": "le", "summary": "quantile"}
"""The label that tells apart the samples of one point of a family of that type."""

FORMAT_VALUE: Callable[[float], str] = floatToGoString
"""A sample's value as the exposition writes it (Go's formatting)."""

Labels = tuple[tuple[str, str], ...]
Shape = tuple[tuple[str, Labels], ...]
"""The names and labels of a point's samples, in the collector's order."""
_Part = tuple["_Series", list[int]]


def exposition(figures: Export) -> str:
    """The OpenMetrics text of ``figures`` as ``/metrics`` serves it (no timestamps),
    ending with ``# EOF``."""
    return ENCODE(ExportCollector(lambda: figures)).decode()


class Steps:
    """The families of ``/metrics`` at every step of event time (see the module's docstring).

    A sampler of ``replay``: ``due_from``, ``due``, ``observe`` and ``clear`` as ``History``
    has them; then ``finish`` with the closed state and ``write``.
    """

    def __init__(self, step: float) -> None:
        if not step > 0:
            raise ValueError(f"a step must be positive, not {step!r}")
        self.step = step
        self._figures = Export()
        self._collector = ExportCollector(lambda: self._figures)
        self._families: dict[str, _Family] = {}
        self._origin: Export | None = None
        """The state before any event, until the first event places it in time."""
        self._first: int | None = None
        """Index (time / step) of the first step."""
        self._next: int | None = None
        """Index of the first step not sampled yet."""

    @property
    def first(self) -> float | None:
        """Event time of the first step (None: no event yet)."""
        return None if self._first is None else self._first * self.step

    @property
    def count(self) -> int:
        """Steps sampled so far."""
        return 0 if self._first is None or self._next is None else self._next - self._first

    def due_from(self) -> float:
        """An event time before which no export is ``due``."""
        return float("-inf") if self._next is None else self._next * self.step

    def due(self, newest: float | None) -> bool:
        """Whether an export of newest event time ``newest`` would be kept: the state before
        any event, then one whose newest event time reached a step not sampled yet."""
        if self._next is None:
            return self._origin is None or (newest is not None and math.isfinite(newest))
        return newest is not None and newest >= self._next * self.step

    def observe(self, figures: Export) -> None:
        """Keep ``figures`` for every step its newest event time reached and no export
        before had (none: it is not ``due``)."""
        newest = figures.newest
        if self._next is None:
            if newest is None:
                if self._origin is None:
                    self._origin = figures
                return
            first = math.floor(newest / self.step)
            self._first = first
            # without the state before any event, the first export stands for it
            self._record(figures if self._origin is None else self._origin, first, 1)
            self._origin = None
            self._next = first + 1
        if newest is None:
            return
        last = math.floor(newest / self.step)
        if last >= self._next:
            self._record(figures, self._next, last - self._next + 1)
            self._next = last + 1

    def finish(self, figures: Export) -> None:
        """Keep the closed state ``figures`` for the step after the newest event (nothing
        without an event: there is no time to put it at)."""
        self.observe(figures)
        if self._next is not None:
            self._record(figures, self._next, 1)
            self._next += 1

    def clear(self) -> None:
        """Forget every step (a replay that starts over)."""
        self._families.clear()
        self._origin = self._first = self._next = None

    def write(self, out: TextIO) -> None:
        """Every family's samples, each series' in time order, then ``# EOF``."""
        for family in self._families.values():
            out.write(family.header)
            for series in family.series.values():
                out.write("".join(self._lines(series)))
        out.write(EOF)

    def _lines(self, series: _Series) -> Iterable[str]:
        width = len(series.names)
        for run, (start, length) in enumerate(zip(series.starts, series.lengths, strict=True)):
            values = [FORMAT_VALUE(v) for v in series.values[run * width:(run + 1) * width]]
            for index in range(start, start + length):
                stamp = _timestamp(index * self.step)
                for name, value in zip(series.names, values, strict=True):
                    yield f"{name} {value} {stamp}\n"

    def _record(self, figures: Export, index: int, count: int) -> None:
        """The families of ``figures`` at ``count`` steps from the step ``index`` on."""
        self._figures = figures
        for metric in self._collector.collect():
            family = self._families.get(metric.name)
            if family is None:
                family = _Family(ENCODE(_Families([_like(metric, [])])).decode()
                                 .removesuffix(EOF), metric.type in CUMULATIVE)
                self._families[metric.name] = family
            samples = metric.samples
            # the samples are those of the step before (as a rule): their series are known
            names = [(s.name, s.labels) for s in samples]
            if names != family.names:
                family.layout = self._layout(family, metric, index)
                family.names = names
            values = [s.value for s in samples]
            for series, indexes in family.layout:
                series.add(index, count, [values[i] for i in indexes])

    def _layout(self, family: _Family, metric: Metric, index: int) -> list[_Part]:
        """The series of ``family`` that ``metric``'s samples are of, each with the indexes
        of its samples; a series not seen before is made (counters: 0 from the first step
        to ``index``)."""
        apart = POINT_LABEL.get(metric.type)
        points: dict[Labels, list[int]] = {}
        for number, sample in enumerate(metric.samples):
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != apart))
            points.setdefault(labels, []).append(number)
        new = [labels for labels in points if labels not in family.series]
        if new:
            names = iter(_names(metric, [metric.samples[i] for k in new for i in points[k]]))
            for labels in new:
                shape = _shape([metric.samples[i] for i in points[labels]])
                series = _Series(shape, tuple(next(names) for _ in shape))
                if family.cumulative and self._first is not None and index > self._first:
                    series.add(self._first, index - self._first, [0.0] * len(shape))
                family.series[labels] = series
        layout = []
        for labels, indexes in points.items():
            series = family.series[labels]
            shape = _shape([metric.samples[i] for i in indexes])
            if shape != series.shape:
                raise ValueError(f"{metric.name} {dict(labels)}: its samples changed from "
                                 f"{series.shape} to {shape}")
            layout.append((series, indexes))
        return layout


@dataclass
class _Series:
    """One series of a family over the steps: runs of steps with the same values."""

    shape: Shape
    names: tuple[str, ...]
    """Each sample's name and labels as the exposition writes them."""
    starts: array[int] = field(default_factory=lambda: array("q"))
    lengths: array[int] = field(default_factory=lambda: array("q"))
    values: array[float] = field(default_factory=lambda: array("d"))
    """``len(names)`` per run."""

    def add(self, index: int, count: int, values: Sequence[float]) -> None:
        width = len(self.names)
        if (self.starts and self.starts[-1] + self.lengths[-1] == index
                and self.values[-width:] == array("d", values)):
            self.lengths[-1] += count
            return
        self.starts.append(index)
        self.lengths.append(count)
        self.values.extend(values)


@dataclass
class _Family:
    header: str
    """``# HELP``, ``# TYPE`` (and ``# UNIT``) as the exposition writes them."""
    cumulative: bool
    series: dict[Labels, _Series] = field(default_factory=dict)
    names: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """The names and labels of the samples of the last export, in its order."""
    layout: list[_Part] = field(default_factory=list)
    """Their series, each with the indexes of its samples among them."""


class _Families(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def _like(metric: Metric, samples: list[Sample]) -> Metric:
    """A family of ``metric``'s name, help, type and unit with ``samples``."""
    copy = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    copy.samples = samples
    return copy


def _shape(samples: list[Sample]) -> Shape:
    return tuple((s.name, tuple(sorted(s.labels.items()))) for s in samples)


def _names(metric: Metric, samples: list[Sample]) -> list[str]:
    """The name and labels of each of ``samples`` as the exposition writes them."""
    bare = [s._replace(value=0.0, timestamp=None, exemplar=None) for s in samples]
    text = ENCODE(_Families([_like(metric, bare)])).decode()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(lines) == len(samples), (metric.name, lines)
    return [line.rsplit(" ", 1)[0] for line in lines]


def _timestamp(seconds: float) -> str:
    """Epoch seconds to the millisecond (Prometheus's resolution)."""
    millis = round(seconds * 1000)
    whole, rest = divmod(millis, 1000)
    return f"{whole}.{rest:03d}".rstrip("0") if rest else str(whole)
