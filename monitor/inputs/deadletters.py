"""Dead letters: a copy of every rejected Kafka record in the dead-letter topic, with
headers saying why and where from.

Dead letters are at least once: a copy is kept until the dead-letter topic acknowledges it,
and checkpoints (so commits) wait for that; one the broker refuses is sent again, by a new
producer. A copy the producer could never send (too large) is cut to fit instead. The copies
held are bounded (``full``): the daemon stops reading until they are acknowledged.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError, MessageSizeTooLargeError
from kafka.future import Future
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.structs import TopicPartition

from monitor.config import Config
from monitor.inputs.events import Key
from monitor.inputs.kafka import Records

log = logging.getLogger(__name__)

MAX_COPY_BYTES = 1_048_576
"""The dead-letter producer's ``max_request_size`` (kafka-python's default; below the
broker's default ``message.max.bytes``, 1048588): larger copies are cut to fit."""
FLUSH_SECONDS = 10.0
MAX_PENDING_COPIES = 10_000
MAX_PENDING_BYTES = 64 << 20
"""The most dead-letter copies (and bytes) held unacknowledged before consumption pauses."""
@dataclass(frozen=True)
class DeadLetter:
    """The copy of one rejected record for the dead-letter topic."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    origin: str
    """``topic/partition@offset`` of the rejected record, for the logs."""
    cut: bool = False
    """Whether its value (or key) was truncated to fit; its headers say what was cut."""


def fitted(letter: DeadLetter, limit: int) -> DeadLetter:
    """``letter`` if it fits in ``limit`` bytes (sized as kafka-python sizes a record: a
    batch of one), else a copy cut to fit: its value truncated, then its key, with the
    headers ``searchmon.truncated`` (the original value's size) and ``searchmon.sha256`` (its
    hex digest), and ``searchmon.key.truncated`` and ``searchmon.key.sha256`` when the key is
    cut too. The other headers stay. ``limit`` 0 replaces key and value with empty bytes."""
    key, value, headers = letter.key, letter.value, letter.headers
    excess = _record_size(key, value, headers) - limit
    if excess <= 0:
        return letter
    names = {name for name, _ in headers}
    if "searchmon.sha256" not in names:  # a letter cut before keeps its first digest
        headers += _digest("searchmon", value or b"")
    value = _cut(value or b"", _record_size(key, value or b"", headers) - limit)
    excess = _record_size(key, value, headers) - limit
    if excess > 0 and key:
        if "searchmon.key.sha256" not in names:
            headers += _digest("searchmon.key", key)
        key = _cut(key, _record_size(key, value, headers) - limit)
    return DeadLetter(key, value, headers, letter.origin, cut=True)


def _record_size(key: bytes | None, value: bytes | None,
                 headers: tuple[tuple[str, bytes], ...]) -> int:
    """What kafka-python's ``send`` compares with ``max_request_size`` (message format 2)."""
    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers)))


def _digest(prefix: str, data: bytes) -> tuple[tuple[str, bytes], ...]:
    return ((f"{prefix}.truncated", str(len(data)).encode()),
            (f"{prefix}.sha256", hashlib.sha256(data).hexdigest().encode()))


def _cut(data: bytes, excess: int) -> bytes:
    """``data`` shorter by ``excess`` bytes: the record shrinks by at least as much (its
    length prefixes can only get shorter)."""
    return data[:max(0, len(data) - excess)]


