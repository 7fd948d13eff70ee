"""The count of brackets every message is checked for: the C helper counts what
``bytes.count`` counts, on any bytes (its per-block byte counters included), and it is what
the decoder chain uses wherever the compiled hot path runs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor import compiled
from monitor.inputs import brackets


def in_c() -> Callable[[bytes], int]:
    try:
        from monitor.inputs._brackets import brackets as count
    except ImportError:
        pytest.skip("the C helper is not built here (installed without a C compiler)")
    return count


@given(st.binary(max_size=2_000))
def test_the_c_count_is_the_python_count(data: bytes) -> None:
    assert in_c()(data) == brackets.count(data) == data.count(b"[") + data.count(b"{")


@pytest.mark.parametrize("size", [0, 1, 254, 255, 256, 510, 511, 100_000])
def test_runs_longer_than_a_block_are_counted_whole(size: int) -> None:
    count = in_c()
    for data, expected in ((b"[" * size, size), (b"{" * size, size), (b"[{x" * size, 2 * size),
                           (b"x" * size, 0)):
        assert count(data) == expected
    assert count(bytes([0x5B, 0x7B, 0xDB, 0xFB, 0x1B, 0x3B, 0x7A, 0x5A])) == 2, (
        "only '[' and '{' among the bytes that differ from them by one bit"
    )


def test_it_takes_bytes_only() -> None:
    with pytest.raises(TypeError, match="takes bytes, not str"):
        in_c()("[{")  # type: ignore[arg-type]


def test_the_chain_counts_in_c_where_the_hot_path_runs_compiled() -> None:
    if compiled.running_compiled():
        assert brackets.brackets is in_c()
    else:
        assert brackets.brackets is brackets.count
