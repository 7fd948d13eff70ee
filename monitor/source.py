"""The Kafka source adapter of ``searchmon run``: the consumer in its group, the rebalance
fence, positions and highwater marks, and the dead-letter producer.

kafka-python assigns and revokes partitions on its own thread, at any moment: every call on a
partition here tolerates one revoked meanwhile (it is given up at the daemon's next look at
the assignment).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.errors import IllegalStateError, KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from monitor.config import Config
from monitor.merge import Key

log = logging.getLogger(__name__)

Records = dict[TopicPartition, list[Any]]
"""What a poll returns: each partition's records, in offset order."""


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
            **options,
        )
        fence.rebalancing = True  # until the group of this new consumer assigns
        self.consumer.subscribe([kafka.events_topic, kafka.judgments_topic], listener=fence)
        self.producer: KafkaProducer | None = None
        if kafka.dead_letter_topic is not None:
            self.producer = KafkaProducer(
                bootstrap_servers=kafka.bootstrap_servers, acks="all", linger_ms=50,
                client_id="searchmon-dead-letter", **options,
            )
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
        return _connection_count(self.consumer) > 0

    def dead_letter(self, records: Records, letters: Iterable[tuple[Key, int, str, str]]) -> int:
        """Copy the rejected records among ``records`` to the dead-letter topic; returns how
        many were sent."""
        if self.producer is None:
            return 0
        sent = 0
        positions: dict[Key, list[int]] = {}
        for key, offset, reason, detail in letters:
            found = records[TopicPartition(*key)]
            if key not in positions:
                positions[key] = [r.offset for r in found]
            record = found[bisect_left(positions[key], offset)]
            headers = [
                ("searchmon.reason", reason.encode()),
                ("searchmon.detail", detail[:500].encode()),
                ("searchmon.source.topic", record.topic.encode()),
                ("searchmon.source.partition", str(record.partition).encode()),
                ("searchmon.source.offset", str(record.offset).encode()),
            ]
            self.producer.send(
                self.config.kafka.dead_letter_topic, value=record.value, key=record.key,
                headers=headers,
            )
            sent += 1
        return sent

    def flush_dead_letters(self) -> bool:
        """Whether every dead letter sent is delivered (checkpoints wait for that)."""
        if self.producer is None:
            return True
        try:
            self.producer.flush(timeout=10)
        except KafkaError as error:
            log.warning("dead letters not yet delivered (%s): checkpoint postponed", error)
            return False
        return True

    def commit(self, offsets: dict[Key, int]) -> None:
        if not offsets:
            return
        try:  # bounded: while the brokers are away the loop must keep going
            self.consumer.commit(
                {TopicPartition(*key): OffsetAndMetadata(offset, "", -1)
                 for key, offset in offsets.items()},
                timeout_ms=5000,
            )
        except KafkaError as error:  # the checkpoint is durable; the next commit catches up
            log.warning("offset commit failed: %s", error)

    def close(self) -> None:
        self.consumer.close(autocommit=False)
        if self.producer is not None:
            self.producer.close(timeout=5)


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


def _connection_count(consumer: KafkaConsumer) -> float:
    """Open broker connections, from kafka-python's own consumer metrics."""
    try:
        return float(consumer.metrics()["consumer-metrics"]["connection-count"])
    except (KeyError, TypeError, ValueError):
        return 0.0
