"""Implicit judgments in the daemon: labels from clicks between human samples.

Every ``[implicit] interval`` of event time, a partition's pipeline fits the configured click
model (``monitor.offline.clicks``) on the searches of the interval just ended: what each
showed and what was clicked, keyed as the query lists key a text, queries under the
k-anonymity floor left out. The pairs shown at least ``min_impressions`` times get a graded
label by the model's thresholds. The labels go to the judged state, which keeps them beside
the human qrels: a live query whose key has implicit labels is scored against them and
counted under ``source="implicit"`` in the time windows and score histograms, as a live
query joined with human qrels is under ``source="live"``. So on-call has an offline-style
measure between human samples.

The searches of an interval are held in memory only (a restart starts the interval's reading
over; the labels of the last fit are in the judged state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from monitor.config import ImplicitConfig
from monitor.inputs.clicklog import ClickLogReader, TooManySearches
from monitor.inputs.events import Live
from monitor.offline.clicks import MODELS, THRESHOLDS, kept, label


@dataclass(frozen=True)
class ImplicitLabels:
    """The labels of one fit, per query key and document, for the judged state."""

    time: float
    """The end of the interval fitted (event time)."""
    labels: dict[str, dict[str, int]]
    shown: int
    """The results shown in the interval, the model's input (for the log)."""
    left_out: int
    """Events of the interval's searches past ``max_searches``, left out."""


class Implicit:
    """Reads a partition's accepted events, fitting a click model every ``interval``."""

    def __init__(self, config: ImplicitConfig, min_sessions: int,
                 key: Callable[[str], str]) -> None:
        self.config = config
        self.min_sessions = min_sessions
        self.key = key
        self.model = MODELS[config.model]
        self.thresholds = tuple(config.thresholds) or THRESHOLDS[config.model]
        self.due = float("-inf")
        """The end of the interval being read (event time)."""
        self.fits = 0
        self._left_out = 0
        self._reader = self._new_reader()

    def _new_reader(self) -> ClickLogReader:
        return ClickLogReader(self.min_sessions, self.key, self.config.max_searches)

    def add(self, time: float, event: Live) -> ImplicitLabels | None:
        """An accepted query, click or impression at event ``time``; the labels of the
        interval before it, when it is the first event past that interval's end."""
        fitted = None
        if time >= self.due:
            interval = self.config.interval
            if self.due > float("-inf"):
                fitted = self.fit(self.due)
            self.due = (time // interval + 1) * interval
        try:
            self._reader.add((time, event))
        except TooManySearches:
            self._left_out += 1  # past max_searches: the interval's further searches
        return fitted

    def fit(self, end: float) -> ImplicitLabels:
        """The labels of the searches read so far; the reading starts over."""
        reader, self._reader = self._reader, self._new_reader()
        clicks = reader.finish().public(self.min_sessions)
        estimate = self.model(clicks)
        chosen = np.flatnonzero(kept(estimate, self.config.min_impressions))
        grades = label(estimate.score[chosen], self.thresholds)
        labels: dict[str, dict[str, int]] = {}
        for pair, grade in zip(chosen.tolist(), grades.tolist(), strict=True):
            query = estimate.queries[int(estimate.query[pair])]
            labels.setdefault(query, {})[estimate.docs[int(estimate.doc[pair])]] = int(grade)
        self.fits += 1
        left_out, self._left_out = self._left_out, 0
        return ImplicitLabels(end, labels, len(clicks.search), left_out)