class DeadLetters:
    """The producer of the dead-letter topic (``[kafka] dead_letter_topic``) and the copies
    it has not had acknowledged yet."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.topic = config.kafka.dead_letter_topic
        self.producer: KafkaProducer = self._new_producer()
        self.acknowledged = 0
        """Copies the dead-letter topic acknowledged (``searchmon_dead_lettered_total``)."""
        self.truncated = 0
        """Copies cut to fit (a rejected record too large to copy whole)."""
        self._unacknowledged: list[tuple[DeadLetter, Any]] = []
        """The copies sent since the last complete flush and not yet acknowledged, with their
        send futures: what a failed delivery is sent again from."""
        self._reported = 0
        """``acknowledged`` as of the previous ``send`` call."""

    @property
    def pending(self) -> int:
        """Copies sent and not yet acknowledged by the dead-letter topic."""
        return len(self._unacknowledged)

    def full(self) -> bool:
        """Whether the copies held for the dead-letter topic reached ``MAX_PENDING_COPIES``
        or ``MAX_PENDING_BYTES``: the daemon then reads nothing more until they are
        acknowledged."""
        self._settle_copies()
        if len(self._unacknowledged) >= MAX_PENDING_COPIES:
            return True
        held = sum(len(letter.value or b"") + len(letter.key or b"")
                   for letter, _ in self._unacknowledged)
        return held >= MAX_PENDING_BYTES

    def send(self, records: Records, letters: Iterable[tuple[Key, int, str, str]]) -> int:
        """Send copies of the rejected records among ``records`` to the dead-letter topic
        (cut to fit when too large: ``fitted``). Returns how many copies the topic has
        acknowledged since the previous call (``dead_lettered`` is the total): a copy counts
        once acknowledged, which ``flush`` waits for."""
        positions: dict[Key, list[int]] = {}
        for key, offset, reason, detail in letters:
            found = records[TopicPartition(*key)]
            if key not in positions:
                positions[key] = [r.offset for r in found]
            record = found[bisect_left(positions[key], offset)]
            letter = fitted(_dead_letter(record, reason, detail), MAX_COPY_BYTES)
            if letter.cut:
                self.truncated += 1
                log.warning("%s: %d bytes, too large to copy whole to the dead-letter topic: "
                            "truncated", letter.origin, len(record.value or b""))
            self._unacknowledged.append((letter, self._send(letter)))
        self._settle_copies()
        reported, self._reported = self.acknowledged - self._reported, self.acknowledged
        return reported

    def flush(self) -> bool:
        """Whether every dead letter sent is acknowledged (checkpoints, and so commits, wait
        for that). Copies whose delivery failed are sent again once none is in flight, by a
        new producer: kafka-python's idempotent producer goes fatal on some broker answers
        (after a broker restart, InitProducerId answered UnknownError) and from then on fails
        every send; a copy the broker refused as too large is replaced (``fitted`` to 0)."""
        deadline = time.monotonic() + FLUSH_SECONDS
        self._await_copies(deadline)
        failed = self._settle_copies()
        if failed and len(failed) == len(self._unacknowledged):  # none in flight
            self._send_again(failed)
            self._await_copies(deadline)
            failed = self._settle_copies()
        if not self._unacknowledged:
            return True
        log.warning("%d dead letters not acknowledged (%d failed%s): checkpoint postponed",
                    len(self._unacknowledged), len(failed),
                    f", {failed[0][1]}" if failed else "")
        return False

    def _new_producer(self, api_version: tuple[int, ...] | None = None) -> KafkaProducer:
        """With the ``api_version`` of a producer it replaces: no bootstrap to wait for."""
        kafka = self.config.kafka
        known = {} if api_version is None else {"api_version": api_version}
        return KafkaProducer(
            bootstrap_servers=kafka.bootstrap_servers, acks="all", linger_ms=50,
            max_request_size=MAX_COPY_BYTES,
            max_block_ms=10_000,  # a send waiting for metadata holds up the consumer loop
            client_id="searchmon-dead-letter", **known, **kafka.client_options(),
        )

    def _send(self, letter: DeadLetter) -> Any:
        """The future of the copy's delivery; a failed one when it cannot be sent now (no
        metadata within ``max_block_ms``): it is sent again at the next flush."""
        try:
            return self.producer.send(
                self.topic, value=letter.value, key=letter.key,
                headers=list(letter.headers),
            )
        except KafkaError as error:
            return Future().failure(error)

    def _await_copies(self, deadline: float) -> None:
        """Send what lingers and wait for the answers, until ``deadline`` at most."""
        remaining = deadline - time.monotonic()
        if remaining > 0 and any(not future.is_done for _, future in self._unacknowledged):
            # flush() raises on a timeout only, never for a failed batch: the futures say
            with contextlib.suppress(KafkaError):
                self.producer.flush(timeout=remaining)

    def _settle_copies(self) -> list[tuple[DeadLetter, BaseException]]:
        """Count and forget the acknowledged copies; returns the failed ones with their
        errors (they stay among the unacknowledged until sent again)."""
        kept: list[tuple[DeadLetter, Any]] = []
        failed: list[tuple[DeadLetter, BaseException]] = []
        for letter, future in self._unacknowledged:
            if future.succeeded():
                self.acknowledged += 1
                continue
            kept.append((letter, future))
            if future.failed():
                failed.append((letter, future.exception))
        self._unacknowledged = kept
        return failed

    def _send_again(self, failed: list[tuple[DeadLetter, BaseException]]) -> None:
        """Send the failed copies again: by a new producer unless only their size was
        refused (then replaced by their headers)."""
        log.warning("%d dead letters failed (%s, first %s): sending them again",
                    len(failed), failed[0][1], failed[0][0].origin)
        if not all(isinstance(error, MessageSizeTooLargeError) for _, error in failed):
            self._replace_producer()
        again = []
        for letter, error in failed:
            if isinstance(error, MessageSizeTooLargeError):  # the broker's limit is lower
                if not letter.cut:
                    self.truncated += 1
                letter = fitted(letter, 0)
            again.append((letter, self._send(letter)))
        self._unacknowledged = again

    def _replace_producer(self) -> None:
        """A new dead-letter producer for the current one (which may have gone fatal); the
        current one is kept when no new one can be made."""
        old = self.producer
        assert old is not None
        try:
            self.producer = self._new_producer(old.config["api_version"])
        except KafkaError as error:
            log.warning("cannot make a new dead-letter producer (%s)", error)
            return
        with contextlib.suppress(KafkaError):  # nothing of ours is in flight in it
            old.close(timeout=1)
    def close(self) -> None:
        with contextlib.suppress(KafkaError):  # a flush that timed out
            self.producer.close(timeout=5)
        self._settle_copies()
        if self._unacknowledged:
            log.warning("%d dead letters not acknowledged at shutdown: their offsets were "
                        "not committed, they are copied again when read again",
                        len(self._unacknowledged))


def _dead_letter(record: Any, reason: str, detail: str) -> DeadLetter:
    """The copy of a rejected ``record``: same key and value, and headers saying why and
    where from. (A record with neither key nor value gets an empty value: kafka-python sends
    no record with neither.)"""
    value = record.value if record.value is not None or record.key is not None else b""
    return DeadLetter(
        record.key, value,
        (("searchmon.reason", reason.encode()),
         ("searchmon.detail", detail[:500].encode()),
         ("searchmon.source.topic", record.topic.encode()),
         ("searchmon.source.partition", str(record.partition).encode()),
         ("searchmon.source.offset", str(record.offset).encode())),
        f"{record.topic}/{record.partition}@{record.offset}",
    )
