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
from dataclasses import dataclass
from typing import ClassVar, Final

from monitor.config import QueryClassesConfig
from monitor.core.snapshots import Layout, Migration, require

OTHER: Final = "other"
NEW: Final = -1
"""``classify(add=False)``: the declared class is not in the set yet and would join it."""
ALL: Final = "all"
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


MAX_CLASS_CHARS: Final = 100
"""The longest declared class that may become one (a label value); a longer one is no
class."""

MEMBER: Final = 0
JOINED: Final = 1
WAITING: Final = 2
OUT: Final = 3
"""What ``EventTimeSet.place`` found a name to be (``NEW``: it would join, or start to wait)."""


class EventTimeSet:
    """A closed set of names learned in event time: the first ``limit`` names by their
    first event, whatever the order of arrival within the allowed lateness.

    A name whose first event is earlier than that of the newest member the watermark has
    not passed takes its place (that member waits, ``pending``). While the set is full but
    not settled, a name outside it waits too, with its first event time, since an earlier
    event of it may still come; at most ``max_pending`` names wait (past that, a new name is
    out at once: that bounds the names that ever lose their place, whose figures are kept
    to be given back). Once the watermark has passed every member's first event the set is
    ``settled``: final (the watermark only advances, a first event time only moves back).
    A configured set (``listed``) is fixed. Used by the query classes and by each dimension
    of the slices."""

    __slots__ = ("first", "fixed", "limit", "max_pending", "pending", "settled")

    def __init__(self, listed: list[str] | None, limit: int) -> None:
        self.fixed = listed is not None
        self.limit = len(listed) if listed is not None else limit
        self.max_pending = 4 * max(limit, 1)
        self.first: dict[str, float] = dict.fromkeys(listed or (), float("-inf"))
        """Each member's first event time (-inf: configured, or from before times were
        kept)."""
        self.pending: dict[str, float] = {}
        """Names outside the set while it is full and not settled, with their first event
        time."""
        self.settled = self.fixed

    def saw(self, name: str, time: float) -> None:
        """An event of ``name`` at ``time``: a member's first event may be earlier than the
        set knew."""
        first = self.first.get(name)
        if first is not None and time < first:
            self.first[name] = time

    def newest_open(self, watermark: float) -> str | None:
        """The member whose first event is the newest, while the watermark has not passed
        it (an earlier name may still come); None: every member is settled."""
        if self.fixed or not self.first:
            return None
        name = max(self.first, key=self.first.__getitem__)
        if self.first[name] >= watermark:
            return name
        if watermark < float("inf") and len(self.first) >= self.limit:
            self.settled = True  # (an infinite watermark is a placement's, not event time)
            self.pending.clear()
        return None

    def place(
        self, name: str, time: float, watermark: float, add: bool, may_wait: bool = True
    ) -> tuple[int, str | None]:
        """What ``name``, with an event at ``time``, is: ``MEMBER``, ``JOINED`` (with the
        member whose place it took, if any), ``WAITING``, ``OUT``, or, with ``add`` False,
        ``NEW`` where it would join or start to wait (nothing changes then).
        ``may_wait`` False: a name that would wait is out."""
        seen = self.first.get(name)
        if seen is not None:
            if add and time < seen and not self.fixed:
                self.first[name] = time
            return MEMBER, None
        if self.settled:  # the common case of a name outside a full set: no scan
            return OUT, None
        pending = self.pending
        waited = pending.get(name)
        if waited is not None and waited < time:
            time = waited
        if len(self.first) < self.limit:
            if not add:
                return NEW, None
            pending.pop(name, None)
            self.first[name] = time
            return JOINED, None
        if waited is None and len(pending) >= self.max_pending:
            return OUT, None
        newest = self.newest_open(watermark)
        if newest is None:
            return OUT, None
        if time < self.first[newest]:
            if not add:
                return NEW, None
            pending[newest] = self.first.pop(newest)  # it waits now
            pending.pop(name, None)
            self.first[name] = time
            return JOINED, newest
        if not may_wait:
            return OUT, None
        if not add:
            return (WAITING if waited is not None else NEW), None
        pending[name] = time
        return WAITING, None


class QueryClasses:
    """Maps events to class indexes; ``names[index]`` is the label value, ``other`` is 0."""

    VERSION: ClassVar[int] = 1
    MIGRATIONS: ClassVar[Mapping[int, Migration]] = {}

    def __init__(self, limit: int, fixed: bool) -> None:
        self.limit = limit
        self.fixed = fixed
        self.names: list[str] = [OTHER]
        self.index: dict[str, int] = {OTHER: 0}
        self.rules: list[_Rule] = []
        self._by_text: dict[str, int] = {}
        self.learned = EventTimeSet([], 0)
        """The classes learned from the queries, in event time (configured names and rules'
        classes are members for good, outside it); a waiting class's figures count as
        ``other`` until it joins."""
        self._position: dict[str, int] = {OTHER: 0}
        """Every name's index, members or not."""
        self.changes: list[tuple[str, bool]] = []
        """Learned members that joined (name, True) or lost their place to an earlier class
        (name, False) since the caller last looked; a name keeps its index, to come back
        to."""

    @classmethod
    def from_config(cls, config: QueryClassesConfig) -> QueryClasses:
        classes = cls(limit=config.max_query_classes, fixed=bool(config.names))
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
        classes.learned = EventTimeSet(
            [] if classes.fixed else None, classes.limit - (len(classes.names) - 1)
        )
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
                if add and not self.learned.settled:
                    self.learned.saw(query_class, time)
                return found
            if (not self.fixed and query_class and query_class != ALL
                    and len(query_class) <= MAX_CLASS_CHARS):
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
        of a later member the watermark has not passed), or waits while the set may still
        change (unless a rule classes its text); None: it is not a class (the rules
        decide)."""
        learned = self.learned
        found, evicted = learned.place(
            name, time, watermark, add, may_wait=not learned.settled and not self._rule(text)
        )
        if found == NEW:
            return NEW
        if found == WAITING:
            return self.add(name, member=False)
        if found == OUT:
            return None
        if evicted is not None:
            del self.index[evicted]
            self.changes.append((evicted, False))
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
                not classes.fixed and len(state) - len(out) - known <= classes.learned.limit
                and len(out) <= classes.learned.max_pending + classes.learned.limit
            ),
            "query classes: more than the configuration allows",
        )
        require(len(state) == layout.classes, "query classes: not as many as the state's")
        require(first is None or len(first) == len(state), "query classes: times of others")
        times = first or [None] * len(state)
        for name, time in zip(state[known:], times[known:], strict=True):
            if name in out:
                classes.add(name, member=False)
                if time is not None:
                    classes.learned.pending[name] = time
            else:  # (no time: from before they were kept, a member for good)
                classes.add(name)
                classes.learned.first[name] = float("-inf") if time is None else time
        return classes
