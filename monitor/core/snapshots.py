"""What every stateful component's ``snapshot()`` is made of: plain values, and the checks
that a snapshot read back from bytes fits together.

A snapshot is a frozen dataclass of numbers, strings, lists and other snapshots. The
checkpoint codec (``monitor.codec``) writes and reads them; a component rebuilds itself from
``(config, snapshot)`` and rebuilds its lookup caches. Infinite and NaN floats have no JSON
form: ``-inf`` ("nothing seen yet") is written as null, and so is NaN (a measure that skipped
a query).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Annotated

from pydantic import Field


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
