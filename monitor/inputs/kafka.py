"""The Kafka source adapter of ``searchmon run``: the consumer in its group, the rebalance
fence, positions and highwater marks, and the dead-letter producer.

kafka-python assigns and revokes partitions on its own thread, at any moment: every call on a
partition here tolerates one revoked meanwhile (it is given up at the daemon's next look at
the assignment).

Dead letters are at least once: a copy is kept until the dead-letter topic acknowledges it,
and checkpoints (so commits) wait for that; one the broker refuses is sent again, by a new
producer. A copy the producer could never send (too large) is cut to fit instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    KafkaError,
    MessageSizeTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from kafka.future import Future
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.structs import MemberState, OffsetAndMetadata, TopicPartition

from monitor.config import Config
from monitor.inputs.events import Key

log = logging.getLogger(__name__)

Records = dict[TopicPartition, list[Any]]
"""What a poll returns: each partition's records, in offset order."""

FETCH_SILENCE = 30.0
"""Seconds of reading partitions without a fetch answer before the broker counts as gone."""
MAX_COPY_BYTES = 1_048_576
"""The dead-letter producer's ``max_request_size`` (kafka-python's default; below the
broker's default ``message.max.bytes``, 1048588): larger copies are cut to fit."""
FENCED = (CommitFailedError, IllegalGenerationError, UnknownMemberIdError,
          RebalanceInProgressError, FencedInstanceIdError)
"""Commit errors that say this consumer no longer holds its partitions in the generation
it committed under."""
FLUSH_SECONDS = 10.0
MAX_PENDING_COPIES = 10_000
MAX_PENDING_BYTES = 64 << 20
"""The most dead-letter copies (and bytes) held unacknowledged before consumption pauses."""
METADATA_MAX_AGE_MS = 5_000
"""How stale the consumer's metadata may get: a topic deleted and created again while it is
read is noticed by its new id within this."""
"""How long a checkpoint waits for the dead letters to be acknowledged."""


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


