"""Fitting a dead-letter copy under the producer's limit: plain values, no broker."""

from __future__ import annotations

import hashlib

import pytest

from monitor.inputs.deadletters import (
    MAX_COPY_BYTES,
    DeadLetter,
    _record_size,
    fitted,
)

BIG = 1_048_400
"""A value whose copy, with its headers, is over the producer's ``max_request_size`` (1048576),
as in the integration tests (tests/integration/test_dead_letters.py)."""

HEADERS = (("searchmon.reason", b"invalid_json"), ("searchmon.detail", b"d" * 500),
           ("searchmon.source.topic", b"t"), ("searchmon.source.partition", b"0"),
           ("searchmon.source.offset", b"7"))


@pytest.mark.parametrize(("key", "value", "limit", "cut"), [
    (b"k", b"v" * 100, MAX_COPY_BYTES, False),   # fits: unchanged
    (None, b"v" * BIG, MAX_COPY_BYTES, True),    # the reported case
    (b"k" * 10, b"v" * BIG, 5000, True),         # a lower limit
    (b"k" * 4000, b"v" * 100, 3000, True),       # the key alone is too large: cut too
    (b"k" * 10, b"v" * 100, 0, True),            # replaced: headers only
    (None, None, 0, True),                       # a tombstone replaced
])
def test_a_copy_is_cut_to_fit_keeping_its_headers_and_a_digest(
    key: bytes | None, value: bytes | None, limit: int, cut: bool
) -> None:
    letter = DeadLetter(key, value, HEADERS, "t/0@7")
    out = fitted(letter, limit)
    assert out.cut is cut
    if not cut:
        assert out == letter
        return
    headers = dict(out.headers)
    assert out.headers[:len(HEADERS)] == HEADERS, "the origin headers stay, in their order"
    assert headers["searchmon.truncated"] == str(len(value or b"")).encode()
    assert headers["searchmon.sha256"] == hashlib.sha256(value or b"").hexdigest().encode()
    assert (value or b"").startswith(out.value or b"")
    assert out.key is None or (key or b"").startswith(out.key)
    if out.key != key:
        assert headers["searchmon.key.truncated"] == str(len(key or b"")).encode()
        assert headers["searchmon.key.sha256"] == hashlib.sha256(key or b"").hexdigest().encode()
    if limit:
        assert _record_size(out.key, out.value, out.headers) <= limit
        # about as much as fits (a cut may shorten length prefixes: a few bytes to spare)
        assert _record_size(out.key, (out.value or b"") + b"v" * 8, out.headers) > limit
    else:
        assert not out.value and not out.key
    again = fitted(out, 0)  # a cut copy refused again keeps its first digest
    assert dict(again.headers)["searchmon.sha256"] == headers["searchmon.sha256"]
    assert len(again.headers) == len(out.headers) + (2 if key and "searchmon.key.sha256"
                                                     not in headers else 0)
