"""The one way the tests wait: poll a condition until it holds, or fail saying what did not
happen and what was last seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], what: str, seconds: float = 60, *,
    until: Callable[[T], object] = bool, every: float = 0.1,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``condition`` every ``every`` seconds until its value is true (or ``until`` holds
    for it), and return that value. After ``seconds`` without, fail with ``what`` and the last
    value, or the last of the ``ignoring`` exceptions, which count as "not yet". An assertion
    in ``condition`` fails at once: that is how a caller stops waiting on a process that ended.
    """
    deadline = time.monotonic() + seconds
    while True:
        last: object
        try:
            value = condition()
        except ignoring as error:
            last = error
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {seconds:g} s; last seen: {last!r}")
        time.sleep(every)
