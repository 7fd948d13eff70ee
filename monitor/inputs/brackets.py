"""The count of ``[`` and ``{`` bytes in a message: what the decoder chain checks against
``[input] max_depth`` before any decoder reads the message (``monitor.inputs.chain``).

In C (``_brackets.c``, built by ``setup.py`` with the compiled hot path) where the compiled
modules run and it was built; else ``bytes.count``, twice: the same count, about a third of
a microsecond slower per event.
"""

from __future__ import annotations

from collections.abc import Callable

from monitor import compiled


def count(data: bytes) -> int:
    """The number of ``[`` and ``{`` bytes in ``data``, in Python."""
    return data.count(b"[") + data.count(b"{")


def _choose() -> Callable[[bytes], int]:
    if not compiled.running_compiled():  # plain Python: installed so, asked for, or stale
        return count
    try:
        from monitor.inputs._brackets import brackets as in_c
    except ImportError:  # installed without a C compiler
        return count
    return in_c


brackets = _choose()
"""The count of ``[`` and ``{`` bytes in a message: in C where it is built."""
