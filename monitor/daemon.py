"""``searchmon run``: Kafka in, the pipeline, checkpoints, ``/metrics`` out.

The source adapter of the daemon (it does I/O and reads the clock; the pipeline does not).

Every source partition has its own pipeline (a unit of state that moves with the partition).
Crash safety: every ``checkpoint_interval``, at shutdown and before a partition is given up,
the daemon makes its partitions' state durable with the offsets it reflects (``checkpoint``),
then commits those offsets to Kafka. A partition it acquires is restored from its newest
checkpoint and read from the checkpoint's offset; records below it (delivered again after a
crash between checkpoint and commit) are skipped: they are in the state already.
``/metrics`` shows the state of the newest durable checkpoints, never state a crash could
lose, through the replica's ``Ledger`` (``merge``), so a counter Prometheus has scraped never
goes backwards or counts an event twice, also when partitions move between replicas.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.context
import os
import signal
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.errors import IllegalStateError, KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from monitor import checkpoint, codec
from monitor.checkpoint import CheckpointError, DirStore, KafkaStore, Key, Store, restore_unit
from monitor.codec import UnitState
from monitor.config import Config
from monitor.export import Export, export
from monitor.http import MetricsServer
from monitor.merge import Ledger
from monitor.metrics import ExportCollector, consumer_metrics
from monitor.pipeline import Pipeline, RejectionLog
from monitor.replay import tune_for_throughput
from monitor.snapshots import StateError

log = logging.getLogger(__name__)

LEDGER_FILE = "ledger.bin"


class StartError(Exception):
    """The daemon refuses to start (the message says why and what to do)."""


class _Failed(Exception):
    """The state process could not reach Kafka for a command (it can be tried again)."""


Part = tuple[Key, list[int], list[bytes | None]]
"""What the consumer hands the state process per partition: its offsets and values."""

Letter = tuple[Key, int, str, str]
"""A rejected record: partition, offset, reason and detail (the consumer holds the record)."""

Restored = tuple[int | None, Export, str | None]
"""An acquired partition: the offset its checkpoint reflects (None: no checkpoint), its
exported view and the replica that wrote the checkpoint."""


class State:
    """The pipelines of the partitions owned, with the offsets they reflect.

    Lives in its own process (``_state_process``) while the consumer polls in the main one,
    so that decoding in kafka-python and the pipeline run on two cores. Partitions of the
    judgments topic hold the offline state; the live queries and judged messages of the
    other partitions go to the one of them owned here (the lowest-numbered).
    """

    def __init__(self, config: Config, replica: str, discard: bool = False) -> None:
        self.config = config
        self.replica = replica
        self.discard = discard
        self.units: dict[Key, Pipeline] = {}
        self.offsets: dict[Key, int] = {}
        self.dirty: set[Key] = set()
        self.offline: Key | None = None
        """The judgments partition whose offline state the others join (``_join``)."""
        self.fingerprint = codec.fingerprint(config)
        self.checked: dict[Key, tuple[UnitState, Pipeline]] = {}
        """Checkpoints decoded and checked at start (one replica), until assigned."""
        self.rejections = RejectionLog(config.input.rejection_log_limit)
        self.store: Store
        if config.state.store == "kafka":
            self.store = KafkaStore(config)
        else:
            try:
                self.store = DirStore(config.state.dir)
            except CheckpointError as error:
                if not discard:
                    raise StartError(_refusal(str(error))) from None
                aside = DirStore.discard_unreadable(config.state.dir)
                log.warning("discarded unusable checkpoint, kept as %s", aside)
                self.store = DirStore(config.state.dir)
            # one replica: every checkpoint is checked at start, before any partition arrives
            self.checked = self._decode(self.store.load(set(self.store.units)))

    # --- partitions come and go ------------------------------------------------------------

    def assign(self, keys: set[Key]) -> dict[Key, Restored]:
        restored = {key: self.checked.pop(key) for key in keys if key in self.checked}
        restored |= self._decode(self.store.load(keys - self.units.keys() - restored.keys()))
        answers: dict[Key, Restored] = {}
        for key in sorted(keys - self.units.keys()):
            unit = restored.get(key)
            if unit is None:
                pipeline, offset, writer = Pipeline(self.config), None, None
            else:
                (state, pipeline), offset = unit, unit[0].offset
                writer = state.writer
                log.info("%s/%d: restored its checkpoint at offset %d", *key, offset)
            self.units[key] = pipeline
            self.offsets[key] = offset or 0
            answers[key] = (offset, export(pipeline), writer)
        self._join()
        return answers

    def rewind(self, keys: set[Key]) -> None:
        """The logs of ``keys`` were recreated or truncated: what they hold now is new."""
        for key in keys:
            self.offsets[key] = 0

    def drop(self, keys: set[Key]) -> None:
        for key in keys:
            self.units.pop(key, None)
            self.offsets.pop(key, None)
            self.dirty.discard(key)
        self._join()

    def _decode(self, stored: dict[Key, bytes]) -> dict[Key, tuple[UnitState, Pipeline]]:
        units: dict[Key, tuple[UnitState, Pipeline]] = {}
        for key, data in stored.items():
            try:
                units[key] = restore_unit(data, f"checkpoint of {key[0]}/{key[1]}", self.config)
            except CheckpointError as error:
                if not self.discard:
                    raise StartError(_refusal(str(error))) from None
                log.warning("%s; discarded, the partition starts anew", error)
                self.store.discard({key})
        return units

    def _join(self) -> None:
        """Point every partition's live queries at the offline state owned here, if any."""
        self.offline = offline_key(self.units, self.config)
        owner = self.units[self.offline] if self.offline is not None else None
        for key, pipeline in self.units.items():
            pipeline.join = pipeline if key == self.offline else owner

    # --- records and checkpoints -----------------------------------------------------------

    def process(self, parts: list[Part], judgments_caught_up: bool) -> list[Letter]:
        letters: list[Letter] = []
        offsets, units = self.offsets, self.units
        for key, numbers, values in parts:
            pipeline = units.get(key)
            if pipeline is None:
                continue  # given up while the batch was on its way; its next owner reads it
            start = bisect_left(numbers, offsets.get(key, 0))  # below: in the restored state
            if start == len(numbers):
                continue
            feed = pipeline.feed
            for index in range(start, len(numbers)):
                value = values[index]
                rejection = feed(value if value is not None else b"")
                if rejection is not None:
                    self.rejections.record(rejection, f"{key[0]}/{key[1]}@{numbers[index]}")
                    letters.append(
                        (key, numbers[index], rejection.reason.value, rejection.detail)
                    )
            offsets[key] = numbers[-1] + 1
            self.dirty.add(key)
        offline = self.offline
        if offline is not None and parts:
            # Partitions are read unevenly: the newest event time of any of them moves the
            # offline clock, and, once no judgment waits in its topic, completes the judged
            # samples that have been quiet long enough.
            newest = max(p.sessions.newest for p in units.values())
            judged = units[offline].judged
            judged.advance(newest)
            if judgments_caught_up:
                judged.settle(newest)
            self.dirty.add(offline)
        return letters

    def checkpoint(self, keys: set[Key]) -> tuple[dict[Key, tuple[int, Export]], float]:
        """Make the state of ``keys`` that changed durable; returns their offsets and
        exported views (nothing is written when nothing changed)."""
        written_at = time.time()
        changed = keys & self.dirty
        self.store.save({
            key: codec.encode("unit", UnitState(
                key[0], key[1], self.offsets[key], written_at, self.replica, self.fingerprint,
                self.units[key].snapshot(),
            ))
            for key in sorted(changed)
        })
        self.dirty -= changed
        return {key: (self.offsets[key], export(self.units[key])) for key in changed}, written_at


