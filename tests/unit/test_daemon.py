"""The daemon's own checks, without a broker: when /livez says the loop is not alive; what
the checkpoint coordinator commits and exports of what the state process wrote."""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast

from monitor.config import Config
from monitor.core.export import Export, export
from monitor.core.pipeline import Pipeline
from monitor.inputs.kafka import KafkaSource, RebalanceFence
from monitor.run.coordinator import CheckpointCoordinator
from monitor.run.worker import Checkpoint, Checkpointed, Worker


def test_livez_fails_when_the_loop_stalls_or_makes_no_progress_while_behind(
    tmp_path: Path,
) -> None:
    from monitor.run.daemon import NO_PROGRESS, STALLED, Daemon

    daemon = Daemon(Config.model_validate({"state": {"dir": str(tmp_path)}}))
    assert daemon._not_alive() is None
    daemon.lag[("search-events", 0)] = 0
    daemon.progressed -= 10 * NO_PROGRESS
    assert daemon._not_alive() is None, "nothing to read is no lack of progress"
    daemon.lag[("search-events", 0)] = 5
    assert "5 messages behind and none processed" in (daemon._not_alive() or "")
    daemon.progressed = time.monotonic()
    daemon.turned -= STALLED + 1
    assert "has not turned" in (daemon._not_alive() or "")


class Source:
    """What the checkpoint coordinator asks of the Kafka source."""

    def __init__(self, assigned: set[tuple[str, int]]) -> None:
        self.assigned = assigned
        self.commits: list[dict[tuple[str, int], int]] = []

    def assignment(self) -> set[tuple[str, int]]:
        return set(self.assigned)

    def commit(self, offsets: dict[tuple[str, int], int]) -> bool:
        self.commits.append(dict(offsets))
        return True

    def topic_id(self, topic: str) -> str | None:
        return None


class StateProcess:
    """The state process's answers, in order; the requests it was sent."""

    def __init__(self, *answers: Checkpointed) -> None:
        self.answers = list(answers)
        self.requests: list[Checkpoint] = []

    def request(self, request: Checkpoint, kind: type[Checkpointed]) -> Checkpointed:
        self.requests.append(request)
        return self.answers.pop(0)


def test_a_checkpoint_of_a_partition_revoked_while_it_was_written_waits_for_it_to_return(
    tmp_path: Path,
) -> None:
    """A write in the background ends while a rebalance is revoking one of the partitions it
    wrote: that partition's offset is not committed then; when the group hands it back (no
    restore: it never left), it is committed and exported with the next answer. The dead
    letters counted are those acknowledged when the write began (its mark), not later."""
    coordinator = CheckpointCoordinator(
        Config.model_validate({"state": {"dir": str(tmp_path)}}), False
    )
    kept, moving = ("search-events", 0), ("search-events", 1)
    owned = {kept, moving}
    for key in owned:
        coordinator.acquired({key: (Export(), None)}, owned)
    views = {key: export(Pipeline(Config())) for key in owned}
    source = Source(set(owned))
    fence = RebalanceFence()
    fence.revoked = {moving}
    process = StateProcess(
        Checkpointed({kept: (10, views[kept]), moving: (20, views[moving])}, 1.0, mark=3),
        Checkpointed({}, None),
    )
    worker = cast(Worker, process)
    kafka = cast(KafkaSource, source)
    coordinator.checkpoint(kafka, worker, fence, owned, start=False, wait=False)
    assert source.commits == [{kept: 10}]
    assert coordinator.ledger.views[kept] is views[kept]
    assert coordinator.ledger.views[moving] is not views[moving]
    assert coordinator.ledger.dead_lettered == 3
    fence.revoked.clear()  # handed back
    coordinator.checkpoint(kafka, worker, fence, owned, wait=False)
    assert source.commits[-1] == {moving: 20}
    assert coordinator.ledger.views[moving] is views[moving]
    assert coordinator.ledger.dead_lettered == 3, "no write reported: the count stays"
    assert [r.start for r in process.requests] == [False, True]
    assert not coordinator.deferred
    # a write of the revoked partition alone: nothing committed, its mark counted and kept
    fence.revoked = {moving}
    process.answers.append(Checkpointed({moving: (30, Export())}, 2.0, mark=5))
    coordinator.checkpoint(kafka, worker, fence, owned, start=False, wait=False)
    assert source.commits[-1] == {moving: 20} and moving in coordinator.deferred
    again = CheckpointCoordinator(Config.model_validate({"state": {"dir": str(tmp_path)}}), False)
    assert again.ledger.dead_lettered == 5
