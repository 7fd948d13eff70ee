"""The records of a Kafka record batch (message format v2), read in one compiled pass.

kafka-python reads a batch record by record in Python (``DefaultRecordBatch.__next__``: a
call per field and an object per record), a third of its consumer's CPU time, and the
daemon's consumer process shares two cores with its state process and the broker.
``monitor.inputs.kafka.read_batches`` has kafka-python iterate the batches of data records
with ``records`` instead: the same records (offset, timestamp and its type, key, value,
headers, size), read from the batch's bytes once decompressed, with the same checks.
"""

from __future__ import annotations

from typing import Final

LOG_APPEND_TIME: Final = 1


class Record:
    """A data record as kafka-python's consumer reads it (the interface of its
    ``DefaultRecord``)."""

    __slots__ = (
        "headers",
        "key",
        "offset",
        "size_in_bytes",
        "timestamp",
        "timestamp_type",
        "value",
    )

    def __init__(
        self, size_in_bytes: int, offset: int, timestamp: int, timestamp_type: int,
        key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]],
    ) -> None:
        self.size_in_bytes = size_in_bytes
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers

    @property
    def checksum(self) -> None:
        return None  # v2 records have none of their own: the batch has one

    def validate_crc(self) -> bool:
        return True  # the batch's CRC is checked before its records are read

    def __repr__(self) -> str:
        return (f"Record(offset={self.offset!r}, timestamp={self.timestamp!r}, "
                f"timestamp_type={self.timestamp_type!r}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")


class Malformed(Exception):
    """The batch does not read as its header says: kafka-python's own reading decides."""


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it."""
    shift = 0
    value = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise Malformed
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def nullable(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """The bytes at ``pos`` (a varint length, -1 for none, then as many bytes) and the
    position after them."""
    size, pos = varint(data, pos)
    if size < 0:
        return None, pos
    if pos + size > len(data):
        raise Malformed
    return data[pos:pos + size], pos + size


def records(
    data: bytes, pos: int, count: int, base_offset: int, first_timestamp: int,
    timestamp_type: int, max_timestamp: int,
) -> list[Record]:
    """The ``count`` records of a decompressed batch body ``data`` from ``pos``; ``Malformed``
    for anything kafka-python's reading would refuse (a length that disagrees with the
    fields, a negative header count or key size, bytes left over), but a header name that
    is no UTF-8."""
    found: list[Record] = []
    end = len(data)
    for _ in range(count):
        length, pos = varint(data, pos)
        start = pos
        _, pos = varint(data, pos)  # attributes: unused in v2
        delta, pos = varint(data, pos)
        offset_delta, pos = varint(data, pos)
        key, pos = nullable(data, pos)
        value, pos = nullable(data, pos)
        headers: list[tuple[str, bytes | None]] = []
        number, pos = varint(data, pos)
        if number < 0:
            raise Malformed
        for _ in range(number):
            size, pos = varint(data, pos)
            if size < 0 or pos + size > end:
                raise Malformed
            # as Kafka's own clients read a header name: bytes that are no UTF-8 read as
            # U+FFFD (kafka-python's reading raises, and its consumer then stalls on the
            # partition for good)
            name = data[pos:pos + size].decode("utf-8", "replace")
            header, pos = nullable(data, pos + size)
            headers.append((name, header))
        if pos - start != length:
            raise Malformed
        stamp = max_timestamp if timestamp_type == LOG_APPEND_TIME else first_timestamp + delta
        found.append(Record(length, base_offset + offset_delta, stamp, timestamp_type, key,
                            value, headers))
    if pos != end:
        raise Malformed
    return found
