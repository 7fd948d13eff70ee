"""The partition state worker of ``searchmon run``: the pipelines of the partitions a replica
owns, the offsets they reflect, and their checkpoints, in a process of its own.

The consumer process (``monitor.daemon``) polls Kafka while this process works on the
previous batch, so that kafka-python's decoding and the pipelines run on two cores. The two
speak in typed messages (``Request`` one way, ``Answer`` the other), one answer per request
but ``Drop``. This process is the one owner of the offsets: every answer carries the offset
each owned partition's state reflects, and the consumer process only mirrors them.

A checkpoint of the directory store is written by a forked copy of this process while the
batches go on (``Checkpoint.wait`` False): the copy holds the state as of the fork, writes it,
reports the views it exported and exits; its result comes with the answer to a later
``Checkpoint`` (the copy sets ``Worker.written`` when it is ready to be taken). Meanwhile the
copy shares the process's memory, copying a page only when one of the two writes to it.

Offline (judged) state belongs to the judgments topic's partition; the live queries and
judged messages of the other partitions owned here are forwarded to it explicitly (the
lowest-numbered judgments partition owned, ``offline_key``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import multiprocessing
import multiprocessing.context
import os
import signal
import threading
import time
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, NoReturn, TypeVar

from kafka.errors import KafkaError

from monitor import logs
from monitor.config import Config, secret_values
from monitor.core.export import Export, export
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.run.tuning import tune_for_throughput
from monitor.serve.queries import QueryState, query_state
from monitor.state import codec
from monitor.state.checkpoint import (
    CheckpointError,
    DirStore,
    KafkaStore,
    Key,
    Store,
    UnreadableCheckpoints,
    forget_inherited_lock,
    restore_unit,
)
from monitor.state.codec import UnitState

log = logging.getLogger(__name__)

REPORT_EVERY = 10.0
"""Seconds between two merges of the query lists while records keep coming."""


class StartError(Exception):
    """The daemon refuses to start (the message says why and what to do)."""


class WorkerFailed(Exception):
    """The worker could not reach Kafka for a request (it can be tried again)."""


Part = tuple[Key, list[int], list[bytes | None]]
"""A partition's records of a batch: their offsets and values."""

Letter = tuple[Key, int, str, str]
"""A rejected record: partition, offset, reason and detail (the consumer holds the record)."""


@dataclass(frozen=True)
class Restored:
    """An acquired partition: the offset its checkpoint reflects (None: no checkpoint), its
    exported view and the replica that wrote the checkpoint."""

    offset: int | None
    view: Export
    writer: str | None
    topic_id: str | None = None
    """The id the broker gave the topic when the checkpoint was written (None: unknown)."""


# --- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assign:
    keys: frozenset[Key]
    generation: int = -1
    """The group generation that assigned them."""


@dataclass(frozen=True)
class Idle:
    """Partitions read to their end that got no event for ``[sessions] idle_after``: their
    watermark follows the wall clock ``now`` (no answer)."""

    keys: frozenset[Key]
    now: float


@dataclass(frozen=True)
class Drop:
    """Partitions given up (no answer)."""

    keys: frozenset[Key]


@dataclass(frozen=True)
class Rewind:
    """Partitions whose log was recreated or truncated: what they hold now is new."""

    keys: frozenset[Key]


@dataclass(frozen=True)
class Process:
    parts: list[Part]
    judgments_caught_up: bool
    """No judgment waits in the judgments topic: samples may complete on live event time."""
    horizon: float | None = None
    """Events stamped later than this are rejected (``future_timestamp``); None: this
    machine's clock plus ``max_future``."""


