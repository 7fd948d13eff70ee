"""Text that comes from the input, made safe to show: in a terminal, a log line, a page."""

from __future__ import annotations

import unicodedata

HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories a terminal must not receive raw: controls (C0, DEL, C1: escape
sequences that retitle a window, clear it or switch screens), format characters (bidi
overrides and isolates, zero-width characters, tags: text that reads other than it is),
lone surrogates, line and paragraph separators."""


def printable(text: str) -> str:
    """``text`` with every character of the ``HIDDEN`` categories shown as an escape, as
    Python writes it (``\\x1b``, ``\\u202e``, ``\\U000e0041``); the rest unchanged."""
    if text.isprintable():  # the usual case: nothing to look at one by one
        return text
    return "".join(_escape(c) if unicodedata.category(c) in HIDDEN else c for c in text)


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(character: str) -> str:
    code = ord(character)
    if character in _NAMED:
        return _NAMED[character]
    return f"\\x{code:02x}" if code < 0x100 else (
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    )