def offline_key(keys: Iterable[Key], config: Config) -> Key | None:
    """The judgments partition holding the offline state: the lowest-numbered one owned."""
    topic = config.kafka.judgments_topic
    return min((key for key in keys if key[0] == topic), default=None)


def _refusal(problem: str) -> str:
    return (
        f"{problem}; refusing to start. Fix or remove it, or start with "
        "--discard-checkpoint to set it aside and begin those partitions anew from the "
        "committed offsets"
    )


def _state_process(
    connection: Connection, parents_end: Connection, config_json: str, replica: str,
    discard: bool,
) -> None:
    """The state side: receives commands, answers each in order; ends with its parent."""
    parents_end.close()  # else a parent killed with -9 would leave this end waiting forever
    parent = os.getppid()
    # Ctrl-C and SIGTERM reach the whole process group: the consumer process decides when the
    # state stops (after its final checkpoint), so the signals are not for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    tune_for_throughput()
    try:
        state = State(Config.model_validate_json(config_json), replica, discard)
    except StartError as error:
        connection.send(("error", str(error)))
        return
    connection.send(("ready",))
    try:
        while True:
            try:
                while not connection.poll(1.0):
                    if os.getppid() != parent:
                        return  # the consumer process is gone
                command, *arguments = connection.recv()
            except EOFError:
                return  # the consumer process is gone
            try:
                if command == "batch":
                    connection.send(("processed", state.process(*arguments), state.offsets))
                elif command == "assign":
                    connection.send(("assigned", state.assign(*arguments)))
                elif command == "drop":
                    state.drop(*arguments)
                elif command == "rewind":
                    state.rewind(*arguments)
                elif command == "checkpoint":
                    connection.send(("checkpointed", *state.checkpoint(*arguments)))
                else:
                    return
            except StartError as error:
                connection.send(("error", str(error)))
            except (KafkaError, OSError) as error:
                connection.send(("failed", f"{type(error).__name__}: {error}"))
    finally:
        state.store.close()