@dataclass(frozen=True)
class Checkpoint:
    keys: frozenset[Key]
    topic_ids: dict[str, str] = field(default_factory=dict)
    """The brokers' topic ids (where they give them), kept in the checkpoints: a topic
    deleted and created again is then recognised by its new id."""
    generation: int = -1
    """The consumer group generation the partitions are held under (kept in the
    checkpoints: a restore prefers the highest)."""
    start: bool = True
    """Write the state of ``keys`` that changed (False: only take the result of a write in
    the background)."""
    wait: bool = True
    """Answer once it is durable. False: a forked copy writes it while batches go on (the
    directory store; the changelog is written at once either way), and the answer carries
    the result of the write before, if any."""
    mark: int = 0
    """A number the answer that reports what this checkpoint wrote gives back (``Checkpointed
    .mark``): the dead letters acknowledged when it began."""


@dataclass(frozen=True)
class Stop:
    pass


Request = Assign | Drop | Idle | Rewind | Process | Checkpoint | Stop


# --- answers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class Refused:
    """A state that cannot be used (``StartError``)."""

    message: str


@dataclass(frozen=True)
class Failed:
    """Kafka or the disk failed for this request; it can be tried again."""

    message: str


@dataclass(frozen=True)
class Assigned:
    restored: dict[Key, Restored]
    offsets: dict[Key, int]


@dataclass(frozen=True)
class Rewound:
    offsets: dict[Key, int]


@dataclass(frozen=True)
class Processed:
    letters: list[Letter]
    offsets: dict[Key, int]


@dataclass(frozen=True)
class Checkpointed:
    written: dict[Key, tuple[int, Export]] = field(default_factory=dict)
    """The partitions whose state changed and was written: their offsets and views."""
    written_at: float | None = 0.0
    """The wall-clock time as of which the state is durable; None: not known yet (a write
    in the background has begun, none has ended)."""
    offsets: dict[Key, int] = field(default_factory=dict)
    queries: QueryState | None = None
    """The query lists of every partition owned, merged (None: unchanged since the last)."""
    mark: int | None = None
    """The ``Checkpoint.mark`` of the newest checkpoint reported (None: none ended)."""


Answer = Ready | Refused | Failed | Assigned | Rewound | Processed | Checkpointed
A = TypeVar("A", Ready, Assigned, Rewound, Processed, Checkpointed)


@dataclass(frozen=True)
class Writing:
    """A checkpoint a forked copy of the process is writing: the partitions, the offsets
    and the time their state is as of, and the read end of the pipe of the copy's result."""

    pid: int
    reader: Connection
    offsets: dict[Key, int]
    written_at: float
    mark: int


@dataclass(frozen=True)
class Copied:
    """What a forked copy sends back once it has written: the views of the partitions it
    wrote and the query lists it merged (when due), or why it failed."""

    views: dict[Key, Export] | None
    lists: QueryState | None
    failure: str | None = None


Written = tuple[dict[Key, tuple[int, Export]], float, QueryState | None, int]
"""A checkpoint written: the partitions' offsets and views, its time, the merged query lists
if they were due (``PartitionStates.queries``), its request's mark."""


