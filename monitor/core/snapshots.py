"""What every stateful part's ``snapshot()`` is made of: plain values, the one interface of
the parts, and the checks that a snapshot read back from bytes fits together.

A stateful part of a pipeline (``Pipeline.PARTS``: the query classes, the online counters,
the sessions, the daemon's own counters, the judged state, the query lists) has

- ``snapshot()``: its state as a frozen dataclass of numbers, strings, lists and other
  snapshots;
- ``restore(layout, snapshot)``, a class method: the part rebuilt under ``layout`` (the
  configuration, and how many query classes the parts refer to by index), with its lookup
  caches; a snapshot whose pieces do not fit raises ``StateError``;
- ``VERSION`` and ``MIGRATIONS``, next to it: ``MIGRATIONS[n]`` turns the JSON document of
  version n of its snapshot into version n + 1. The checkpoint codec (``monitor.state.codec``)
  records each part's version and runs the migrations a document needs.

Infinite and NaN floats have no JSON form: ``-inf`` ("nothing seen yet") is written as null,
and so is NaN (a measure that skipped a query).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Protocol, Self, TypeVar

from pydantic import Field

if TYPE_CHECKING:
    from monitor.config import Config

Migration = Callable[[Any], Any]
"""One step of a part's snapshot document: version n to version n + 1 (JSON values)."""


@dataclass(frozen=True)
class Layout:
    """What a part's state is laid out by: the configuration it was taken under, and the
    number of query classes the parts refer to by index."""

    config: Config
    classes: int


S = TypeVar("S")


class Stateful(Protocol[S]):
    """The interface every stateful part of a pipeline has."""

    VERSION: ClassVar[int]
    MIGRATIONS: ClassVar[Mapping[int, Migration]]

    def snapshot(self) -> S: ...

    @classmethod
    def restore(cls, layout: Layout, state: S) -> Self: ...


class StateError(ValueError):
    """A snapshot whose parts do not fit together (corrupt, or not of this configuration)."""


def require(condition: bool, problem: str) -> None:
    if not condition:
        raise StateError(problem)


def same_lengths(name: str, *columns: Sequence[object]) -> int:
    """The common length of ``columns`` (the columns of one table)."""
    lengths = {len(column) for column in columns}
    require(len(lengths) <= 1, f"{name}: columns of different lengths {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def finite_or_none(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value


def or_minus_infinity(value: float | None) -> float:
    return float("-inf") if value is None else value


def nan_or_none(values: Iterable[float]) -> list[float | None]:
    return [None if math.isnan(v) else v for v in values]


def none_as_nan(values: Iterable[float | None]) -> tuple[float, ...]:
    return tuple(math.nan if v is None else v for v in values)


Int = Annotated[int, Field(ge=-(2**63), lt=2**63)]
"""An integer of a snapshot: 64 bits, so that no value read back can overflow later."""

Float = Annotated[float, Field(allow_inf_nan=False)]
"""A finite float of a snapshot."""
