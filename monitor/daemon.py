"""``searchmon run``: Kafka in, the pipeline, checkpoints, ``/metrics`` out.

The source adapter of the daemon (it does I/O and reads the clock; the pipeline does not).

Crash safety: every ``checkpoint_interval`` and at shutdown the daemon writes the pipeline's
state with the offsets it reflects (atomically), then commits those offsets to Kafka. On start
it restores the checkpoint, and records below a partition's checkpointed offset (delivered
again after a crash between checkpoint and commit) are skipped: they are in the state already.
``/metrics`` shows the state of the newest durable checkpoint, never state a crash could
lose, so a counter Prometheus has scraped never goes backwards or counts an event twice.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.context
import pickle
import signal
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from monitor import checkpoint
from monitor.config import Config
from monitor.http import MetricsServer
from monitor.merge import merged
from monitor.metrics import PipelineCollector, consumer_metrics
from monitor.pipeline import Pipeline, RejectionLog
from monitor.replay import tune_for_throughput

log = logging.getLogger(__name__)

# Sections whose change makes a checkpointed state meaningless for the new configuration.
STATE_SECTIONS = ("sessions", "query_classes", "input", "offline")


class StartError(Exception):
    """The daemon refuses to start (the message says why and what to do)."""


Record = tuple[str, int, int, bytes | None, bytes | None]
"""What the consumer hands the state process: topic, partition, offset, key, value."""

Letter = tuple[str, int, int, bytes | None, bytes | None, str, str]
"""A rejected record going to the dead-letter topic: the record, its reason and detail."""


class State:
    """The pipelines of every partition with the offsets they reflect: the durable state.

    Lives in its own process (``_state_process``) while the consumer polls in the main one,
    so that decoding in kafka-python and the pipeline run on two cores.
    """

    def __init__(self, config: Config, discard_checkpoint: bool = False) -> None:
        self.config = config
        state_dir = config.state.dir
        try:
            restored = checkpoint.read(state_dir)
        except checkpoint.CheckpointError as error:
            if not discard_checkpoint:
                raise StartError(
                    f"{error}; refusing to start. Fix or remove it, or start with "
                    "--discard-checkpoint to move it aside and begin from the committed offsets"
                ) from None
            aside = checkpoint.discard(state_dir)
            log.warning("discarded unusable checkpoint, kept as %s", aside)
            restored = None
        if restored is not None:
            first = next(iter(restored.pipelines.values()), None)
            changed = [
                section for section in STATE_SECTIONS
                if first is not None
                and getattr(first.config, section) != getattr(config, section)
            ]
            if changed and not discard_checkpoint:
                raise StartError(
                    f"configuration of [{', '.join(changed)}] changed since the checkpoint in "
                    f"{state_dir}; its state does not fit. Start with --discard-checkpoint "
                    "to begin anew from the committed offsets"
                )
            if changed:
                log.warning("configuration changed: checkpoint discarded")
                checkpoint.discard(state_dir)
                restored = None
        self.pipelines: dict[tuple[str, int], Pipeline] = (
            dict(restored.pipelines) if restored else {}
        )
        template = next(iter(self.pipelines.values()), None) or Pipeline(config)
        self.judged = template.judged  # shared by every partition's pipeline
        self.classes = template.classes  # likewise: class indexes agree across partitions
        self.offsets: dict[tuple[str, int], int] = dict(restored.offsets) if restored else {}
        self.checkpoint_time = restored.written_at if restored else None
        self.rejections = RejectionLog(config.input.rejection_log_limit)
        if restored is not None:
            log.info("restored checkpoint with offsets %s", self.offsets)

    def process(
        self, records: list[Record], highwaters: dict[tuple[str, int], int],
        judgments_caught_up: bool,
    ) -> list[Letter]:
        letters: list[Letter] = []
        truncated = {
            key for key, highwater in highwaters.items() if highwater < self.offsets.get(key, 0)
        }
        for key in truncated:
            # The log is shorter than what the state reflects: the topic was deleted and
            # created again (or truncated). Its new messages are new events.
            log.warning(
                "%s/%d: log end %d is below the checkpointed offset %d; the topic was "
                "recreated or truncated, reading it from its start",
                key[0], key[1], highwaters[key], self.offsets[key],
            )
            self.offsets[key] = 0
        offsets = self.offsets
        for topic, number, offset, record_key, value in records:
            key = (topic, number)
            if offset < offsets.get(key, 0):
                continue  # already reflected in the restored state
            rejection = self._pipeline(key).feed(value if value is not None else b"")
            if rejection is not None:
                self.rejections.record(rejection, f"{topic}/{number}@{offset}")
                letters.append((topic, number, offset, record_key, value,
                                rejection.reason.value, rejection.detail))
            offsets[key] = offset + 1
        if self.pipelines:
            # Partitions are read unevenly: the newest event time of any of them moves the
            # shared offline clock, and, once no judgment waits in its topic, completes the
            # judged samples that have been quiet long enough.
            newest = max(p.sessions.newest for p in self.pipelines.values())
            self.judged.advance(newest)
            if judgments_caught_up:
                self.judged.settle(newest)
        return letters

    def checkpoint(self) -> bytes:
        """Write the state durably; returns the exported view of it (pickled)."""
        written_at = time.time()
        data = checkpoint.encode(
            checkpoint.Checkpoint(self.pipelines, dict(self.offsets), written_at)
        )
        checkpoint.write(self.config.state.dir, data)
        self.checkpoint_time = written_at
        return self.view()

    def view(self) -> bytes:
        """The sums of the partitions' pipelines, as /metrics shows them (pickled)."""
        return pickle.dumps(
            merged(self.config, [self.pipelines[k] for k in sorted(self.pipelines)]),
            protocol=5,
        )

    def _pipeline(self, key: tuple[str, int]) -> Pipeline:
        pipeline = self.pipelines.get(key)
        if pipeline is None:
            pipeline = self.pipelines[key] = Pipeline(self.config)
            pipeline.share(self.classes, self.judged)
        return pipeline