class PartitionStates:
    """The pipelines of the partitions owned, with the offsets they reflect."""

    def __init__(self, config: Config, replica: str, discard: bool = False) -> None:
        self.config = config
        self.replica = replica
        self.discard = discard
        self.fingerprint = codec.fingerprint(config)
        self.units: dict[Key, Pipeline] = {}
        self.offsets: dict[Key, int] = {}
        self.dirty: set[Key] = set()
        self.shown_dirty = True
        """Whether a partition changed since the query lists were last merged."""
        self.shown_units: frozenset[Key] | None = None
        self.shown_at = 0.0
        self.busy = False
        """Whether records were processed since the last checkpoint."""
        self.offline: Key | None = None
        """The judgments partition whose offline state the others forward to."""
        self.checked: dict[Key, tuple[UnitState, Pipeline]] = {}
        """Checkpoints decoded and checked at start (one replica), until assigned."""
        self.rejections = RejectionLog(config.input.rejection_log_limit)
        self.position: memoryview | list[int] = [0, 0]
        """The part of the batch and the offset of the record in hand (shared with the
        consumer process, which reports a stall: ``Worker.position``)."""
        self.copy_ended = ctypes.c_byte(0)
        """1 once a write in the background has ended: the copy sets it, in memory shared
        with the consumer process, which then asks for the result (``Worker.written``)."""
        self.writing: Writing | None = None
        """The checkpoint being written in the background."""
        self.ended: list[Written] = []
        """Writes in the background taken before a ``Checkpoint`` asked for them (a partition
        came or went meanwhile): answered with the next."""
        self.failure: str | None = None
        """Why the last write in the background failed (its partitions are written again)."""
        self.lists: QueryState | None = None
        """Query lists merged for an answer that failed: given with the next."""
        self.store: Store
        if config.state.store == "kafka":
            self.store = KafkaStore(config)
        else:
            try:
                self.store = DirStore(config.state.dir)
            except CheckpointError as error:
                if not discard:
                    raise StartError(refusal(str(error))) from None
                aside = DirStore.discard_unreadable(config.state.dir)
                log.warning("discarded unusable checkpoint, kept as %s", aside)
                self.store = DirStore(config.state.dir)
            # one replica: every checkpoint is checked at start, before any partition arrives
            self.checked = self._decode(self.store.load(set(self.store.at_start)))

    def handle(self, request: Request) -> Answer | None:
        match request:
            case Process(parts, caught_up, horizon):
                return Processed(self.process(parts, caught_up, horizon), dict(self.offsets))
            case Assign(keys, generation):
                self.end_writing()  # the store holds the newest state before any is read
                return Assigned(self.assign(set(keys), generation), dict(self.offsets))
            case Rewind(keys):
                self.end_writing()
                self.rewind(set(keys))
                return Rewound(dict(self.offsets))
            case Checkpoint(keys, topic_ids, generation, start, wait, mark):
                background = not wait and self.forks
                try:
                    ended = self.taken()
                except OSError:  # its partitions are dirty again: written now
                    if background:  # the failure is reported, the write goes on
                        self.lists = self._begin(
                            set(keys), topic_ids, generation, background, mark
                        ) or self.lists
                        raise
                    if not start:
                        raise
                    ended, self.ended = self.ended, []  # written at once below: superseded
                try:
                    merged = self._begin(set(keys), topic_ids, generation, background, mark) \
                        if start else None
                except OSError:
                    self.ended[:0] = ended  # answered with the next
                    raise
                ended += self.ended  # a checkpoint written at once
                self.ended = []
                return self.answer(ended, merged)
            case Drop(keys):
                self.end_writing()
                self.drop(set(keys))
                return None
            case Idle(keys, now):
                self.idle(set(keys), now)
                return None
        raise TypeError(f"not a request: {request!r}")

    # --- partitions come and go ------------------------------------------------------------

    def assign(self, keys: set[Key], generation: int = -1) -> dict[Key, Restored]:
        restored = {key: self.checked.pop(key) for key in keys if key in self.checked}
        try:
            stored = self.store.load(keys - self.units.keys() - restored.keys(), generation)
        except UnreadableCheckpoints as error:  # as one that cannot be decoded (``_decode``)
            if not self.discard:
                raise StartError(refusal(str(error))) from None
            for problem in error.problems.values():
                log.warning("%s; discarded, the partition starts anew", problem)
            self.store.discard(set(error.problems))
            stored = error.found
        restored |= self._decode(stored)
        answers: dict[Key, Restored] = {}
        for key in sorted(keys - self.units.keys()):
            unit = restored.get(key)
            if unit is None:
                pipeline, offset, writer, topic_id = Pipeline(self.config), None, None, None
            else:
                state, pipeline = unit
                offset, writer, topic_id = state.offset, state.writer, state.topic_id
                log.info("%s/%d: restored its checkpoint at offset %d", *key, offset)
            self.units[key] = pipeline
            self.offsets[key] = offset or 0
            answers[key] = Restored(offset, export(pipeline), writer, topic_id)
        self._join()
        return answers

    def queries(self) -> QueryState | None:
        """The merged query lists, when they are due (``queries_due``). None: nothing new."""
        return self._merged() if self.queries_due() else None

    def queries_due(self) -> bool:
        """Whether the query lists are merged now: when a partition came or went, or changed
        since they were last merged: at most every ``REPORT_EVERY`` seconds while records
        keep coming, at the next checkpoint once they stop."""
        busy, self.busy = self.busy, False
        owned = frozenset(self.units)
        now = time.monotonic()
        if owned == self.shown_units and (
            not self.shown_dirty or (busy and now - self.shown_at < REPORT_EVERY)
        ):
            return False
        self.shown_dirty, self.shown_units, self.shown_at = False, owned, now
        return True

    def _merged(self) -> QueryState:
        owner = self.units.get(self.offline) if self.offline is not None else None
        return query_state([self.units[k] for k in sorted(self.units)], owner, self.config)

    def rewind(self, keys: set[Key]) -> None:
        for key in keys & self.units.keys():
            self.offsets[key] = 0

    def idle(self, keys: set[Key], now: float) -> None:
        """The watermark of ``keys`` follows the wall clock; those where events were applied
        or sessions closed are written at the next checkpoint (exported then)."""
        for key in keys:
            pipeline = self.units.get(key)
            if pipeline is not None and pipeline.idle(now):
                self.dirty.add(key)
                self.shown_dirty = True

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
                units[key] = restore_unit(
                    data, f"checkpoint of {key[0]}/{key[1]}", self.config, key
                )
            except CheckpointError as error:
                if not self.discard:
                    raise StartError(refusal(str(error))) from None
                log.warning("%s; discarded, the partition starts anew", error)
                self.store.discard({key})
        return units

    def _join(self) -> None:
        """Which pipeline holds the offline state the others forward to, if any here."""
        self.offline = offline_key(self.units, self.config)
        for key, pipeline in self.units.items():
            pipeline.forwarding = key != self.offline

    # --- records and checkpoints -----------------------------------------------------------

    def process(
        self, parts: list[Part], judgments_caught_up: bool, horizon: float | None = None
    ) -> list[Letter]:
        letters: list[Letter] = []
        offsets, units = self.offsets, self.units
        owner = units[self.offline] if self.offline is not None else None
        if horizon is None:  # events stamped further ahead than max_future are rejected
            horizon = time.time() + self.config.sessions.max_future
        at = self.position
        for number, (key, numbers, values) in enumerate(parts):
            pipeline = units.get(key)
            if pipeline is None:
                continue  # given up while the batch was on its way; its next owner reads it
            start = bisect_left(numbers, offsets.get(key, 0))  # below: in the restored state
            if start == len(numbers):
                continue
            if pipeline is not owner:
                pipeline.forward_live = owner is not None and owner.judged.active
            pipeline.sessions.horizon = horizon
            at[0] = number
            for index, rejection in pipeline.feed_part(numbers, values, start, at, owner):
                self.rejections.record(rejection, f"{key[0]}/{key[1]}@{numbers[index]}")
                letters.append((key, numbers[index], rejection.reason.value, rejection.detail))
            offsets[key] = numbers[-1] + 1
            self.dirty.add(key)
            self.shown_dirty = self.busy = True
        if owner is not None and parts:
            owner.offline_tick(
                max(p.sessions.newest for p in units.values()), judgments_caught_up
            )
            self.dirty.add(self.offline)  # type: ignore[arg-type]
        return letters

    def checkpoint(
        self, keys: set[Key], topic_ids: dict[str, str] | None = None, generation: int = -1
    ) -> tuple[dict[Key, tuple[int, Export]], float]:
        """Make the state of ``keys`` that changed durable; returns their offsets and
        exported views (nothing is written when nothing changed)."""
        written_at = time.time()
        changed = keys & self.dirty
        self._save(sorted(changed), written_at, topic_ids or {}, generation)
        self.dirty -= changed
        return {key: (self.offsets[key], export(self.units[key])) for key in changed}, written_at

    def _save(
        self, keys: list[Key], written_at: float, topic_ids: dict[str, str], generation: int
    ) -> None:
        """Write the state of ``keys`` as it is now to the store."""
        self.store.save({
            key: codec.encode("unit", UnitState(
                key[0], key[1], self.offsets[key], written_at, self.replica, self.fingerprint,
                self.units[key].snapshot(), topic_ids.get(key[0]), generation,
            ))
            for key in keys
        }, generation)

    # --- checkpoints written in the background ----------------------------------------------

    def _begin(
        self, keys: set[Key], topic_ids: dict[str, str], generation: int, background: bool,
        mark: int = 0,
    ) -> QueryState | None:
        """Checkpoint ``keys``: in the background, or at once (what it wrote is then in
        ``ended``). Returns the query lists merged here, if any."""
        if background:
            return self.write_in_background(keys, topic_ids, generation, mark)
        written, written_at = self.checkpoint(keys, topic_ids, generation)
        self.ended.append((written, written_at, self.queries(), mark))
        return None

    @property
    def forks(self) -> bool:
        """Whether checkpoints can be written by a forked copy: of the directory store (the
        changelog's producer runs a thread of its own, which a fork does not copy)."""
        return isinstance(self.store, DirStore) and hasattr(os, "fork")

    def write_in_background(
        self, keys: set[Key], topic_ids: dict[str, str] | None = None, generation: int = -1,
        mark: int = 0,
    ) -> QueryState | None:
        """Have a forked copy of the process write the state of ``keys`` that changed, as
        it is now; the batches go on meanwhile (``end_writing`` takes the result). With
        nothing to write, the query lists are merged here when due (and returned)."""
        assert self.writing is None, "a checkpoint is being written"
        changed = keys & self.dirty
        due = self.queries_due()
        if not changed:
            return self._merged() if due else None
        written_at = time.time()
        self.copy_ended.value = 0
        parent = os.getpid()
        # the result comes back as every answer of this process goes: a Connection's message
        reader, writer = multiprocessing.Pipe(duplex=False)
        try:
            pid = os.fork()
        except OSError:
            reader.close()
            writer.close()
            raise
        if pid == 0:
            reader.close()
            self._write_copy(parent, writer, sorted(changed), written_at, topic_ids or {},
                             generation, due)
        writer.close()
        self.writing = Writing(pid, reader, {key: self.offsets[key] for key in changed},
                               written_at, mark)
        self.dirty -= changed
        return None

    def _write_copy(
        self, parent: int, writer: Connection, keys: list[Key], written_at: float,
        topic_ids: dict[str, str], generation: int, merge: bool,
    ) -> NoReturn:
        """The forked copy: write the state of ``keys`` and send the result (``Copied``: the
        views exported, the merged query lists when ``merge``), then exit."""
        status = 1
        try:
            try:
                gc.disable()  # it ends in a moment; a collection would copy every page it visits
                die_with_parent(parent)  # also when it ended before the request was made
                self._save(keys, written_at, topic_ids, generation)
                # pickled here, as ``Connection.send`` would: a failure to pickle is reported
                message = ForkingPickler.dumps(Copied(
                    {key: export(self.units[key]) for key in keys},
                    self._merged() if merge else None,
                ))
                status = 0
            except BaseException as error:  # the copy reports whatever stops it
                reason = (error.strerror if isinstance(error, OSError) and error.strerror
                          else error)
                message = ForkingPickler.dumps(
                    Copied(None, None, f"{type(error).__name__}: {reason}")
                )
            self.copy_ended.value = 1  # the consumer process asks for the result now
            writer.send_bytes(message)
        finally:  # whatever happens, the copy never returns into the state process's code
            self.copy_ended.value = 1
            os._exit(status)

    def end_writing(self) -> None:
        """Wait for the write in the background, if any; keep its result for the next
        ``Checkpoint`` answer (a failure: its partitions are dirty again)."""
        writing, self.writing = self.writing, None
        if writing is None:
            return
        result: Copied | None
        try:
            result = writing.reader.recv()
        except Exception:  # no whole message (it was killed, say): its exit status tells
            result = None
        finally:
            writing.reader.close()
            _, status = os.waitpid(writing.pid, 0)
            self.copy_ended.value = 0
        views, merged, failure = (result.views, result.lists, result.failure) if result else (
            None, None,
            f"the process writing it ended ({_exit_status(status)}) before it had written",
        )
        if views is None:
            self.dirty |= writing.offsets.keys() & self.units.keys()
            self.failure = f"checkpoint not written: {failure}"
            return
        self.ended.append((
            {key: (offset, views[key]) for key, offset in writing.offsets.items()},
            writing.written_at, merged, writing.mark,
        ))

    def taken(self) -> list[Written]:
        """The writes in the background that ended, in order (the one in progress is waited
        for); raises OSError when the last failed (what ended before it stays for the next)."""
        self.end_writing()
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise OSError(failure)
        ended, self.ended = self.ended, []
        return ended

    def answer(self, ended: list[Written], merged: QueryState | None = None) -> Checkpointed:
        """The answer to a ``Checkpoint``: what ``ended`` wrote (the newest view of each
        partition), durable as of the newest; as of now when nothing changed and nothing is
        being written. The query lists: ``merged``, else the newest ``ended`` merged."""
        written: dict[Key, tuple[int, Export]] = {}
        written_at: float | None = None
        queries = merged
        mark: int | None = None
        for part, at, lists, number in ended:
            written.update(part)
            written_at, mark = at, number
            if lists is not None and merged is None:
                queries = lists
        if written_at is None and self.writing is None:
            written_at = time.time()
        if queries is None:
            queries = self.lists
        self.lists = None
        return Checkpointed(written, written_at, dict(self.offsets), queries, mark)


