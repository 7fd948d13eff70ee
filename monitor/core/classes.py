"""Query classes: a closed set, so the number of Prometheus series is bounded.

A query's class is its own ``query_class`` when that is in the set, else the first matching
configured rule, else ``other``. Without configured names, the first ``max_query_classes``
distinct classes in event time make the set and later ones go to ``other``: a class whose
first query is earlier than that of the newest member not yet behind the watermark takes
that member's place (``evicted`` says which, for the slices to relabel its figures
``other``). So within the allowed lateness the set does not depend on the order of arrival.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from monitor.config import QueryClassesConfig
from monitor.core.snapshots import Layout, Migration, require

OTHER = "other"
NEW = -1
"""``classify(add=False)``: the declared class is not in the set yet and would join it."""
ALL = "all"
"""Reserved: the label of overall offline figures; a query declaring it is classified anew."""


def normalise(text: str) -> str:
    """Query text as it is compared: case-folded, whitespace collapsed."""
    return " ".join(text.casefold().split())


@dataclass(frozen=True, slots=True)
class _Rule:
    index: int
    pattern: re.Pattern[str] | None
    min_terms: int | None
    max_terms: int | None

    def matches(self, text: str) -> bool:
        if self.min_terms is not None or self.max_terms is not None:
            terms = len(text.split())
            if self.min_terms is not None and terms < self.min_terms:
                return False
            if self.max_terms is not None and terms > self.max_terms:
                return False
        return self.pattern is None or self.pattern.search(text) is not None


@dataclass
class QueryClasses:
    """Maps events to class indexes; ``names[index]`` is the label value, ``other`` is 0."""

    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {}

    limit: int
    fixed: bool
    names: list[str] = field(default_factory=lambda: [OTHER])
    index: dict[str, int] = field(default_factory=lambda: {OTHER: 0})
    rules: list[_Rule] = field(default_factory=list)
    _by_text: dict[str, int] = field(default_factory=dict, repr=False)
    first: dict[str, float] = field(default_factory=dict)
    """The first event time of each member learned from the queries (configured names and
    rules' classes are members for good)."""
    settled: bool = False
    """No learned member can lose its place any more: the set is full and the watermark
    has passed every member's first query (or the set is configured)."""
    pending: dict[str, float] = field(default_factory=dict)
    """Declared classes outside a full set that is not settled, with their first event
    time: one may still take a member's place (until then its figures count as ``other``)."""
    configured: int = 0
    """Names of the configuration (and rules' classes): members for good."""
    _position: dict[str, int] = field(default_factory=lambda: {OTHER: 0}, repr=False)
    """Every name's index, members or not."""
    changes: list[tuple[str, bool]] = field(default_factory=list)
    """Learned members that joined (name, True) or lost their place to an earlier class
    (name, False) since the caller last looked; a name keeps its index, to come back to."""

    @classmethod
    def from_config(cls, config: QueryClassesConfig) -> QueryClasses:
        classes = cls(limit=config.max_query_classes, fixed=bool(config.names))
        classes.settled = classes.fixed
        for name in config.names:
            classes.add(name)
        for rule in config.rules:
            if rule.class_ != OTHER and rule.class_ not in classes.index:
                if classes.fixed:
                    classes.add(rule.class_)  # a rule's class is part of the closed set
                elif len(classes.names) - 1 < classes.limit:
                    classes.add(rule.class_)
            classes.rules.append(
                _Rule(
                    classes.index.get(rule.class_, 0),
                    re.compile(rule.pattern) if rule.pattern is not None else None,
                    rule.min_terms,
                    rule.max_terms,
                )
            )
        classes.configured = len(classes.names) - 1
        return classes

    def classify(
        self, query_class: str | None, text: str, add: bool = True,
        time: float = float("-inf"), watermark: float = float("inf"),
    ) -> int:
        """The class index of a query with this declared class and text at event ``time``
        (``watermark``: that of the events); with ``add`` False, ``NEW`` where the declared
        class would join the set (or wait, ``pending``). The index of a pending class is
        not in ``index``: its figures count as ``other`` unless it joins."""
        if query_class is not None:
            found = self.index.get(query_class)
            if found is not None:
                if add and not self.settled:
                    self.saw(query_class, time)
                return found
            if not self.fixed and query_class and query_class != ALL:
                declared = self._declared(query_class, text, add, time, watermark)
                if declared is not None:
                    return declared
        return self._rule(text)

    def _rule(self, text: str) -> int:
        """The class of the first configured rule the text matches, else ``other``."""
        if not self.rules:
            return 0
        cached = self._by_text.get(text)
        if cached is not None:
            return cached
        normal = normalise(text)
        found = next((rule.index for rule in self.rules if rule.matches(normal)), 0)
        if len(self._by_text) >= 65536:
            self._by_text.clear()
        self._by_text[text] = found
        return found

    def _declared(
        self, name: str, text: str, add: bool, time: float, watermark: float
    ) -> int | None:
        """A declared class outside the set: it joins (while there is room, or in the place
        of a later member the watermark has not passed), or waits as ``pending`` while the
        set may still change; None: it is not a class (the rules decide)."""
        pending = self.pending.get(name)
        if pending is not None and pending < time:
            time = pending
        room = len(self.index) - 1 < self.limit
        if room or self._earlier(time, watermark, pending is not None):
            return self._join(name, time, watermark) if add else NEW
        if self.settled or watermark == float("inf") or self._rule(text):
            return None  # (an infinite watermark is a placement's: it never waits)
        if pending is None:
            if len(self.names) >= self._bound:
                return None
            if not add:
                return NEW
            self.pending[name] = time
            return self.add(name, member=False)
        if add:
            self.pending[name] = time
        return self._position[name]

    def saw(self, name: str, time: float) -> None:
        """A query of the member ``name`` at event ``time``: its first query may be earlier
        than the set knew."""
        first = self.first.get(name)
        if first is not None and time < first:
            self.first[name] = time

    def _newest_open(self, watermark: float) -> str | None:
        """The learned member whose first query is the newest, while the watermark has not
        passed it; None: none can lose its place (then, once full, the set is settled and
        the pending classes stay out)."""
        if self.first:
            name = max(self.first, key=self.first.__getitem__)
            if self.first[name] >= watermark:
                return name
        if watermark < float("inf") and len(self.index) - 1 >= self.limit:
            self.settled = True  # (an infinite watermark is a placement's, not event time)
            self.pending.clear()
        return None

    def _earlier(self, time: float, watermark: float, known: bool) -> bool:
        """Whether a class whose first query is at ``time`` takes a full set's place."""
        if self.settled or (not known and len(self.names) >= self._bound):
            return False
        newest = self._newest_open(watermark)
        return newest is not None and time < self.first[newest]

    def _join(self, name: str, time: float, watermark: float) -> int:
        """``name`` joins the set at event ``time``, in the place of the newest member when
        the set is full (that member waits as pending)."""
        if len(self.index) - 1 >= self.limit:
            newest = self._newest_open(watermark)
            assert newest is not None, "a full set is joined only in an open member's place"
            self.pending[newest] = self.first.pop(newest)
            del self.index[newest]
            self.changes.append((newest, False))
        self.pending.pop(name, None)
        self.first[name] = time
        self.changes.append((name, True))
        return self.add(name)

    def add(self, name: str, member: bool = True) -> int:
        """``name`` joins the set (the caller checks that it may), or only takes an index
        (``member`` False); returns its index (the one it had, if it had one)."""
        at = self._position.get(name)
        if at is None:
            at = self._position[name] = len(self.names)
            self.names.append(name)
        if member:
            self.index[name] = at
        return at

    @property
    def _bound(self) -> int:
        """Class names known at most (members, pending and those that lost their place)."""
        return 1 + self.configured + 4 * self.limit

    def snapshot(self) -> list[str]:
        """The class names, in index order (the other parts refer to them by index)."""
        return list(self.names)

    @classmethod
    def restore(
        cls, layout: Layout, state: list[str], first: list[float | None] | None = None,
        out: list[str] | None = None,
    ) -> QueryClasses:
        """The classes of the configuration, then those ``state`` learned after them, with
        the first event time of each learned member (``first``, per name; None: a member
        for good) and the names that lost their place (``out``)."""
        classes = cls.from_config(layout.config.query_classes)
        known = len(classes.names)
        out = out or []
        require(
            state[:known] == classes.names and len(set(state)) == len(state) and all(state),
            "query classes: not those of this configuration",
        )
        require(set(out) <= set(state[known:]), "query classes: an unknown class left")
        require(
            len(state) == known or (
                not classes.fixed and len(state) - 1 - len(out) <= classes.limit
                and len(state) <= classes._bound
            ),
            "query classes: more than the configuration allows",
        )
        require(len(state) == layout.classes, "query classes: not as many as the state's")
        require(first is None or len(first) == len(state), "query classes: times of others")
        for name in state[known:]:
            classes.add(name)
        for name, time in zip(state, first or (), strict=False):
            if time is not None and name not in out and name in classes.index:
                classes.first[name] = time
        for name, time in zip(state, first or [None] * len(state), strict=True):
            if name in out:
                del classes.index[name]
                if time is not None:
                    classes.pending[name] = time
        return classes
