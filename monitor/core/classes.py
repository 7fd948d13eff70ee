"""Query classes: a closed set, so the number of Prometheus series is bounded.

A query's class is its own ``query_class`` when that is in the set, else the first matching
configured rule, else ``other``. Without configured names, the first ``max_query_classes``
distinct classes seen join the set (in order of arrival) and later ones go to ``other``.
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
        return classes

    def classify(self, query_class: str | None, text: str, add: bool = True) -> int:
        """The class index of a query with this declared class and text; with ``add``
        False, ``NEW`` where the declared class would join the set."""
        if query_class is not None:
            found = self.index.get(query_class)
            if found is not None:
                return found
            if (
                not self.fixed and len(self.names) - 1 < self.limit and query_class
                and query_class != ALL
            ):
                return self.add(query_class) if add else NEW
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

    def add(self, name: str) -> int:
        """``name`` joins the set (the caller checks that it may); returns its index."""
        self.index[name] = len(self.names)
        self.names.append(name)
        return self.index[name]

    def snapshot(self) -> list[str]:
        """The class names, in index order (the other parts refer to them by index)."""
        return list(self.names)

    @classmethod
    def restore(cls, layout: Layout, state: list[str]) -> QueryClasses:
        """The classes of the configuration, then those ``state`` learned after them."""
        classes = cls.from_config(layout.config.query_classes)
        known = len(classes.names)
        require(
            state[:known] == classes.names and len(set(state)) == len(state) and all(state),
            "query classes: not those of this configuration",
        )
        require(
            len(state) == known or (not classes.fixed and len(state) - 1 <= classes.limit),
            "query classes: more than the configuration allows",
        )
        require(len(state) == layout.classes, "query classes: not as many as the state's")
        for name in state[known:]:
            classes.add(name)
        return classes
