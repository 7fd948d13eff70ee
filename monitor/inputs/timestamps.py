"""The one timestamp policy every input format reads event times by.

A timestamp is integer epoch milliseconds (0 to the end of year 9999), or an ISO 8601 string
read by ``datetime.fromisoformat`` (RFC 3339 with ``Z`` or an offset, and the other forms it
knows, with or without fractions). A string without an offset is ambiguous: it is rejected
(``naive_timestamp``) unless the format's configuration names a zone to read it in
(``[input] naive_timezone`` for native events, ``[ubi] naive_timezone`` for UBI records,
which log local times more often than not).
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo

from monitor.inputs.events import MAX_EPOCH_MS, NAIVE, Reason, Rejection

fromisoformat = datetime.fromisoformat

CACHED = 4096
"""Distinct ``YYYY-MM-DDTHH:MM:SS`` seconds remembered (the usual form is read through them)."""


def zone(name: str) -> tzinfo | None:
    """The zone a configuration names for naive timestamps; None for ``"reject"``."""
    return None if name == "reject" else ZoneInfo(name)


class Timestamps:
    """Reads timestamps into epoch seconds under one policy (``naive``: the zone naive
    strings are read in, None to reject them). The usual form, ``YYYY-MM-DDTHH:MM:SS.fffZ``,
    is read through a cache of its seconds, each read once by ``fromisoformat`` (so exactly
    what it reads); every other form by ``fromisoformat`` itself."""

    def __init__(self, naive: tzinfo | None = None) -> None:
        self.naive = naive
        self._seconds_of: dict[str, float] = {}

    def read(self, stamp: int | str) -> float | Rejection:
        """Epoch seconds of ``stamp``, or the rejection of a malformed or naive one."""
        if type(stamp) is not str:
            if type(stamp) is int and 0 <= stamp <= MAX_EPOCH_MS:
                return stamp / 1000.0
            return Rejection(Reason.SCHEMA, (
                "timestamp: epoch milliseconds out of range" if type(stamp) is int
                else "timestamp: expected an ISO 8601 string or epoch milliseconds"
            ))
        if len(stamp) == 24 and stamp[23] == "Z" and stamp[4:20:3] == "--T::.":
            millis = stamp[20:23]
            if millis.isdigit() and millis.isascii():
                second = self._seconds_of.get(stamp[:19])
                if second is None:
                    try:
                        parsed = fromisoformat(stamp[:19] + "+00:00")
                    except ValueError:
                        return _malformed(stamp)
                    if len(self._seconds_of) >= CACHED:
                        self._seconds_of.clear()
                    second = self._seconds_of[stamp[:19]] = parsed.timestamp()
                return second + int(millis) / 1000.0
        try:
            parsed = fromisoformat(stamp)
        except ValueError:
            return _malformed(stamp)
        if parsed.tzinfo is None:
            if self.naive is None:
                return NAIVE
            parsed = parsed.replace(tzinfo=self.naive)
        try:
            return parsed.timestamp()
        except (OverflowError, ValueError):
            return _malformed(stamp)


def _malformed(stamp: str) -> Rejection:
    return Rejection(Reason.SCHEMA, f"timestamp: expected RFC 3339 or ISO 8601, got {stamp[:40]!r}")
