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
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import numpy as np
else:
    from monitor.lazy import numpy as np

from monitor.config import ImplicitConfig
from monitor.inputs.clicklog import ClickLogReader, TooManySearches
from monitor.inputs.events import ClickEvent, ImpressionEvent, Live
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
    unmatched: int = 0
    """Clicks read in the interval whose search it did not read (before it, or a click
    more than ``GRACE`` after the end of its search's interval): left out."""


GRACE = 300.0
"""Seconds of event time a fitted interval waits after its end (at most the interval): a
click or an impression of one of its searches that comes after the end, within them, still
counts there (a search just before the end has its clicks just after)."""


class Implicit:
    """Reads a partition's accepted events, fitting a click model every ``interval``: the
    searches of an interval, with their clicks and impressions up to ``GRACE`` after its end
    (those of later searches go to the next interval)."""

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
        self._ended: ClickLogReader | None = None
        """The interval before, ended at ``_ended_at`` and not fitted yet: it takes the
        clicks and impressions of its searches until ``GRACE`` after its end."""
        self._ended_at = float("-inf")
        self._grace = min(GRACE, config.interval)

    def _new_reader(self) -> ClickLogReader:
        return ClickLogReader(self.min_sessions, self.key, self.config.max_searches)

    def add(self, time: float, event: Live) -> ImplicitLabels | None:
        """An accepted query, click or impression at event ``time``; the labels of the
        interval before, when it is the first event ``GRACE`` past that interval's end."""
        fitted = None
        if self._ended is not None and time >= self._ended_at + self._grace:
            fitted = self._fit(self._ended, self._ended_at)
            self._ended = None
        if time >= self.due:
            interval = self.config.interval
            if self.due > float("-inf"):  # (the one before is fitted: a grace <= interval)
                self._ended, self._ended_at = self._reader, self.due
                self._reader = self._new_reader()
            self.due = (time // interval + 1) * interval
        reader = self._reader
        ended = self._ended
        if ended is not None and time < self._ended_at + self._grace and type(event) in (
            ClickEvent, ImpressionEvent
        ):
            query_id = cast(ClickEvent | ImpressionEvent, event).query_id
            if query_id is not None and ended.knows(query_id) and not reader.knows(query_id):
                reader = ended  # a click or an impression of a search of the interval before
        try:
            reader.add((time, event))
        except TooManySearches:
            self._left_out += 1  # past max_searches: the interval's further searches
        return fitted

    def _fit(self, reader: ClickLogReader, end: float) -> ImplicitLabels:
        """The labels of the searches ``reader`` read, an interval that ended at ``end``."""
        whole = reader.finish()
        unmatched = whole.counts["clicks of searches whose results are unknown"]
        clicks = whole.public(self.min_sessions)
        estimate = self.model(clicks)
        chosen = np.flatnonzero(kept(estimate, self.config.min_impressions))
        grades = label(estimate.score[chosen], self.thresholds)
        labels: dict[str, dict[str, int]] = {}
        for pair, grade in zip(chosen.tolist(), grades.tolist(), strict=True):
            query = estimate.queries[int(estimate.query[pair])]
            labels.setdefault(query, {})[estimate.docs[int(estimate.doc[pair])]] = int(grade)
        self.fits += 1
        left_out, self._left_out = self._left_out, 0
        return ImplicitLabels(end, labels, len(clicks.search), left_out, unmatched)