def _exit_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def offline_key(keys: Iterable[Key], config: Config) -> Key | None:
    """The judgments partition holding the offline state: the lowest-numbered one owned."""
    topic = config.kafka.judgments_topic
    return min((key for key in keys if key[0] == topic), default=None)


def refusal(problem: str) -> str:
    return (
        f"{problem}; refusing to start. Fix or remove it, or start with "
        "--discard-checkpoint to set it aside and begin those partitions anew from the "
        "committed offsets"
    )


def serve(
    connection: Connection, parents_end: Connection, config: Config, replica: str,
    discard: bool, log_settings: logs.Settings, position: Any = None, copy_ended: Any = None,
) -> None:
    """The worker process: answers each request in order; ends with its parent, whatever it
    is doing (the kernel kills it when the consumer process ends: ``die_with_parent``)."""
    parent = os.getppid()
    die_with_parent(parent)
    parents_end.close()  # else a parent killed with -9 would leave this end waiting forever
    forget_inherited_lock()  # the state directory's lock goes with the consumer process
    # Ctrl-C and SIGTERM reach the whole process group: the consumer process decides when the
    # worker stops (after its final checkpoint), so the signals are not for us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logs.setup(*log_settings, secrets=secret_values(config))
    tune_for_throughput()
    try:
        states = PartitionStates(config, replica, discard)
    except StartError as error:
        connection.send(Refused(str(error)))
        return
    except CheckpointError as error:
        connection.send(Refused(refusal(str(error))))
        return
    if position is not None:
        states.position = shared_position(position)
    if copy_ended is not None:
        states.copy_ended = copy_ended
    connection.send(Ready())
    try:
        while True:
            try:
                while not connection.poll(1.0):
                    if os.getppid() != parent:
                        return  # the consumer process is gone
                request: Request = connection.recv()
            except EOFError:
                return  # the consumer process is gone
            if isinstance(request, Stop):
                return
            try:
                answer = states.handle(request)
            except StartError as error:
                answer = Refused(str(error))
            except CheckpointError as error:  # a changelog that cannot be read as a whole
                answer = Refused(refusal(str(error)))
            except (KafkaError, OSError) as error:
                answer = Failed(f"{type(error).__name__}: {error}")
            if answer is not None:
                connection.send(answer)
    finally:
        states.store.close()


