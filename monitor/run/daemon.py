"""``searchmon run``: Kafka in, the pipelines, checkpoints, ``/metrics`` out.

The data flow, one module each:

- ``source``: the Kafka consumer in its group, the rebalance fence, dead letters;
- ``worker``: the partitions' pipelines and the offsets they reflect, in a second process,
  spoken to in typed messages; the one owner of offsets;
- ``coordinator``: checkpoints, the replica's ledger, the export ``/metrics`` shows, commits;
- this module: the loop that moves records from the source to the worker and follows the
  assignment, and the daemon's health.

Every source partition has its own pipeline (a unit of state that moves with the partition).
Crash safety: every ``checkpoint_interval`` and at shutdown the daemon makes the state of its
partitions that changed durable with the offsets it reflects, then commits those offsets to
Kafka (a partition being revoked is not written again: its next owner may be restoring it).
With the directory store a forked copy of the state process writes it while records go on
(the commit and the export follow once the copy has ended); the last one, at shutdown, is
written before the process exits.
A partition it acquires is restored from its newest checkpoint and read from the
checkpoint's offset; records below it (delivered again after a crash between checkpoint and
commit) are skipped: they are in the state already. ``/metrics`` shows the
state of the newest durable checkpoints, never state a crash could lose, so a counter
Prometheus has scraped never goes backwards or counts an event twice, also when partitions
move between replicas.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from kafka.errors import KafkaError
from prometheus_client.metrics_core import Metric

from monitor import compiled
from monitor.config import Config
from monitor.core.export import Export
from monitor.inputs.deadletters import DeadLetters
from monitor.inputs.events import Key
from monitor.inputs.kafka import KafkaSource, RebalanceFence, Records
from monitor.run.coordinator import LEDGER_FILE, CheckpointCoordinator
from monitor.run.worker import (
    Assign,
    Assigned,
    Drop,
    Idle,
    Process,
    Processed,
    Rewind,
    Rewound,
    StartError,
    Worker,
    WorkerFailed,
)
from monitor.serve.metrics import consumer_metrics
from monitor.serve.page import Status
from monitor.serve.routes import serve
from monitor.state import checkpoint

log = logging.getLogger(__name__)

__all__ = ["LEDGER_FILE", "Daemon", "StartError"]

STALLED = 120.0
"""``/livez`` fails when the consumer loop has not turned for this long (seconds)..."""
NO_PROGRESS = 300.0
"""...or when some partition has lag and no record was processed for this long."""
STOP_GRACE = 4.5
"""Seconds from SIGTERM to exit at the latest."""
JUDGMENTS_FIRST = 60.0
"""Seconds the events partitions wait at most, after the last record processed, for the
judgments partitions acquired to be read to their end."""


class WallClock:
    """The wall clock that events stamped in the future are judged against, never going
    back: when the system clock steps back (a bad NTP step, a VM restored from a snapshot),
    events are still judged against the time before the step (with the monotonic clock's
    progress since), so live events are not rejected as ``future_timestamp``. Each step back
    of more than a second is logged and counted (``searchmon_clock_jumps_total``)."""

    def __init__(self) -> None:
        self.offset = time.time() - time.monotonic()
        """The largest wall-minus-monotonic difference seen: the clock before any step."""
        self.last = self.offset
        self.jumps = 0

    def now(self) -> float:
        monotonic = time.monotonic()
        offset = time.time() - monotonic
        if offset < self.last - 1.0:
            self.jumps += 1
            log.warning("the wall clock went back %.1f s; events are judged against the "
                        "clock as it was before", self.last - offset)
        self.last = offset
        self.offset = max(self.offset, offset)
        return monotonic + self.offset


class PauseWatch:
    """Notices when the whole process stood still (SIGSTOP, a frozen container, a VM
    migration, a long collection pause): a thread that ticks every ``TICK`` seconds, and the
    longest gap between ticks since the last look. During such a pause no heartbeat went
    out either, so past the session timeout the group has given this replica's partitions to
    another member."""

    TICK = 0.2

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="pause-watch", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.TICK):
            now = time.monotonic()
            self.longest = max(self.longest, now - self.last)
            self.last = now

    def take(self) -> float:
        """The longest pause since the previous call (a pause still going on included)."""
        longest = max(self.longest, time.monotonic() - self.last)
        self.longest = 0.0
        return longest

    def close(self) -> None:
        self._stop.set()


class Daemon:
    """The consumer side: the loop, the assignment, lag and health."""

    def __init__(self, config: Config, discard_checkpoint: bool = False) -> None:
        self.config = config
        self.discard_checkpoint = discard_checkpoint
        try:
            checkpoint.lock_directory(config.state.dir)
        except checkpoint.DirectoryInUse as error:
            raise StartError(str(error)) from None
        self.coordinator = CheckpointCoordinator(config, discard_checkpoint)
        self.positions: dict[Key, int] = {}
        """The worker's offsets as of its latest answer (it owns them; this is a mirror)."""
        self.owned: set[Key] = set()
        self.connected = False
        self.lag: dict[Key, int] = {}
        self.source: KafkaSource | None = None
        self.letters: DeadLetters | None = None
        """The dead-letter producer, with ``[kafka] dead_letter_topic``."""
        """The Kafka source once made (its dead-letter counts are exported)."""
        self.clock = WallClock()
        self.stop = threading.Event()
        self.rebalance = RebalanceFence()
        self._worker: Worker | None = None
        self._in_flight: Records | None = None
        """The batch the worker is working on (its rejected records go to dead letters)."""
        self._parts: list[Key] = []
        """The partitions of the batch in flight, in the order sent."""
        self._sent_at = 0.0
        self._stall_logged = False
        self._backlog_logged = False
        self._assigning: frozenset[Key] | None = None
        """Partitions being restored by the state process (its answer not read yet)."""
        self._restore_after = 0.0
        self._started: float | None = time.monotonic()
        self._topics_have_partitions = False
        self._look_for_partitions = 0.0
        self._judgments_warned = False
        self.topic_ids: dict[str, str] = {}
        """The id the brokers gave each topic read, as last seen in the metadata: one that
        changes while the daemon runs was deleted and created again."""
        self.generation: int | None = None
        """The group generation the owned partitions are held under (None: none yet, or
        membership lost and not yet regained)."""
        self._fenced: tuple[int, str] | None = None
        """The membership (generation, member id) this replica fell out of: partitions wait
        for another one (a new join; generation numbers alone restart with a group that the
        coordinator forgot)."""
        self.pauses: PauseWatch | None = None
        """Started with the loop (after the state process: fork needs a single thread)."""
        kafka = config.kafka
        self._pause_bound = max(
            (kafka.session_timeout_ms - kafka.heartbeat_interval_ms) / 1000.0, 0.5
        )
        """A pause at least this long may have let the session expire (no heartbeat since
        at most a heartbeat interval before it)."""
        self._judgments_first: float | None = None
        """Since when the events partitions wait for the judgments partitions acquired to be
        read to their end (None: they do not wait)."""
        self.turned = self.progressed = time.monotonic()
        """When the consumer loop last turned; when records were last processed (or none
        waited): ``/livez``."""
        self.heard: dict[Key, float] = {}
        """When each owned partition last had records (or was acquired), monotonic."""
        self.idling: set[Key] = set()
        """The partitions whose watermark follows the wall clock (``[sessions] idle_after``)."""
        self._next_idle = 0.0

    @property
    def exported(self) -> Export:
        return self.coordinator.exported

    @property
    def dead_lettered(self) -> int:
        """Copies the dead-letter topic has acknowledged, this run and the earlier ones."""
        return self.coordinator.dead_lettered_before + (
            self.letters.acknowledged if self.letters else 0
        )

    @property
    def dead_letters_truncated(self) -> int:
        return self.letters.truncated if self.letters else 0

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until ``stop``; raises StartError when the state cannot be restored."""
        self._worker = Worker(self.config, self.coordinator.ledger.replica,
                              self.discard_checkpoint)
        self.pauses = PauseWatch()
        try:
            self.coordinator.export(self.owned)  # what was exported before a restart
            return self._consume(self._worker)
        finally:
            self._worker.close()

    def _consume(self, worker: Worker) -> int:
        status = Status(lambda: self.exported, lambda: self.coordinator.queries,
                        lambda: self.coordinator.query_state,
                        recent=lambda: self.coordinator.recent,
                        connected=lambda: self.connected)
        server = serve(self.config.http, status, self._daemon_metrics, self._not_ready,
                       self._not_alive, process=True)
        log.info("serving http://%s/metrics, the status page at / and /queries",
                 self.config.http.listen)
        if compiled.running_compiled():
            log.info("the hot path runs compiled")
        else:
            log.warning("the hot path runs as plain Python, about 1.5 times as slow: %s",
                        compiled.PLAIN_PYTHON or "the install compiled nothing (no C "
                        "compiler, or SEARCHMON_COMPILE=0)")
        source: KafkaSource | None = None
        backoff = 1.0
        try:
            while not self.stop.is_set():
                self.turned = time.monotonic()
                if source is None:
                    try:
                        if self.letters is None and self.config.kafka.dead_letter_topic:
                            self.letters = DeadLetters(self.config)
                        source = self.source = KafkaSource(self.config, self.rebalance)
                        self.connected = True
                        backoff = 1.0
                    except KafkaError as error:
                        self.connected = False
                        log.warning("cannot reach Kafka (%s); retrying in %.0f s", error, backoff)
                        self.stop.wait(backoff)
                        backoff = min(backoff * 2, 30.0)
                        continue
                try:
                    batch = source.poll(self._poll_ends(worker), self.stop)
                except KafkaError as error:
                    log.warning("poll failed: %s", error)
                    batch = {}
                self.connected = source.connected()
                # the worker processed the previous batch while this one was fetched
                self._settle(source, worker)
                self._check_membership(source, worker, batch)
                waiting = self._follow_assignment(source, worker, batch)
                if self._assigning is None:
                    waiting |= self._rewind(source, worker)
                self._send(source, worker, batch, waiting)
                self._measure_lag(source)
                self._idle(worker)
                due = self.coordinator.due()
                collect = worker.written() and self.coordinator.may_collect()
                if (due or collect) and self._assigning is None:
                    # a checkpoint begins (written in the background), or one written in the
                    # background has ended: its offsets are committed and it is exported
                    self._checkpoint(source, worker, start=due)
            if source is not None:
                self._abandon_restore(worker)
                self._checkpoint(source, worker, wait=True)
        finally:
            if source is not None:
                source.close()
            if self.letters is not None:
                self.letters.close()
            server.close()
            if self.pauses is not None:
                self.pauses.close()
        log.info("stopped")
        return 0

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the loop: the batch in hand finishes, a last checkpoint
        is written. Should that take longer than ``STOP_GRACE`` (a call into kafka-python
        blocked on an unreachable or refusing broker), the process exits anyway: its state
        is durable as of its last checkpoint, which is where the next start resumes."""
        def stop(*_: object) -> None:
            if not self.stop.is_set():
                self.stop.set()
                timer = threading.Timer(STOP_GRACE, _give_up)
                timer.daemon = True
                timer.start()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)

    def _follow_assignment(self, source: KafkaSource, worker: Worker, batch: Records) -> set[Key]:
        """Give up the partitions revoked and restore those assigned. Returns the partitions
        whose records in ``batch`` wait: each acquired partition is read again from its
        checkpoint's offset (or from its first record here), and one whose checkpoint cannot
        be read yet (changelog unreachable) stays paused until it can."""
        current = source.assignment()
        gone, new = self.owned - current, current - self.owned
        # partitions this replica exported before a restart and the group gave to another:
        # their counters stay (retired), their gauges and offline state are the other's now
        stale = set(self.coordinator.ledger.views) - current - self.owned - new
        if stale and not self.rebalance.rebalancing:
            self.coordinator.released(stale, self.owned)
            log.info("counted before the restart, now elsewhere: %s", _names(stale))
        if gone:
            worker.send(Drop(frozenset(gone)))
            for key in gone:
                self.positions.pop(key, None)
                self.lag.pop(key, None)
            self.owned -= gone
            self.coordinator.released(gone, self.owned)
            log.info("gave up %s", _names(gone))
        if self._assigning is not None:
            # a restore in progress: nothing is processed meanwhile (the state process works
            # on it), and the loop keeps polling, so a rebalance goes on without waiting
            _hold(source, batch, current)
            if not worker.answered():
                return current
            restored, self._assigning = self._assigning, None
            try:
                answer = worker.expect(Assigned)
            except WorkerFailed as failure:
                log.warning("restoring %s failed: %s", _names(restored), failure)
                source.pause(restored)
                self._restore_after = time.monotonic() + 2.0
                return current
            self._acquired(source, worker, restored, answer)
            return current  # this turn's records were fetched before the restore: read again
        if not new or time.monotonic() < self._restore_after:
            return new
        _hold(source, batch, new)  # not read yet, as far as the worker knows
        generation = source.generation()
        if generation is None or (
            self._fenced is not None and (generation, source.member_id()) == self._fenced
        ):
            source.pause(new)  # not a member of a stable generation yet: nothing is counted
            return new
        self.generation, self._fenced = generation, None
        worker.send(Assign(frozenset(new), generation))
        self._assigning = frozenset(new)
        source.pause(new)
        _hold(source, batch, current)
        return current

    def _acquired(
        self, source: KafkaSource, worker: Worker, new: frozenset[Key], answer: Assigned
    ) -> None:
        """Take over the partitions restored that the group still assigns."""
        still = new & source.assignment()
        if still != new:
            worker.send(Drop(new - still))
            log.info("%s went to another member while restored", _names(set(new - still)))
            answer = Assigned(
                {k: r for k, r in answer.restored.items() if k in still},
                {k: o for k, o in answer.offsets.items() if k in still},
            )
            new = still
        source.resume(new)
        recreated = set()
        for key, restored in answer.restored.items():
            now = source.topic_id(key[0])
            if now is not None:
                self.topic_ids[key[0]] = now
            if restored.topic_id is not None and now is not None and now != restored.topic_id:
                log.warning(
                    "%s/%d: the topic was deleted and created again (its id was %s, is %s); "
                    "reading the partition from its start", *key, restored.topic_id, now,
                )
                recreated.add(key)
            elif restored.offset is not None:  # the checkpoint, not the committed offset
                source.seek(key, restored.offset)
            else:
                committed = source.committed(key)
                if committed is not None:
                    log.info("%s/%d: no checkpoint: reading from the group's committed "
                             "offset %d", *key, committed)
                else:
                    log.info("%s/%d: no checkpoint and no committed offset: reading from "
                             "the partition's start", *key)
        if recreated:
            for key in recreated:
                source.seek_to_beginning(key)
            rewound = worker.request(Rewind(frozenset(recreated)), Rewound)
            if rewound is not None:
                answer.offsets.update(rewound.offsets)
        self.positions.update(answer.offsets)
        # The checkpoints restored are durable: their offsets are committed now, as their
        # own checkpoint would have. One whose commit the group refused (this replica fell
        # out of the group right after writing it) would else stay uncommitted until new
        # records change its partition, which may be never.
        source.commit({key: restored.offset for key, restored in answer.restored.items()
                       if restored.offset is not None and key not in recreated})
        owned = self.owned | new
        self.coordinator.acquired(
            {key: (r.view, r.writer) for key, r in answer.restored.items()}, owned
        )
        log.info("took over %s", _names(new))
        self.owned = owned  # /readyz: ready from here on
        if any(key[0] == self.config.kafka.judgments_topic for key in new):
            self._judgments_first = time.monotonic()
        self._check_judgments_topic(source)

    def _abandon_restore(self, worker: Worker) -> None:
        """Wait for a restore in progress and give its partitions up unused (the replica
        stops, or lost its membership)."""
        if self._assigning is None:
            return
        keys, self._assigning = self._assigning, None
        with contextlib.suppress(WorkerFailed):
            worker.expect(Assigned)
        worker.send(Drop(keys))

    def _check_membership(self, source: KafkaSource, worker: Worker, batch: Records) -> None:
        """Stop counting and exporting the partitions owned, before another record of them
        is processed, when this replica may have lost them: the process stood still longer
        than the session timeout allows (by its own clock), the consumer fell out of the group
        (a heartbeat or commit was refused), or the group went through a generation without
        it. The partitions are then given up at their last durable checkpoint, the consumer
        rejoins, and whatever the new generation assigns is restored from the store."""
        pause = self.pauses.take() if self.pauses is not None else 0.0
        if not self.owned:
            return
        generation, member = source.membership()
        reason = None
        if pause >= self._pause_bound:
            reason = (f"the process stood still for {pause:.1f} s, past what the session "
                      f"timeout allows ({self._pause_bound:g} s)")
        elif not member:
            reason = "the consumer fell out of the group"
        elif self.generation is not None and generation > self.generation + 1:
            reason = (f"the group went from generation {self.generation} to {generation} "
                      "without this replica")
        elif self.generation is not None and generation == self.generation + 1:
            self.generation = generation  # a rebalance this replica took part in
        if reason is not None:
            self.fence(source, worker, batch, reason)

    def fence(self, source: KafkaSource, worker: Worker, batch: Records, reason: str) -> None:
        """Give up every partition owned at its last durable checkpoint (what the group's
        next owner restores) and rejoin the group."""
        self._abandon_restore(worker)
        gone = set(self.owned)
        log.warning("lost its group membership (%s): stopped counting and exporting %s; they "
                    "are restored from their checkpoints when the group assigns them again",
                    reason, _names(gone))
        worker.send(Drop(frozenset(gone)))
        for key in gone:
            self.positions.pop(key, None)
            self.lag.pop(key, None)
        self.owned = set()
        self.coordinator.released(gone, self.owned)
        self._fenced = (
            self.generation if self.generation is not None else -1, source.member_id()
        )
        self.generation = None
        for tp in batch:  # what was fetched is read again by whoever owns it
            batch[tp] = []
        source.rejoin()

    def _check_judgments_topic(self, source: KafkaSource) -> None:
        """Say once if the judgments topic has several partitions: the offline state
        belongs to one of them, and judged samples split over several are compared apart."""
        topic = self.config.kafka.judgments_topic
        count = source.partition_count(topic)
        if count is not None and count > 1 and not self._judgments_warned:
            self._judgments_warned = True
            log.warning(
                "the judgments topic %s has %d partitions: judged samples and qrels belong "
                "to one partition's offline state each; create it with one partition "
                "(searchmon broker does)", topic, count,
            )

    def _rewind(self, source: KafkaSource, worker: Worker) -> set[Key]:
        """Partitions whose log ends below the offset the state reflects (the topic was
        deleted and created again, or truncated) are read again from their start."""
        rewound = set()
        owned = source.assignment() & self.owned
        for topic in {topic for topic, _ in owned}:
            now, known = source.topic_id(topic), self.topic_ids.get(topic)
            if now is not None and known is not None and now != known:
                keys = {key for key in owned if key[0] == topic}
                log.warning(
                    "%s: the topic was deleted and created again while read (its id was %s, "
                    "is %s); reading %s from the start", topic, known, now, _names(keys),
                )
                for key in keys:
                    source.seek_to_beginning(key)
                rewound |= keys
            if now is not None:
                self.topic_ids[topic] = now
        for key in owned - rewound:
            highwater = source.highwater(key)
            if highwater is not None and highwater < self.positions.get(key, 0):
                log.warning(
                    "%s/%d: log end %d is below the checkpointed offset %d; the topic was "
                    "recreated or truncated, reading it from its start",
                    *key, highwater, self.positions[key],
                )
                source.seek_to_beginning(key)
                rewound.add(key)
        if rewound:
            answer = worker.request(Rewind(frozenset(rewound)), Rewound)
            if answer is not None:
                self.positions.update(answer.offsets)
        return rewound

    def _send(
        self, source: KafkaSource, worker: Worker, batch: Records, waiting: set[Key]
    ) -> None:
        owned = self.owned - waiting - self._judgments_go_first(source, batch, waiting)
        parts = [
            ((tp.topic, tp.partition), [r.offset for r in records], [r.value for r in records])
            for tp, records in batch.items()
            if (tp.topic, tp.partition) in owned and records
        ]
        letters = self.letters
        if parts and letters is not None and letters.full():
            # the dead-letter topic does not take the copies: nothing more is read (or
            # rejected) until it does, so that the copies held stay bounded
            if not self._backlog_logged:
                self._backlog_logged = True
                log.warning("%d dead letters wait for the dead-letter topic (the most held): "
                            "consumption paused until it acknowledges them",
                            letters.pending)
            for tp, records in batch.items():
                if records:
                    source.seek((tp.topic, tp.partition), records[0].offset)
            letters.flush()
            return
        if self._backlog_logged and (letters is None or not letters.full()):
            self._backlog_logged = False
            log.info("the dead-letter topic acknowledged the copies held: consumption resumes")
        if parts:
            horizon = self.clock.now() + self.config.sessions.max_future
            heard = time.monotonic()
            for key, _, _ in parts:
                self.heard[key] = heard
                self.idling.discard(key)
            worker.send(Process(parts, self._judgments_caught_up(source), horizon))
            self._in_flight = batch
            self._parts = [key for key, _, _ in parts]
            self._sent_at = time.monotonic()
            self._stall_logged = False

    def _idle(self, worker: Worker) -> None:
        """The events partitions read to their end that had no record for ``[sessions]
        idle_after``: their watermark follows the wall clock (checked every second), so
        that a quiet stream finishes counting (its last events applied, its sessions
        closed) instead of waiting for the next event."""
        after = self.config.sessions.idle_after
        now = time.monotonic()
        if not after or now < self._next_idle or self._in_flight is not None or (
            self._assigning is not None
        ):
            return
        self._next_idle = now + 1.0
        for key in self.heard.keys() - self.owned:  # given up: heard anew when acquired
            del self.heard[key]
        self.idling &= self.owned
        topic = self.config.kafka.judgments_topic
        quiet = {
            key for key in self.owned
            if key[0] != topic and self.lag.get(key) == 0
            and now - self.heard.setdefault(key, now) >= after
        }
        if not quiet:
            return
        if quiet - self.idling:
            log.info("%s: no event for %g s, read to the end: the watermark follows the wall "
                     "clock", _names(quiet - self.idling), after)
            self.idling |= quiet
        worker.send(Idle(frozenset(quiet), self.clock.now()))

    def _judgments_go_first(
        self, source: KafkaSource, batch: Records, waiting: set[Key]
    ) -> set[Key]:
        """The events partitions whose records in ``batch`` wait (they are read again) while
        the judgments partitions acquired are read to their end. The live qrels join scores
        a live query with the qrels read before it: with the judgments first, the queries it
        scores do not depend on the order Kafka hands the partitions over in, and a first
        start and a restart over the same backlog score the same ones. Should the judgments
        make no progress for ``JUDGMENTS_FIRST`` seconds (a partition that cannot be
        fetched), the events go on. (Not ``pause``: kafka-python 3.0 can keep the records a
        paused partition had fetched and never fetch that partition again.)"""
        since = self._judgments_first
        if since is None:
            return set()
        if self._judgments_caught_up(source):
            self._judgments_first = None
            return set()
        if time.monotonic() - max(since, self.progressed) > JUDGMENTS_FIRST:
            log.warning(
                "the judgments topic was not read to its end within %.0f s; reading the "
                "events meanwhile (live queries are joined with the qrels read so far)",
                JUDGMENTS_FIRST,
            )
            self._judgments_first = None
            return set()
        topic = self.config.kafka.judgments_topic
        held = {key for key in self.owned if key[0] != topic}
        for tp, records in batch.items():
            key = (tp.topic, tp.partition)
            if key in held and key not in waiting and records:
                source.seek(key, records[0].offset)
        return held

    def _settle(self, source: KafkaSource, worker: Worker) -> None:
        """Wait for the batch in flight; dead-letter what it rejected. A batch that takes
        longer than ``[input] batch_budget`` is a stall: logged once with the record in
        hand, and ``/readyz`` says so until it ends."""
        if self._in_flight is None:
            return
        while not worker.answered_within(1.0):
            self._watch_stall()
        if self._stall_logged:
            log.warning("the stalled batch ended after %.1f s",
                        time.monotonic() - self._sent_at)
        answer = worker.expect(Processed)
        self.positions.update((k, v) for k, v in answer.offsets.items() if k in self.owned)
        self.progressed = time.monotonic()
        batch, self._in_flight = self._in_flight, None
        if answer.letters and self.letters is not None:
            self.letters.send(batch, answer.letters)

    def _checkpoint(
        self, source: KafkaSource, worker: Worker, start: bool = True, wait: bool = False
    ) -> None:
        self._settle(source, worker)
        self._check_membership(source, worker, {})
        answer = self.coordinator.checkpoint(
            source, worker, self.rebalance, self.owned, self.generation, self.letters,
            start=start, wait=wait,
        )
        if self.coordinator.refused:  # the group no longer counts this replica a member
            self.coordinator.refused = False
            self.fence(source, worker, {}, "the group refused its offset commit")
            return
        if answer is not None:
            self.positions.update((k, v) for k, v in answer.offsets.items() if k in self.owned)

    def _judgments_caught_up(self, source: KafkaSource) -> bool:
        topic = self.config.kafka.judgments_topic
        marks = [(key, source.highwater(key)) for key in source.assignment() if key[0] == topic]
        return bool(marks) and all(
            mark is not None and self.positions.get(key, 0) >= mark for key, mark in marks
        )

    def _measure_lag(self, source: KafkaSource) -> None:
        if self.owned:
            self._topics_have_partitions = True
        elif not self.rebalance.rebalancing and time.monotonic() >= self._look_for_partitions:
            # a metadata request when a topic is unknown: now and then, not every turn
            self._topics_have_partitions = source.topics_have_partitions()
            self._look_for_partitions = time.monotonic() + 10.0
        complete = bool(self.owned)
        for key in source.assignment():
            highwater = source.highwater(key)
            if highwater is None:
                complete = False
                continue
            self.lag[key] = lag = max(0, highwater - self.positions.get(key, 0))
            complete = complete and lag == 0
        if not any(self.lag.values()):
            self.progressed = time.monotonic()  # nothing to read is no lack of progress
        if complete and self._started is not None:
            log.info("caught up: every partition read to its end, %.1f s after start",
                     time.monotonic() - self._started)
            self._started = None  # said once

    # --- health -----------------------------------------------------------------------------

    def _poll_ends(self, worker: Worker) -> Callable[[], bool] | None:
        """What ends a poll before records come: the worker's answer to the batch in
        flight, or to the restore in progress (taken over as soon as it comes, not after a
        poll of nothing from paused partitions); None while the group rebalances with
        nothing in flight (nothing but poll then)."""
        if self._in_flight:
            return self._answered_or_stalled
        if self._assigning is not None and not self.rebalance.rebalancing:
            return worker.answered
        return None

    def _answered_or_stalled(self) -> bool:
        """Whether the worker answered the batch in flight (said while polling for the next
        records); a stall is logged meanwhile."""
        assert self._worker is not None
        if self._worker.answered():
            return True
        self._watch_stall()
        return False

    def _watch_stall(self) -> None:
        if not self._stall_logged:
            stall = self.stall()
            if stall is not None:
                self._stall_logged = True
                log.warning("%s; /readyz reports it until the batch ends", stall)

    def stall(self) -> str | None:
        """What the batch in flight is stuck on, when it has taken longer than the budget."""
        if self._in_flight is None or self._worker is None:
            return None
        took, budget = time.monotonic() - self._sent_at, self.config.input.batch_budget
        if took <= budget:
            return None
        number, offset = self._worker.position[0], self._worker.position[1]
        topic, partition = self._parts[number] if number < len(self._parts) else ("?", -1)
        return (f"a batch has been processing for {took:.0f} s (budget {budget:g} s), at "
                f"{topic}/{partition}@{offset}")

    def _not_ready(self) -> str | None:
        stall = self.stall()
        if stall is not None:
            return stall
        if not self.connected:
            return "not connected to Kafka"
        failing = self.coordinator.failing_for()
        if failing is not None:
            return f"no checkpoint for {failing:.0f} s: checkpoints are failing (see the log)"
        if self.rebalance.rebalancing:
            return "waiting for the consumer group to assign partitions"
        restoring = self.rebalance.assigned - self.owned
        if restoring:
            return "restoring the state of " + _names(set(restoring))
        if not self.owned and self._topics_have_partitions:
            return "owns no partition (the group gave them all to other members)"
        return None

    def _not_alive(self) -> str | None:
        """The consumer loop is stuck: it has not turned for ``STALLED`` seconds, or some
        partition has been behind for ``NO_PROGRESS`` seconds without a record processed."""
        now = time.monotonic()
        if now - self.turned > STALLED:
            return f"the consumer loop has not turned for {now - self.turned:.0f} s"
        behind = sum(self.lag.values())
        if behind and now - self.progressed > NO_PROGRESS:
            return (f"{behind} messages behind and none processed for "
                    f"{now - self.progressed:.0f} s")
        return None

    def _daemon_metrics(self) -> Iterator[Metric]:
        return consumer_metrics(
            self.lag, self.connected, self.coordinator.durable_as_of,
            self.dead_lettered, self.coordinator.failures, self.dead_letters_truncated,
            self.letters.pending if self.letters else 0, self.clock.jumps,
        )


def _hold(source: KafkaSource, batch: Records, keys: set[Key]) -> None:
    """The records of ``keys`` in ``batch`` are not processed now: read them again."""
    for tp, records in batch.items():
        if records and (tp.topic, tp.partition) in keys:
            source.seek((tp.topic, tp.partition), records[0].offset)


def _give_up() -> None:
    log.warning("still stopping after %.1f s (a Kafka call is blocked); exiting now, the "
                "state is durable as of the last checkpoint", STOP_GRACE)
    logging.shutdown()
    os._exit(0)


def _names(keys: Iterable[Key]) -> str:
    return ", ".join(f"{topic}/{number}" for topic, number in sorted(keys))