class RebalanceFence(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions being revoked are never checkpointed again: their next owner may already
    be restoring them. (kafka-python calls this on its own thread, before rejoining.)

    ``rebalancing`` is set from the subscription until the group hands out an assignment,
    and again from each revocation to the next assignment."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.revoked: set[Key] = set()
        self.rebalancing = True
        self.assigned: frozenset[Key] = frozenset()
        """The partitions of the latest assignment."""

    def on_partitions_revoked(self, revoked: Any) -> None:
        with self.lock:  # waits for a checkpoint in progress
            self.revoked |= {(tp.topic, tp.partition) for tp in revoked}
            self.rebalancing = True

    def on_partitions_assigned(self, assigned: Any) -> None:
        with self.lock:
            self.revoked.clear()
            self.assigned = frozenset((tp.topic, tp.partition) for tp in assigned)
            self.rebalancing = False


class KafkaSource:
    """One consumer in the group (both topics) and, with ``dead_letter_topic``, a producer."""

    def __init__(self, config: Config, fence: RebalanceFence) -> None:
        kafka = config.kafka
        options = kafka.client_options()
        self.config = config
        self.fence = fence
        self.consumer = KafkaConsumer(
            bootstrap_servers=kafka.bootstrap_servers,
            group_id=kafka.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=kafka.session_timeout_ms,
            heartbeat_interval_ms=kafka.heartbeat_interval_ms,
            max_poll_interval_ms=kafka.max_poll_interval_ms,
            client_id="searchmon",
            # fetch-rate over the last 20 s: a broker that stops answering shows within 40 s
            metrics_sample_window_ms=10_000, metrics_num_samples=2,
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            **options,
        )
        self._fetched: tuple[frozenset[Key], float] = (frozenset(), time.monotonic())
        """The partitions read, and since when (``connected``)."""
        fence.rebalancing = True  # until the group of this new consumer assigns
        self.consumer.subscribe([kafka.events_topic, kafka.judgments_topic], listener=fence)
        self.producer: KafkaProducer | None = None
        if kafka.dead_letter_topic is not None:
            self.producer = self._new_producer()
        self.dead_lettered = 0
        """Copies the dead-letter topic acknowledged (``searchmon_dead_lettered_total``)."""
        self.dead_letters_truncated = 0
        """Copies cut to fit (a rejected record too large to copy whole)."""
        self._unacknowledged: list[tuple[DeadLetter, Any]] = []
        """The copies sent since the last complete flush and not yet acknowledged, with their
        send futures: what a failed delivery is sent again from."""
        self._reported = 0
        """``dead_lettered`` as of the previous ``dead_letter`` call."""
        log.info("connected to %s, group %s", ",".join(kafka.bootstrap_servers), kafka.group_id)

    def poll(self, answered: Callable[[], bool] | None, stop: threading.Event) -> Records:
        """The next records. With a batch in flight (``answered`` tells whether the worker
        has answered): as soon as records come (decoded while the worker works) or the
        answer does (not waiting out a poll at the end of the logs), whichever is first."""
        limit = self.config.kafka.max_poll_records
        batch: Records
        if answered is None:
            # While the group rebalances, nothing but poll: kafka-python (3.0) sends a new
            # JoinGroup, and so starts the rebalance over, when the answer to the previous
            # one arrived while no poll was waiting for it. Work between polls during a
            # rebalance (a checkpoint of a large state takes a while) made that the rule.
            while True:
                batch = self.consumer.poll(timeout_ms=500, max_records=limit)
                if batch or not self.fence.rebalancing or stop.is_set():
                    return batch
        while True:
            batch = self.consumer.poll(timeout_ms=5, max_records=limit)
            if batch or answered():
                return batch

    def assignment(self) -> set[Key]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def seek(self, key: Key, offset: int) -> None:
        _if_assigned(self.consumer.seek, TopicPartition(*key), offset)

    def seek_to_beginning(self, key: Key) -> None:
        _if_assigned(self.consumer.seek_to_beginning, TopicPartition(*key))

    def pause(self, keys: Iterable[Key]) -> None:
        for key in keys:
            _if_assigned(self.consumer.pause, TopicPartition(*key))

    def resume(self, keys: Iterable[Key]) -> None:
        for key in keys:
            _if_assigned(self.consumer.resume, TopicPartition(*key))

    def highwater(self, key: Key) -> int | None:
        """The fetch highwater mark (a ListOffsets(latest) request is not needed, and some
        Kafka-compatible brokers answer it imprecisely); None when unknown or revoked."""
        return _highwater(self.consumer, TopicPartition(*key))

    def topics_have_partitions(self) -> bool:
        """Whether the subscribed topics have partitions (as far as the metadata says)."""
        kafka = self.config.kafka
        return any(
            self.consumer.partitions_for_topic(topic)
            for topic in (kafka.events_topic, kafka.judgments_topic)
        )

    def partition_count(self, topic: str) -> int | None:
        """The number of partitions the metadata gives ``topic``; None when unknown."""
        partitions = self.consumer.partitions_for_topic(topic)
        return len(partitions) if partitions else None

    def connected(self) -> bool:
        """Open connections to the brokers, and, while partitions are being read, fetch
        answers coming back: a broker that accepts connections and answers nothing (frozen,
        or behind a black hole) counts as disconnected once no fetch completed for
        ``FETCH_SILENCE`` seconds of reading the same partitions."""
        try:
            metrics = self.consumer.metrics()
            connections = float(metrics["consumer-metrics"]["connection-count"])
            fetches = float(metrics.get("consumer-fetch-manager-metrics", {}).get(
                "fetch-rate", 0.0
            ))
        except (KeyError, TypeError, ValueError):
            return False
        if connections <= 0:
            return False
        reading = frozenset(self.assignment()) - frozenset(
            (tp.topic, tp.partition) for tp in self.consumer.paused()
        )
        if reading != self._fetched[0]:
            self._fetched = (reading, time.monotonic())
        silent = time.monotonic() - self._fetched[1] > FETCH_SILENCE and fetches <= 0
        return not (reading and silent)

    @property
    def dead_letters_unacknowledged(self) -> int:
        """Copies sent and not yet acknowledged by the dead-letter topic."""
        return len(self._unacknowledged)

    def dead_letters_full(self) -> bool:
        """Whether the copies held for the dead-letter topic reached ``MAX_PENDING_COPIES``
        or ``MAX_PENDING_BYTES``: the daemon then reads nothing more until they are
        acknowledged."""
        self._settle_copies()
        if len(self._unacknowledged) >= MAX_PENDING_COPIES:
            return True
        held = sum(len(letter.value or b"") + len(letter.key or b"")
                   for letter, _ in self._unacknowledged)
        return held >= MAX_PENDING_BYTES

    def dead_letter(self, records: Records, letters: Iterable[tuple[Key, int, str, str]]) -> int:
        """Send copies of the rejected records among ``records`` to the dead-letter topic
        (cut to fit when too large: ``fitted``). Returns how many copies the topic has
        acknowledged since the previous call (``dead_lettered`` is the total): a copy counts
        once acknowledged, which ``flush_dead_letters`` waits for."""
        if self.producer is None:
            return 0
        positions: dict[Key, list[int]] = {}
        for key, offset, reason, detail in letters:
            found = records[TopicPartition(*key)]
            if key not in positions:
                positions[key] = [r.offset for r in found]
            record = found[bisect_left(positions[key], offset)]
            letter = fitted(_dead_letter(record, reason, detail), MAX_COPY_BYTES)
            if letter.cut:
                self.dead_letters_truncated += 1
                log.warning("%s: %d bytes, too large to copy whole to the dead-letter topic: "
                            "truncated", letter.origin, len(record.value or b""))
            self._unacknowledged.append((letter, self._send(letter)))
        self._settle_copies()
        reported, self._reported = self.dead_lettered - self._reported, self.dead_lettered
        return reported

    def flush_dead_letters(self) -> bool:
        """Whether every dead letter sent is acknowledged (checkpoints, and so commits, wait
        for that). Copies whose delivery failed are sent again once none is in flight, by a
        new producer: kafka-python's idempotent producer goes fatal on some broker answers
        (after a broker restart, InitProducerId answered UnknownError) and from then on fails
        every send; a copy the broker refused as too large is replaced (``fitted`` to 0)."""
        if self.producer is None:
            return True
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
        assert self.producer is not None
        try:
            return self.producer.send(
                self.config.kafka.dead_letter_topic, value=letter.value, key=letter.key,
                headers=list(letter.headers),
            )
        except KafkaError as error:
            return Future().failure(error)

    def _await_copies(self, deadline: float) -> None:
        """Send what lingers and wait for the answers, until ``deadline`` at most."""
        assert self.producer is not None
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
                self.dead_lettered += 1
                continue
            kept.append((letter, future))
            if future.failed():
                failed.append((letter, future.exception))
        self._unacknowledged = kept
        return failed

    def _send_again(self, failed: list[tuple[DeadLetter, BaseException]]) -> None:
        """Send the failed copies again: by a new producer unless only their size was
        refused (then replaced by their headers)."""
        assert self.producer is not None
        log.warning("%d dead letters failed (%s, first %s): sending them again",
                    len(failed), failed[0][1], failed[0][0].origin)
        if not all(isinstance(error, MessageSizeTooLargeError) for _, error in failed):
            self._replace_producer()
        again = []
        for letter, error in failed:
            if isinstance(error, MessageSizeTooLargeError):  # the broker's limit is lower
                if not letter.cut:
                    self.dead_letters_truncated += 1
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
    def generation(self) -> int | None:
        """The group generation this consumer is a member of, while the group is stable;
        None while it is joining or rebalancing, or after it fell out of the group."""
        metadata = self.consumer.group_metadata()  # public since kafka-python 3
        generation = int(metadata.generation_id)
        return generation if metadata.state == MemberState.STABLE and generation >= 0 else None

    def topic_id(self, topic: str) -> str | None:
        """The id the brokers' metadata gives ``topic`` (Kafka 2.8 and later), as of the
        consumer's latest metadata (refreshed every ``METADATA_MAX_AGE_MS`` at most); None
        when unknown. kafka-python keeps it in its cluster metadata only, which it does not
        expose: ``tests/test_faults.py`` fails should that attribute change."""
        try:
            found = self.consumer._client.cluster.topic_id(topic)
        except AttributeError:
            return None
        return str(found) if found is not None and found.int != 0 else None

    def membership(self) -> tuple[int, bool]:
        """The group generation this consumer holds, and whether it is a member at all
        (False once a heartbeat or commit told it that it fell out of the group)."""
        metadata = self.consumer.group_metadata()
        generation = int(metadata.generation_id)
        return generation, generation >= 0 and metadata.state != MemberState.UNJOINED

    def rejoin(self) -> None:
        """Leave the group and join it again: a new generation, whose assignment the daemon
        then restores (a replica that may have lost its partitions rejoins even when the
        group has not noticed yet)."""
        kafka = self.config.kafka
        self.fence.rebalancing = True
        self.consumer.unsubscribe()
        self.consumer.subscribe([kafka.events_topic, kafka.judgments_topic], listener=self.fence)

    def commit(self, offsets: dict[Key, int]) -> bool:
        """Commit ``offsets``; False when the group refused them because this consumer is no
        longer a member of the generation it holds them under (its partitions may be
        another's now). Other failures are logged: the checkpoint is durable, the next commit
        catches up."""
        if not offsets:
            return True
        try:  # bounded: while the brokers are away the loop must keep going
            self.consumer.commit(
                {TopicPartition(*key): OffsetAndMetadata(offset, "", -1)
                 for key, offset in offsets.items()},
                timeout_ms=5000,
            )
        except FENCED as error:
            log.warning("offset commit refused (%s): no longer a member of the group's "
                        "generation", type(error).__name__)
            return False
        except KafkaError as error:
            log.warning("offset commit failed: %s", error)
        return True

    def close(self) -> None:
        self.consumer.close(autocommit=False)
        if self.producer is not None:
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


def _if_assigned(call: Callable[..., object], *arguments: object) -> None:
    """``call(*arguments)``, a consumer method on partitions, unless one of them was revoked
    meanwhile: kafka-python changes the assignment on its own thread at any moment (such a
    partition is given up at the next look at the assignment)."""
    with contextlib.suppress(ValueError, KeyError):  # seek: ValueError; pause: KeyError
        call(*arguments)


def _highwater(consumer: KafkaConsumer, partition: TopicPartition) -> int | None:
    """The fetch highwater mark; None when unknown, or when the partition was revoked."""
    try:
        highwater: int | None = consumer.highwater(partition)
    except IllegalStateError:
        return None
    return highwater