def die_with_parent(parent: int) -> None:
    """Have the kernel kill this process when the thread that started it ends (Linux
    ``PR_SET_PDEATHSIG``): a batch stalled in a long computation, even one holding the GIL,
    cannot outlive the daemon. Elsewhere, the request loop's check of the parent remains."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the request was made
        os._exit(0)


PR_SET_PDEATHSIG = 1


def shared_position(array: Any) -> memoryview:
    """Two 64-bit integers both processes see: the part and offset in hand (written per
    record, read on a stall)."""
    return memoryview(array).cast("B").cast("q")


class Worker:
    """The consumer process's end of the worker: starts it, sends requests, takes answers."""

    def __init__(self, config: Config, replica: str, discard: bool) -> None:
        # fork is instant, but only safe while this process runs a single thread (the
        # command line); embedded in a threaded program (the demo), spawn a fresh interpreter
        context: multiprocessing.context.ForkContext | multiprocessing.context.SpawnContext = (
            multiprocessing.get_context("fork") if threading.active_count() == 1
            else multiprocessing.get_context("spawn")
        )
        self.connection, theirs = context.Pipe()
        shared = context.RawArray("q", 2)
        self.position = shared_position(shared)
        """The part of the batch in flight and the offset of the record in hand."""
        self.copy_ended: ctypes.c_byte = context.RawValue("b", 0)
        """Set by the state process's copy that has written a checkpoint (``written``)."""
        self.process = context.Process(
            target=serve, name="searchmon-state",
            # the Config itself: inherited by fork, pickled over a pipe by spawn; a JSON dump
            # would mask the SASL password (SecretStr) that the changelog's clients need
            args=(theirs, self.connection, config, replica, discard, logs.settings(), shared,
                  self.copy_ended),
        )
        self.process.start()
        theirs.close()
        self.in_flight = False
        """A ``Process`` request is waiting for its answer."""
        self.expect(Ready)

    def send(self, request: Request) -> None:
        self.connection.send(request)
        self.in_flight = self.in_flight or isinstance(request, Process)

    def answered(self) -> bool:
        return bool(self.connection.poll(0))

    def written(self) -> bool:
        """Whether a checkpoint written in the background has ended: a ``Checkpoint`` with
        ``start`` False takes its result."""
        return bool(self.copy_ended.value)

    def answered_within(self, seconds: float) -> bool:
        return bool(self.connection.poll(seconds))

    def expect(self, kind: type[A]) -> A:
        """The next answer, which must be a ``kind``; ``StartError`` for a refusal,
        ``WorkerFailed`` for a failure that may pass."""
        answer = self.connection.recv()
        if isinstance(answer, Processed):
            self.in_flight = False
        if isinstance(answer, Refused):
            raise StartError(answer.message)
        if isinstance(answer, Failed):
            raise WorkerFailed(answer.message)
        if not isinstance(answer, kind):
            raise RuntimeError(f"the worker answered {answer!r}, not a {kind.__name__}")
        return answer

    def request(self, request: Request, kind: type[A]) -> A | None:
        """A request whose answer may be a Kafka failure (None, logged: try again later)."""
        assert not self.in_flight, "a batch is being processed"
        self.send(request)
        try:
            return self.expect(kind)
        except WorkerFailed as failure:
            log.warning("%s failed: %s", type(request).__name__, failure)
            return None

    def close(self) -> None:
        """Stop the worker: at once when it is still working on a batch (its state is durable
        as of the last checkpoint), else once it has read ``Stop``."""
        if not self.in_flight:
            with contextlib.suppress(OSError):
                self.connection.send(Stop())
            self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=10)
        self.connection.close()
