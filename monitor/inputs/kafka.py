"""The Kafka source adapter of ``searchmon run``: the consumer in its group, the rebalance
fence, positions and highwater marks, membership, topic ids and commits (the dead-letter
producer is ``monitor.inputs.deadletters``).

kafka-python assigns and revokes partitions on its own thread, at any moment: every call on a
partition here tolerates one revoked meanwhile (it is given up at the daemon's next look at
the assignment).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    IllegalGenerationError,
    IllegalStateError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from kafka.record.default_records import DefaultRecordBatch
from kafka.structs import MemberState, OffsetAndMetadata, TopicPartition

from monitor.config import Config
from monitor.inputs.events import Key
from monitor.inputs.records import Malformed, records

log = logging.getLogger(__name__)

Records = dict[TopicPartition, list[Any]]
"""What a poll returns: each partition's records, in offset order."""

FETCH_SILENCE = 30.0
"""Seconds of reading partitions without a fetch answer before the broker counts as gone."""
FENCED = (CommitFailedError, IllegalGenerationError, UnknownMemberIdError,
          RebalanceInProgressError, FencedInstanceIdError)
"""Commit errors that say this consumer no longer holds its partitions in the generation
it committed under."""
METADATA_MAX_AGE_MS = 5_000
"""How stale the consumer's metadata may get: a topic deleted and created again while it is
read is noticed by its new id within this."""
"""How long a checkpoint waits for the dead letters to be acknowledged."""


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
    """One consumer in the group, reading both topics."""

    def __init__(self, config: Config, fence: RebalanceFence) -> None:
        kafka = config.kafka
        options = kafka.client_options()
        read_batches()
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
            # Polls of 500 ms: with polls of 50 ms, a daemon whose broker restarted stayed
            # out of the new broker's group for minutes (one run in five, kafka-python 3.0).
            while True:
                batch = self.consumer.poll(timeout_ms=500, max_records=limit)
                if batch or not self.fence.rebalancing or stop.is_set():
                    return batch
                self._join_again_if_lost()
        while True:
            batch = self.consumer.poll(timeout_ms=5, max_records=limit)
            if batch or answered():
                return batch

    def _join_again_if_lost(self) -> None:
        """kafka-python (3.0) loses a join that completes while no poll waits for it, once
        the assignment it brought matches the metadata: the member never becomes stable,
        its partitions are never assigned, and nothing is fetched, for good (seen after a
        broker restart, on a loaded machine). Its join finished with no rejoin wanted, and
        the member not stable: the join is asked for again. (Read through kafka-python's
        own attributes; where they differ, nothing is done.)"""
        coordinator: Any = getattr(self.consumer, "_coordinator", None)
        if not getattr(getattr(coordinator, "_join_task", None), "is_done", False):
            return
        if self.consumer.group_metadata().state == MemberState.STABLE or (
            coordinator.need_rejoin()
        ):
            return
        log.warning("the consumer group's join finished unseen (kafka-python); joining again")
        coordinator.request_rejoin()

    def assignment(self) -> set[Key]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def seek(self, key: Key, offset: int) -> None:
        _if_assigned(self.consumer.seek, TopicPartition(*key), offset)

    def committed(self, key: Key) -> int | None:
        """The group's committed offset of ``key`` (None: none, or not known now)."""
        try:
            offset = self.consumer.committed(TopicPartition(*key))
        except KafkaError:
            return None
        return int(offset) if offset is not None else None

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
        expose: ``tests/integration/test_faults.py`` fails should that attribute change."""
        try:
            found = self.consumer._client.cluster.topic_id(topic)
        except AttributeError:
            return None
        return str(found) if found is not None and found.int != 0 else None

    def member_id(self) -> str:
        """The member id the group gave this consumer (a new one at each join)."""
        return str(self.consumer.group_metadata().member_id or "")

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


BATCH_LAYOUT = ("_buffer", "_pos", "_num_records", "_next_record_index", "_decompressed")
"""The slots of kafka-python's ``DefaultRecordBatch`` that ``read_batches`` reads and sets."""
BATCH_PROPERTIES = ("_maybe_uncompress", "is_control_batch", "base_offset", "first_timestamp",
                    "timestamp_type", "max_timestamp")


def read_batches() -> bool:
    """Have kafka-python iterate the data records of a record batch (message format v2) with
    ``monitor.inputs.records`` (compiled with the hot path: a third of the consumer's CPU
    time, read in Python record by record by kafka-python). Control batches (transaction
    markers), and a batch that does not read as its header says, are left to kafka-python's
    own iteration, which raises its ``CorruptRecordError`` where it always did. False, and
    kafka-python reads every batch, where its ``DefaultRecordBatch`` does not have the
    layout this was written against (kafka-python 3.0's)."""
    if DefaultRecordBatch.__iter__ is _read_batch:
        return True
    slots = getattr(DefaultRecordBatch, "__slots__", ())
    if not all(name in slots for name in BATCH_LAYOUT) or not all(
        hasattr(DefaultRecordBatch, name) for name in BATCH_PROPERTIES
    ):
        log.info("record batches are read by kafka-python itself (its DefaultRecordBatch "
                 "is not the one this version knows)")
        return False
    DefaultRecordBatch.__iter__ = _read_batch
    return True


_own_iteration: Callable[[Any], Any] = DefaultRecordBatch.__iter__
"""kafka-python's own ``DefaultRecordBatch.__iter__`` (taken as this module loads)."""


def _read_batch(batch: Any) -> Any:
    """``DefaultRecordBatch.__iter__``: its data records, read by ``records``."""
    if batch.is_control_batch or batch._next_record_index:
        return _own_iteration(batch)
    batch._maybe_uncompress()
    try:
        found = records(bytes(batch._buffer), batch._pos, batch._num_records, batch.base_offset,
                        batch.first_timestamp, batch.timestamp_type, batch.max_timestamp)
    except Malformed:
        return _own_iteration(batch)  # it raises where the batch goes wrong
    batch._next_record_index = batch._num_records
    batch._pos = len(batch._buffer)
    return iter(found)
