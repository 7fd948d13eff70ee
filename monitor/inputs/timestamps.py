"""The one timestamp policy every input format reads event times by.

A timestamp is integer epoch milliseconds (0 to the end of year 9999), the same written as a
string of digits (as UBI's ``epoch_millis``), or an ISO 8601 string read by
``datetime.fromisoformat`` (RFC 3339 with ``Z`` or an offset, and the other forms it knows,
with or without fractions; a lower-case ``z`` too). A string without an offset is ambiguous:
it is rejected (``naive_timestamp``) unless the format's configuration names a zone to read it in
(``[input] naive_timezone`` for native events, ``[ubi] naive_timezone`` for UBI records,
which log local times more often than not).
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from operator import truediv
from zoneinfo import ZoneInfo

from monitor.inputs.events import MAX_EPOCH_MS, NAIVE, Reason, Rejection

fromisoformat = datetime.fromisoformat

CACHED = 4096
"""Distinct ``YYYY-MM-DDTHH:MM:SS`` seconds remembered (the usual form is read through them),
and as many of each other zone's (``Z`` or an offset, the common forms' seconds)."""
SIGNS = frozenset("+-")
MILLISECONDS = {f"{n:03d}": n / 1000.0 for n in range(1000)}
"""The three digits of a fraction of the usual form, and the seconds they add."""


def zone(name: str) -> tzinfo | None:
    """The zone a configuration names for naive timestamps; None for ``"reject"``."""
    return None if name == "reject" else ZoneInfo(name)


class Timestamps:
    """Reads timestamps into epoch seconds under one policy (``naive``: the zone naive
    strings are read in, None to reject them). The usual form, ``YYYY-MM-DDTHH:MM:SS.fffZ``,
    is read through a cache of its seconds, each read once by ``fromisoformat`` (so exactly
    what it reads); so are the other common forms, ``YYYY-MM-DDTHH:MM:SS`` with a fraction of
    1 to 6 digits or none, then ``Z`` or an offset ``+HH:MM``/``-HH:MM`` (their seconds with
    their zone read once by ``fromisoformat``, the fraction added in integer microseconds as
    ``datetime.timestamp`` adds them: the same float); every other form by ``fromisoformat``
    itself."""

    def __init__(self, naive: tzinfo | None = None) -> None:
        self.naive = naive
        self._seconds_of: dict[str, float] = {}
        """``YYYY-MM-DDTHH:MM:SS.`` of the usual form (UTC): its epoch seconds."""
        self._zoned: dict[str, int] = {}
        """``YYYY-MM-DDTHH:MM:SS`` and a zone (``Z`` or an offset): its epoch seconds."""

    def read(self, stamp: int | str) -> float | Rejection:
        """Epoch seconds of ``stamp``, or the rejection of a malformed or naive one."""
        if type(stamp) is not str:
            if type(stamp) is int and 0 <= stamp <= MAX_EPOCH_MS:
                return stamp / 1000.0
            return Rejection(Reason.SCHEMA, (
                "timestamp: epoch milliseconds out of range" if type(stamp) is int
                else "timestamp: expected an ISO 8601 string or epoch milliseconds"
            ))
        if len(stamp) == 24 and stamp[23] == "Z":
            # the usual form: its seconds (with their ".") and its milliseconds looked up
            second = self._seconds_of.get(stamp[:20])
            if second is not None:
                fraction = MILLISECONDS.get(stamp[20:23])
                if fraction is not None:
                    return second + fraction
            elif stamp[4:20:3] == "--T::." and stamp[20:23] in MILLISECONDS:
                try:
                    parsed = fromisoformat(stamp[:19] + "+00:00")
                except ValueError:
                    return _malformed(stamp)
                if len(self._seconds_of) >= CACHED:
                    self._seconds_of.clear()
                second = self._seconds_of[stamp[:20]] = parsed.timestamp()
                return second + MILLISECONDS[stamp[20:23]]
        if len(stamp) >= 20 and stamp[4:17:3] == "--T::":
            found = self._common(stamp)
            if found is not None:
                return found
        try:
            parsed = fromisoformat(stamp)
        except ValueError:
            if 0 < len(stamp) <= 16 and stamp.isascii() and stamp.isdigit():
                return self.read(int(stamp))  # epoch milliseconds as a string (UBI allows)
            if stamp[-1:] == "z":  # RFC 3339 allows a lower-case "z" (and "t": read)
                upper = self.read(stamp[:-1] + "Z")
                return upper if type(upper) is not Rejection else _malformed(stamp)
            return _malformed(stamp)
        if parsed.tzinfo is None:
            if self.naive is None:
                return NAIVE
            parsed = parsed.replace(tzinfo=self.naive)
        try:
            return parsed.timestamp()
        except (OverflowError, ValueError):
            return _malformed(stamp)


    def _common(self, stamp: str) -> float | None:
        """A timestamp of a common form with a zone (see the class), or None for another
        form (then ``fromisoformat`` reads it)."""
        end = len(stamp)
        zone = stamp[-1]
        if zone == "Z":
            end -= 1
        elif end >= 25 and stamp[-6] in SIGNS and stamp[-3] == ":":
            end -= 6
            zone = stamp[end:]
        else:
            return None
        micros = 0
        if end > 19:  # a fraction
            digits = stamp[20:end]
            if stamp[19] != "." or not 1 <= len(digits) <= 6 or not (
                digits.isdigit() and digits.isascii()
            ):
                return None
            micros = int(digits) * 10 ** (6 - len(digits))
        elif end != 19:
            return None
        key = stamp[:19] + zone
        second = self._zoned.get(key)
        if second is None:
            try:
                parsed = fromisoformat(key)
                second = int(parsed.timestamp())
            except (OverflowError, ValueError):
                return None  # read (and rejected) by fromisoformat as a whole
            if len(self._zoned) >= CACHED:
                self._zoned.clear()
            self._zoned[key] = second
        # int by int, correctly rounded (as datetime.timestamp divides): the operator's,
        # which stays Python's own division where this module is compiled
        seconds: float = truediv(second * 1_000_000 + micros, 1_000_000)
        return seconds


def _malformed(stamp: str) -> Rejection:
    return Rejection(Reason.SCHEMA, f"timestamp: expected RFC 3339 or ISO 8601, got {stamp[:40]!r}")