def _state_process(connection: Connection, config_json: str, discard: bool) -> None:
    """The state side: receives batches and checkpoint requests, answers each in order."""
    # Ctrl-C and SIGTERM reach the whole process group: the consumer process decides when the
    # state stops (after its final checkpoint), so the signals are not for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    tune_for_throughput()
    try:
        state = State(Config.model_validate_json(config_json), discard)
    except StartError as error:
        connection.send(("error", str(error)))
        return
    connection.send(("ready", dict(state.offsets), state.view(), state.checkpoint_time))
    while True:
        try:
            command, *arguments = connection.recv()
        except EOFError:
            return  # the consumer process is gone
        if command == "batch":
            letters = state.process(*arguments)
            connection.send(("processed", letters, dict(state.offsets)))
        elif command == "checkpoint":
            view = state.checkpoint()
            connection.send(("checkpointed", dict(state.offsets), view, state.checkpoint_time))
        else:
            return


class Daemon:
    """The consumer side: Kafka, dead letters, commits, /metrics; the state is elsewhere."""

    def __init__(self, config: Config, discard_checkpoint: bool = False) -> None:
        self.config = config
        self.discard_checkpoint = discard_checkpoint
        self.offsets: dict[tuple[str, int], int] = {}
        self.checkpoint_time: float | None = None
        self.exported = Pipeline(config)  # until the state process has answered
        self.connected = False
        self.lag: dict[tuple[str, int], int] = {}
        self.dead_lettered = 0
        self.stop = threading.Event()
        self._state: Connection | None = None
        self._in_flight = False
        self._letters: list[Letter] = []

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
            args=(theirs, self.config.model_dump_json(), self.discard_checkpoint),
        )
        process.start()
        theirs.close()
        answer = ours.recv()
        if answer[0] == "error":
            process.join(timeout=30)
            raise StartError(answer[1])
        _, self.offsets, view, self.checkpoint_time = answer
        self.exported = pickle.loads(view)
        self._state = ours
        try:
            return self._consume()
        finally:
            with contextlib.suppress(OSError):
                ours.send(("stop",))
            ours.close()
            process.join(timeout=30)

    def _consume(self) -> int:
        registry = CollectorRegistry()
        registry.register(PipelineCollector(lambda: self.exported, self._daemon_metrics))
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
                    batch = consumer.poll(
                        timeout_ms=500, max_records=self.config.kafka.max_poll_records
                    )
                except KafkaError as error:
                    log.warning("poll failed: %s", error)
                    batch = {}
                self.connected = _connection_count(consumer) > 0
                # the state process works on the previous batch while this one was fetched
                self._settle(producer)
                self._send(batch, consumer)
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
            kafka.events_topic, kafka.judgments_topic,
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
        producer = None
        if kafka.dead_letter_topic is not None:
            producer = KafkaProducer(
                bootstrap_servers=kafka.bootstrap_servers, acks="all", linger_ms=50,
                client_id="searchmon-dead-letter", **options,
            )
        self.connected = True
        log.info("connected to %s, group %s", ",".join(kafka.bootstrap_servers), kafka.group_id)
        return consumer, producer

    def _send(self, batch: dict[TopicPartition, list[Any]], consumer: KafkaConsumer) -> None:
        if not batch:
            return
        assert self._state is not None and not self._in_flight
        records: list[Record] = [
            (r.topic, r.partition, r.offset, r.key, r.value)
            for records in batch.values() for r in records
        ]
        highwaters = {}
        for partition in batch:
            highwater = consumer.highwater(partition)
            if highwater is not None:
                highwaters[(partition.topic, partition.partition)] = highwater
        self._state.send(("batch", records, highwaters, self._judgments_caught_up(consumer)))
        self._in_flight = True

    def _settle(self, producer: KafkaProducer | None) -> None:
        """Wait for the batch in flight; dead-letter what it rejected."""
        if not self._in_flight:
            return
        assert self._state is not None
        answer = self._state.recv()
        if answer[0] != "processed":
            raise RuntimeError(f"the state process answered {answer[0]!r}")
        _, letters, self.offsets = answer
        self._in_flight = False
        if producer is not None:
            for letter in letters:
                self._dead_letter(producer, letter)

    def _dead_letter(self, producer: KafkaProducer, letter: Letter) -> None:
        topic, number, offset, key, value, reason, detail = letter
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
        marks = [(tp, consumer.highwater(tp)) for tp in owned]
        return bool(marks) and all(
            mark is not None and self.offsets.get((topic, tp.partition), 0) >= mark
            for tp, mark in marks
        )

    def _measure_lag(self, consumer: KafkaConsumer) -> None:
        # The fetch highwater mark: a ListOffsets(latest) request is not needed, and some
        # Kafka-compatible brokers answer it imprecisely.
        for partition in consumer.assignment():
            highwater = consumer.highwater(partition)
            if highwater is not None:
                key = (partition.topic, partition.partition)
                self.lag[key] = max(0, highwater - self.offsets.get(key, 0))

    def _checkpoint(self, consumer: KafkaConsumer, producer: KafkaProducer | None) -> None:
        assert self._state is not None
        self._settle(producer)
        if producer is not None:
            try:
                producer.flush(timeout=10)  # dead letters are durable before their offsets move
            except KafkaError as error:
                log.warning("dead letters not yet delivered (%s): checkpoint postponed", error)
                return
        self._state.send(("checkpoint",))
        answer = self._state.recv()
        if answer[0] != "checkpointed":
            raise RuntimeError(f"the state process answered {answer[0]!r}")
        _, self.offsets, view, self.checkpoint_time = answer
        self.exported = pickle.loads(view)
        offsets = {
            TopicPartition(topic, number): OffsetAndMetadata(offset, "", -1)
            for (topic, number), offset in self.offsets.items()
            if TopicPartition(topic, number) in consumer.assignment()
        }
        if offsets:
            try:  # bounded: while the brokers are away the loop must keep going
                consumer.commit(offsets, timeout_ms=5000)
            except KafkaError as error:  # the checkpoint is durable; the next commit catches up
                log.warning("offset commit failed: %s", error)

    # --- health -----------------------------------------------------------------------------

    def _not_ready(self) -> str | None:
        if not self.connected:
            return "not connected to Kafka"
        return None

    def _daemon_metrics(self) -> Iterator[Metric]:
        return consumer_metrics(
            self.lag, self.connected, self.checkpoint_time, self.dead_lettered
        )


def _connection_count(consumer: KafkaConsumer) -> float:
    """Open broker connections, from kafka-python's own consumer metrics."""
    try:
        return float(consumer.metrics()["consumer-metrics"]["connection-count"])
    except (KeyError, TypeError, ValueError):
        return 0.0
