"""Record batches read by ``monitor.inputs.records`` (as the daemon's consumer reads them):
every field of every record is what kafka-python's own iteration reads, for plain and
compressed batches, keys and values absent or empty, headers, both timestamp types; a batch
that does not read as its header says is left to kafka-python, which raises where it always
did."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from monitor.inputs import kafka as source
from monitor.inputs.records import Malformed, varint

FIELDS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers", "size_in_bytes",
          "checksum")

Message = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def built(messages: list[Message], codec: int = 0, base: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=10**9,
    )
    for delta, (stamp, key, value, headers) in enumerate(messages):
        builder.append(base + delta, timestamp=stamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def theirs(data: bytes) -> list[tuple[Any, ...]]:
    batch = DefaultRecordBatch(data)
    return [tuple(getattr(r, f) for f in FIELDS) for r in source._own_iteration(batch)]


def ours(data: bytes) -> list[tuple[Any, ...]]:
    batch = DefaultRecordBatch(data)
    found = [tuple(getattr(r, f) for f in FIELDS) for r in source._read_batch(batch)]
    assert batch._next_record_index == batch._num_records, "read to its end, as kafka-python"
    return found


names = st.text(max_size=12)
blobs = st.none() | st.binary(max_size=300)
messages = st.lists(
    st.tuples(st.integers(0, 2**41), blobs, blobs,
              st.lists(st.tuples(names, blobs), max_size=3)),
    min_size=1, max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(messages, st.sampled_from([0, DefaultRecordBatch.CODEC_GZIP]),
       st.integers(0, 2**31 - 100))
def test_every_record_reads_as_kafka_python_reads_it(
    batch: list[Message], codec: int, base: int
) -> None:
    data = built(batch, codec, base)
    assert ours(data) == theirs(data)


def test_the_broker_s_append_time_stamps_every_record() -> None:
    data = bytearray(built([(1_000, b"k", b"v", []), (5_000, None, b"w", [("h", None)])]))
    attributes = DefaultRecordBatch.HEADER_STRUCT.unpack_from(data)[5]
    # the attributes (int16 at byte 21) with the log-append-time bit, as a broker stamps a
    # batch (its CRC is checked before iteration, by the fetcher: not here)
    struct.pack_into(">h", data, 21, attributes | DefaultRecordBatch.TIMESTAMP_TYPE_MASK)
    batch = DefaultRecordBatch(bytes(data))
    assert batch.timestamp_type == 1
    assert ours(bytes(data)) == theirs(bytes(data))
    assert [r[1] for r in ours(bytes(data))] == [batch.max_timestamp] * 2


def test_a_record_whose_length_disagrees_is_left_to_kafka_python() -> None:
    data = bytearray(built([(1_000, b"key", b"value", [])]))
    header = DefaultRecordBatch.HEADER_STRUCT.size
    data[header] += 2  # the first record's length varint: one more than it holds
    with pytest.raises(CorruptRecordError):
        list(DefaultRecordBatch(bytes(data)))
    batch = DefaultRecordBatch(bytes(data))
    with pytest.raises(CorruptRecordError):
        list(source._read_batch(batch))


def test_bytes_after_the_last_record_are_left_to_kafka_python() -> None:
    data = built([(1_000, b"key", b"value", [])]) + b"\x00"
    with pytest.raises(CorruptRecordError, match="unconsumed bytes"):
        list(source._read_batch(DefaultRecordBatch(data)))


def test_varints_read_as_kafka_python_writes_them() -> None:
    from kafka.record.util import encode_varint

    for value in (0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**62, -(2**63)):
        written = bytearray()
        encode_varint(value, written.append)
        assert varint(bytes(written) + b"tail", 0) == (value, len(written))
    with pytest.raises(Malformed):
        varint(b"\xff\xff", 0)  # ends inside the varint


def test_the_consumer_reads_batches_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # kafka-python's own iteration, put back after the test (read_batches patches the class)
    monkeypatch.setattr(DefaultRecordBatch, "__iter__", source._own_iteration)
    assert source.read_batches()
    assert DefaultRecordBatch.__iter__ is source._read_batch
    assert source.read_batches(), "installed once, whatever the calls"
    data = built([(7, b"k", b"v", [])])
    assert [r.value for r in DefaultRecordBatch(data)] == [b"v"]


def test_a_header_name_that_is_no_utf8_reads_as_kafka_s_clients_read_it() -> None:
    """kafka-python raises on it (and its consumer then stalls on the partition); the record
    and those after it read, the name with U+FFFD where its bytes are no UTF-8."""
    data = bytearray(built([(1_000, b"k", b"a", []), (1_000, b"k", b"b", [("zz", b"v")]),
                            (1_000, b"k", b"c", [])]))
    data[data.find(b"zz")] = 0xFF  # (the CRC is the fetcher's to check: not read here)
    with pytest.raises(CorruptRecordError, match="UnicodeDecodeError"):
        list(DefaultRecordBatch(bytes(data)))
    read = ours(bytes(data))
    assert [r[FIELDS.index("value")] for r in read] == [b"a", b"b", b"c"]
    assert read[1][FIELDS.index("headers")] == [("\ufffdz", b"v")]