class _Fence(ConsumerRebalanceListener):  # type: ignore[misc]
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


class Daemon:
    """The consumer side: Kafka, dead letters, commits, /metrics; the state is elsewhere."""

    def __init__(self, config: Config, discard_checkpoint: bool = False) -> None:
        self.config = config
        self.discard_checkpoint = discard_checkpoint
        self.ledger = self._open_ledger()
        self.offsets: dict[Key, int] = {}
        self.owned: set[Key] = set()
        self.checkpoint_time: float | None = None
        self.exported = export(Pipeline(config))  # until a checkpoint is restored or written
        self.connected = False
        self.lag: dict[Key, int] = {}
        self.dead_lettered = 0
        self.stop = threading.Event()
        self._state: Connection | None = None
        self._in_flight: dict[TopicPartition, list[Any]] | None = None
        """The batch the state process is working on (its records go to dead letters)."""
        self._fence = _Fence()
        self._restore_after = 0.0
        self._started: float | None = time.monotonic()

    def _open_ledger(self) -> Ledger:
        path = self.config.state.dir / LEDGER_FILE
        try:
            data = checkpoint.read_file(path)
            if data is None:
                return Ledger()
            return Ledger.restore(codec.decode_ledger(data, str(path)))
        except (CheckpointError, StateError) as error:
            if not self.discard_checkpoint:
                raise StartError(_refusal(str(error))) from None
            log.warning("%s; discarded (exported counters start anew)", error)
            checkpoint.discard_file(path)
            return Ledger()

    def _save_ledger(self) -> None:
        checkpoint.write_file(
            self.config.state.dir / LEDGER_FILE, codec.encode("ledger", self.ledger.snapshot())
        )

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until ``stop``; raises StartError when the state cannot be restored."""
        # fork is instant, but only safe while this process runs a single thread (the
        # command line); embedded in a threaded program (the demo), spawn a fresh interpreter
        context: multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext = (
            multiprocessing.get_context("fork") if threading.active_count() == 1
            else multiprocessing.get_context("spawn")
        )
        ours, theirs = context.Pipe()
        process = context.Process(
            target=_state_process, name="searchmon-state",
            args=(theirs, ours, self.config.model_dump_json(), self.ledger.replica,
                  self.discard_checkpoint),
        )
        process.start()
        theirs.close()
        self._state = ours
        try:
            self._expect("ready")
            self._export()  # what this replica exported before a restart, until it restores
            return self._consume()
        finally:
            with contextlib.suppress(OSError):
                ours.send(("stop",))
            ours.close()
            process.join(timeout=30)

    def _consume(self) -> int:
        registry = CollectorRegistry()
        registry.register(ExportCollector(lambda: self.exported, self._daemon_metrics))
        server = MetricsServer.from_config(self.config.http, registry, self._not_ready).start()
        log.info("serving http://%s/metrics", self.config.http.listen)
        consumer: KafkaConsumer | None = None
        producer: KafkaProducer | None = None
        backoff = 1.0
        last_checkpoint = time.monotonic()
        try:
            while not self.stop.is_set():
                if consumer is None:
                    try:
                        consumer, producer = self._connect()
                        backoff = 1.0
                    except KafkaError as error:
                        self.connected = False
                        log.warning("cannot reach Kafka (%s); retrying in %.0f s", error, backoff)
                        self.stop.wait(backoff)
                        backoff = min(backoff * 2, 30.0)
                        continue
                try:
                    batch = self._poll(consumer)
                except KafkaError as error:
                    log.warning("poll failed: %s", error)
                    batch = {}
                self.connected = _connection_count(consumer) > 0
                # the state process works on the previous batch while this one was fetched
                self._settle(producer)
                waiting = self._follow_assignment(consumer, batch) | self._rewind(consumer)
                self._send(batch, consumer, waiting)
                self._measure_lag(consumer)
                if time.monotonic() - last_checkpoint >= self.config.state.checkpoint_interval:
                    self._checkpoint(consumer, producer)
                    last_checkpoint = time.monotonic()
            if consumer is not None:
                self._checkpoint(consumer, producer)
        finally:
            if consumer is not None:
                consumer.close(autocommit=False)
            if producer is not None:
                producer.close(timeout=5)
            server.close()
        log.info("stopped")
        return 0

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop.set())

    def _connect(self) -> tuple[KafkaConsumer, KafkaProducer | None]:
        kafka = self.config.kafka
        options = kafka.client_options()
        consumer = KafkaConsumer(
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
        self._fence.rebalancing = True  # until the group of this new consumer assigns
        consumer.subscribe([kafka.events_topic, kafka.judgments_topic], listener=self._fence)
        producer = None
        if kafka.dead_letter_topic is not None:
            producer = KafkaProducer(
                bootstrap_servers=kafka.bootstrap_servers, acks="all", linger_ms=50,
                client_id="searchmon-dead-letter", **options,
            )
        self.connected = True
        log.info("connected to %s, group %s", ",".join(kafka.bootstrap_servers), kafka.group_id)
        return consumer, producer

    def _poll(self, consumer: KafkaConsumer) -> dict[TopicPartition, list[Any]]:
        """The next records. With a batch in flight: as soon as records come (decoded while
        the state process works) or its answer does (not waiting out a poll at the end of
        the logs), whichever is first."""
        limit = self.config.kafka.max_poll_records
        batch: dict[TopicPartition, list[Any]]
        if not self._in_flight:
            # While the group rebalances, nothing but poll: kafka-python (3.0) sends a new
            # JoinGroup, and so starts the rebalance over, when the answer to the previous
            # one arrived while no poll was waiting for it. Work between polls during a
            # rebalance (a checkpoint of a large state takes a while) made that the rule.
            while True:
                batch = consumer.poll(timeout_ms=500, max_records=limit)
                if batch or not self._fence.rebalancing or self.stop.is_set():
                    return batch
        assert self._state is not None
        while True:
            batch = consumer.poll(timeout_ms=5, max_records=limit)
            if batch or self._state.poll(0):
                return batch

    def _follow_assignment(
        self, consumer: KafkaConsumer, batch: dict[TopicPartition, list[Any]]
    ) -> set[Key]:
        """Give up the partitions revoked and restore those assigned. Returns the partitions
        whose records in ``batch`` wait: each acquired partition is read again from its
        checkpoint's offset (or from its first record here), and one whose checkpoint cannot
        be read yet (changelog unreachable) stays paused until it can."""
        current = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        gone, new = self.owned - current, current - self.owned
        if gone:
            self._state_send(("drop", gone))
            for key in gone:
                self.ledger.release(key)
                self.offsets.pop(key, None)
                self.lag.pop(key, None)
            self.owned -= gone
            self._save_ledger()
            self._export()
            log.info("gave up %s", _names(gone))
        if not new or time.monotonic() < self._restore_after:
            return new
        firsts = {
            (tp.topic, tp.partition): records[0].offset
            for tp, records in batch.items() if (tp.topic, tp.partition) in new and records
        }
        for key, first in firsts.items():  # not read yet, as far as the state knows
            _if_assigned(consumer.seek, TopicPartition(*key), first)
        partitions = [TopicPartition(*key) for key in new]
        answer = self._request(("assign", new), "assigned")
        if answer is None:
            for partition in partitions:
                _if_assigned(consumer.pause, partition)
            self._restore_after = time.monotonic() + 2.0
            return new
        for partition in partitions:
            _if_assigned(consumer.resume, partition)
        for key, (offset, view, writer) in answer[1].items():
            self.ledger.acquire(key, view, writer)
            if offset is not None:  # the checkpoint, not the committed offset, is the truth
                _if_assigned(consumer.seek, TopicPartition(*key), offset)
                self.offsets[key] = offset
        self.owned |= new
        self._save_ledger()
        self._export()
        log.info("took over %s", _names(new))
        return new

    def _send(
        self, batch: dict[TopicPartition, list[Any]], consumer: KafkaConsumer, waiting: set[Key]
    ) -> None:
        owned = self.owned - waiting
        parts: list[Part] = []
        for partition, records in batch.items():
            key = (partition.topic, partition.partition)
            if key in owned and records:
                parts.append((key, [r.offset for r in records], [r.value for r in records]))
        if not parts:
            return
        assert not self._in_flight
        self._state_send(("batch", parts, self._judgments_caught_up(consumer)))
        self._in_flight = batch

    def _rewind(self, consumer: KafkaConsumer) -> set[Key]:
        """Partitions whose log ends below the offset the state reflects (the topic was
        deleted and created again, or truncated) are read again from their start."""
        rewound = set()
        for partition in consumer.assignment():
            key = (partition.topic, partition.partition)
            highwater = _highwater(consumer, partition)
            if key in self.owned and highwater is not None and highwater < self.offsets.get(
                key, 0
            ):
                log.warning(
                    "%s/%d: log end %d is below the checkpointed offset %d; the topic was "
                    "recreated or truncated, reading it from its start",
                    *key, highwater, self.offsets[key],
                )
                _if_assigned(consumer.seek_to_beginning, partition)
                self.offsets[key] = 0
                rewound.add(key)
        if rewound:
            self._state_send(("rewind", rewound))
        return rewound

    def _settle(self, producer: KafkaProducer | None) -> None:
        """Wait for the batch in flight; dead-letter what it rejected."""
        if not self._in_flight:
            return
        _, letters, offsets = self._expect("processed")
        self.offsets.update((key, offsets[key]) for key in self.owned if key in offsets)
        batch, self._in_flight = self._in_flight, None
        if producer is not None and letters and batch is not None:
            positions: dict[Key, list[int]] = {}
            for key, offset, reason, detail in letters:
                records = batch[TopicPartition(*key)]
                if key not in positions:
                    positions[key] = [r.offset for r in records]
                record = records[bisect_left(positions[key], offset)]
                self._dead_letter(producer, record, reason, detail)

    def _dead_letter(self, producer: KafkaProducer, record: Any, reason: str, detail: str) -> None:
        topic, number, offset, key, value = (
            record.topic, record.partition, record.offset, record.key, record.value
        )
        headers = [
            ("searchmon.reason", reason.encode()),
            ("searchmon.detail", detail[:500].encode()),
            ("searchmon.source.topic", topic.encode()),
            ("searchmon.source.partition", str(number).encode()),
            ("searchmon.source.offset", str(offset).encode()),
        ]
        producer.send(self.config.kafka.dead_letter_topic, value=value, key=key, headers=headers)
        self.dead_lettered += 1

    def _judgments_caught_up(self, consumer: KafkaConsumer) -> bool:
        topic = self.config.kafka.judgments_topic
        owned = [tp for tp in consumer.assignment() if tp.topic == topic]
        marks = [(tp, _highwater(consumer, tp)) for tp in owned]
        return bool(marks) and all(
            mark is not None and self.offsets.get((topic, tp.partition), 0) >= mark
            for tp, mark in marks
        )

    def _measure_lag(self, consumer: KafkaConsumer) -> None:
        # The fetch highwater mark: a ListOffsets(latest) request is not needed, and some
        # Kafka-compatible brokers answer it imprecisely.
        complete = bool(self.owned)
        for partition in consumer.assignment():
            highwater = _highwater(consumer, partition)
            key = (partition.topic, partition.partition)
            if highwater is None:
                complete = False
                continue
            self.lag[key] = lag = max(0, highwater - self.offsets.get(key, 0))
            complete = complete and lag == 0
        if complete and self._started is not None:
            log.info("caught up: every partition read to its end, %.1f s after start",
                     time.monotonic() - self._started)
            self._started = None  # said once

    def _checkpoint(self, consumer: KafkaConsumer, producer: KafkaProducer | None) -> None:
        """Make the state durable, export it, then commit its offsets."""
        self._settle(producer)
        if producer is not None:
            try:
                producer.flush(timeout=10)  # dead letters are durable before their offsets move
            except KafkaError as error:
                log.warning("dead letters not yet delivered (%s): checkpoint postponed", error)
                return
        # A rebalance waits for a checkpoint in progress, and the partitions it revokes are
        # never written again (their next owner may be restoring them). Nothing in here
        # needs the consumer's I/O thread, which the rebalance listener may be holding up.
        with self._fence.lock:
            assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
            keys = (self.owned & assigned) - self._fence.revoked
            answer = self._request(("checkpoint", keys), "checkpointed")
        if answer is None:
            return
        _, written, self.checkpoint_time = answer
        if not written:
            return  # nothing changed since the last checkpoint
        for key, (_, view) in written.items():
            self.ledger.update(key, view)
        self._save_ledger()
        self._export()
        offsets = {
            TopicPartition(*key): OffsetAndMetadata(offset, "", -1)
            for key, (offset, _) in written.items()
            if key in self.owned
        }
        if offsets:
            try:  # bounded: while the brokers are away the loop must keep going
                consumer.commit(offsets, timeout_ms=5000)
            except KafkaError as error:  # the checkpoint is durable; the next commit catches up
                log.warning("offset commit failed: %s", error)

    def _export(self) -> None:
        self.exported = self.ledger.exported(
            self.owned, offline_key(self.ledger.views, self.config)
        )

    # --- the state process ------------------------------------------------------------------

    def _state_send(self, message: tuple[Any, ...]) -> None:
        assert self._state is not None
        self._state.send(message)

    def _expect(self, kind: str) -> tuple[Any, ...]:
        """The state process's next answer, which must be ``kind``."""
        assert self._state is not None
        answer: tuple[Any, ...] = self._state.recv()
        if answer[0] == "error":
            raise StartError(answer[1])
        if answer[0] == "failed":
            raise _Failed(answer[1])
        if answer[0] != kind:
            raise RuntimeError(f"the state process answered {answer[0]!r}, not {kind!r}")
        return answer

    def _request(self, message: tuple[Any, ...], kind: str) -> tuple[Any, ...] | None:
        """A command whose answer may be a Kafka failure (None, logged: try again later)."""
        assert not self._in_flight
        self._state_send(message)
        try:
            return self._expect(kind)
        except _Failed as failure:
            log.warning("%s failed: %s", message[0], failure)
            return None

    # --- health -----------------------------------------------------------------------------

    def _not_ready(self) -> str | None:
        if not self.connected:
            return "not connected to Kafka"
        if self._fence.rebalancing:
            return "waiting for the consumer group to assign partitions"
        restoring = self._fence.assigned - self.owned
        if restoring:
            return "restoring the state of " + _names(set(restoring))
        return None

    def _daemon_metrics(self) -> Iterator[Metric]:
        return consumer_metrics(
            self.lag, self.connected, self.checkpoint_time, self.dead_lettered
        )


def _names(keys: set[Key]) -> str:
    return ", ".join(f"{topic}/{number}" for topic, number in sorted(keys))


def _if_assigned(call: Callable[..., object], *arguments: object) -> None:
    """``call(*arguments)``, a consumer method on partitions, unless one of them was revoked
    meanwhile: kafka-python changes the assignment on its own thread at any moment (such a
    partition is given up at the next ``_follow_assignment``)."""
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
