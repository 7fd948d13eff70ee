"""The checkpoint coordinator of ``searchmon run``: when checkpoints are taken, the fence
against rebalances, the replica's ledger, the export ``/metrics`` shows, and the commits.

Order of a checkpoint: dead letters delivered; the worker makes the changed partitions' state
durable (fenced: a rebalance waits for it, and partitions being revoked are not written, as
their next owner may be restoring them); the offsets are committed to Kafka; then the ledger
takes the new views and is written, and the export is replaced.

With the directory store the state is written by a forked copy of the state process while the
batches go on: a checkpoint begins it, and the answer to a later one (asked for as soon as the
copy has ended) carries what it wrote. Only then are its offsets committed and its views
exported, for the partitions still held; one a rebalance is revoking waits until the group
hands it back (or gives it up); a partition given up meanwhile keeps its durable state, which
is where this replica (the only one with this directory) restores it from. The dead letters
the ledger counts are those acknowledged when the write began (``Checkpoint.mark``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from monitor.config import Config
from monitor.core.export import Export, export
from monitor.core.history import Recent, recent
from monitor.core.pipeline import Pipeline
from monitor.core.snapshots import StateError
from monitor.inputs.deadletters import DeadLetters
from monitor.inputs.events import Key
from monitor.inputs.kafka import KafkaSource, RebalanceFence
from monitor.run.worker import Checkpoint, Checkpointed, StartError, Worker, offline_key, refusal
from monitor.serve.queries import QueryState, Report, report_of
from monitor.state import checkpoint, codec, format2
from monitor.state.checkpoint import CheckpointError
from monitor.state.ledger import Ledger

log = logging.getLogger(__name__)

LEDGER_FILE = "ledger.bin"

COLLECT_RETRY = 1.0
"""Seconds before a checkpoint written in the background is asked for again after a
failure (the dead-letter topic or the state process)."""


class CheckpointCoordinator:
    def __init__(self, config: Config, discard: bool) -> None:
        self.config = config
        self.path = config.state.dir / LEDGER_FILE
        self.ledger = self._open(discard)
        self.checkpoint_time: float | None = None
        """Wall-clock time as of which the state is durable (what /metrics shows)."""
        self.started = time.time()
        self.failures = 0
        """Checkpoints that failed (state or ledger not written: a full or read-only disk, an
        unreachable changelog); each is retried at the next interval."""
        self.last_success = time.monotonic()
        """When a checkpoint last succeeded (or the daemon started)."""
        self.exported = export(Pipeline(config))  # until a checkpoint is restored or written
        self.recent = Recent()
        """The last hour and what it compares with, as of ``exported`` (the status page)."""
        self.query_state: QueryState | None = None
        """The query lists of the partitions owned, as of the newest checkpoint..."""
        self.queries: Report | None = None
        """...and what /queries shows of them."""
        self._last = time.monotonic()
        self.refused = False
        """The group refused the last checkpoint's commit (see ``checkpoint``)."""
        self.deferred: dict[Key, tuple[int, Export]] = {}
        """What a checkpoint wrote of partitions revoked while it was written, still owned
        (committed and exported when the group hands them back, dropped when released)."""
        self._collect_after = 0.0
        """After a failure, a checkpoint written in the background is asked for again from
        then on (not at every turn of the loop)."""
        self.dead_lettered_before = self.ledger.dead_lettered
        """Dead letters acknowledged in earlier runs (``searchmon_dead_lettered_total``
        continues from them)."""

    def _open(self, discard: bool) -> Ledger:
        try:
            data = checkpoint.read_file(self.path)
            if data is None:
                return Ledger()
            if data.startswith(format2.MAGIC):
                ledger = format2.migrate_ledger(data, self.config, str(self.path))
                log.info("%s: migrated from format 2", self.path)
                return ledger
            return Ledger.restore(codec.decode_ledger(data, str(self.path)))
        except (CheckpointError, StateError) as error:
            if not discard:
                raise StartError(refusal(str(error))) from None
            log.warning("%s; discarded (exported counters start anew)", error)
            checkpoint.discard_file(self.path)
            return Ledger()

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.config.state.checkpoint_interval

    def may_collect(self) -> bool:
        """Whether a checkpoint written in the background may be asked for now."""
        return time.monotonic() >= self._collect_after

    def acquired(self, views: dict[Key, tuple[Export, str | None]], owned: set[Key]) -> None:
        for key, (view, writer) in views.items():
            self.ledger.acquire(key, view, writer)
        self._save()
        self.export(owned)

    def released(self, keys: Iterable[Key], owned: set[Key]) -> None:
        for key in keys:
            self.ledger.release(key)
            self.deferred.pop(key, None)
        self._save()
        self.export(owned)

    def checkpoint(
        self, source: KafkaSource, worker: Worker, fence: RebalanceFence, owned: set[Key],
        generation: int | None = None, letters: DeadLetters | None = None,
        start: bool = True, wait: bool = True,
    ) -> Checkpointed | None:
        """Make the state durable (under the group ``generation``), commit its offsets, then
        export it (``wait`` False: begin the write in the background, and commit and export
        what the write before it made durable; ``start`` False: only that). A commit the
        group refuses (this replica is no longer a member of that generation) promotes
        nothing: the ledger and the export stay as they were, and ``refused`` tells the
        daemon to give its partitions up."""
        if start:
            self._last = time.monotonic()
        if letters is not None and not letters.flush():  # before their offsets move
            self.failures += 1  # the dead-letter topic does not acknowledge the copies
            self._collect_after = time.monotonic() + COLLECT_RETRY
            return None
        # A rebalance waits for a checkpoint in progress, and the partitions it revokes are
        # never written again. Nothing in here needs the consumer's I/O thread, which the
        # rebalance listener may be holding up.
        with fence.lock:
            keys = (owned & source.assignment()) - fence.revoked
            answer = worker.request(
                Checkpoint(
                    frozenset(keys), topic_ids(source, {key[0] for key in keys}),
                    generation if generation is not None else -1, start, wait,
                    letters.acknowledged if letters is not None else 0,
                ),
                Checkpointed,
            )
        if answer is None:
            self.failures += 1  # the worker logged why; its state stays as it was
            self._collect_after = time.monotonic() + COLLECT_RETRY
            return None
        # What was written, of the partitions still held: one revoked since the write began
        # (a rebalance under way) waits for the group to hand it back, or is given up.
        written = {**self.deferred, **answer.written}
        held = {key: result for key, result in written.items() if key in keys}
        self.deferred = {
            key: result for key, result in written.items() if key not in keys and key in owned
        }
        counted = self.ledger.dead_lettered
        if answer.mark is not None:  # the dead letters of the records it holds, no later
            self.ledger.dead_lettered = self.dead_lettered_before + answer.mark
        if held:  # else nothing changed since the last checkpoint
            if not source.commit({key: offset for key, (offset, _) in held.items()}):
                self.refused = True
                return None
            for key, (_, view) in held.items():
                self.ledger.update(key, view)
        if (held or self.ledger.dead_lettered != counted) and not self._save():
            return None
        if held:
            self.export(owned)
        if answer.queries is not None:
            self.query_state, self.queries = answer.queries, report_of(answer.queries)
        if answer.written_at is not None:  # else a write began, and none has ended yet
            self.checkpoint_time = answer.written_at
            self.last_success = time.monotonic()
        return answer

    def failing_for(self) -> float | None:
        """Seconds since the last successful checkpoint when checkpoints are failing (more
        than three intervals, at least 5 s), else None: ``/readyz`` is 503 then."""
        late = time.monotonic() - self.last_success
        bound = max(3 * self.config.state.checkpoint_interval, 5.0)
        return late if self.failures and late > bound else None

    @property
    def durable_as_of(self) -> float:
        """What ``searchmon_checkpoint_timestamp_seconds`` says: the newest durable
        checkpoint, or the process start until there is one (so that a daemon that never
        manages one is seen to be late, instead of exporting nothing)."""
        return self.checkpoint_time if self.checkpoint_time is not None else self.started

    def export(self, owned: set[Key]) -> None:
        """Counters: everything this replica counted; gauges: the partitions it owns; the
        offline gauges: those of the judgments partition it holds, also before a restart's
        restore (so alerts on them neither resolve nor fire again because of it). Its
        counters go into the ledger's history, and the status page's last hour is taken."""
        classes = self.config.query_classes
        self.exported = self.ledger.exported(
            owned, offline_key(self.ledger.views, self.config),
            None if classes.names else classes.max_query_classes,
        )
        self.ledger.history.observe(self.exported)  # written with the ledger's next save
        self.recent = recent(self.ledger.history, self.exported)

    def _save(self) -> bool:
        """Write the ledger; False (logged, counted, retried at the next checkpoint) when
        the disk refuses it: the daemon keeps running and serving."""
        try:
            checkpoint.write_file(self.path, codec.encode("ledger", self.ledger.snapshot()))
        except OSError as error:
            self.failures += 1
            log.warning("cannot write %s (%s); retrying at the next checkpoint", self.path,
                        error.strerror or error)
            return False
        return True


def topic_ids(source: KafkaSource, topics: Iterable[str]) -> dict[str, str]:
    """The topic ids of the brokers' metadata (Kafka 2.8 and later give them)."""
    ids = {}
    for topic in topics:
        found = source.topic_id(topic)
        if found is not None:
            ids[topic] = found
    return ids
