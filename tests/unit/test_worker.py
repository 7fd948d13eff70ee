"""The partition state worker in-process: a restart over a backlog exports what a run without
one exports, the live qrels join included."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import zlib
from pathlib import Path

import pytest

from monitor.config import Config
from monitor.core.export import Export, export
from monitor.inputs.generate import Traffic, World, events
from monitor.run.worker import (
    Assign,
    Checkpoint,
    Checkpointed,
    Part,
    PartitionStates,
    Process,
)
from monitor.state.checkpoint import DIRECTORY
from monitor.state.codec import PREFIX
from tests.support.checkpoints import sans_curves
from tests.support.wait import wait_for

EVENTS, JUDGMENTS = "search-events", "search-judgments"
HOLDER = (JUDGMENTS, 0)
PARTITIONS = [(EVENTS, 0), (EVENTS, 1), (EVENTS, 2), HOLDER]


def partitioned(judged_every: float) -> dict[tuple[str, int], list[bytes]]:
    """Half an hour of generated traffic with qrels (and judged samples every
    ``judged_every`` seconds, 0: none), keyed as the producers key it: events by session
    over three partitions, judged messages to one."""
    stream = events(World.build(11, size=400), Traffic(
        seed=11, sessions_per_second=5.0, duration=1800.0, qrels=True,
        judged_every=judged_every, judged_queries=120,
    ))
    logs: dict[tuple[str, int], list[bytes]] = {key: [] for key in PARTITIONS}
    for _, key, line in stream:
        if b'"type":"qrels"' in line or b'"type":"judgment"' in line:
            logs[HOLDER].append(line)
        else:
            logs[(EVENTS, zlib.crc32(key.encode()) % 3)].append(line)
    return logs


def polls(logs: dict[tuple[str, int], list[bytes]]) -> list[list[Part]]:
    """The logs in batches as a consumer hands them over: a few hundred records of each
    partition per batch, the judgments partition's first."""
    read = dict.fromkeys(logs, 0)
    batches = []
    size = 0
    while any(read[key] < len(log) for key, log in logs.items()):
        size = size % 5 + 1
        batch: list[Part] = []
        for key in [HOLDER, *(k for k in PARTITIONS if k != HOLDER)]:
            start, end = read[key], min(len(logs[key]), read[key] + 97 * size)
            if end > start:
                batch.append((key, list(range(start, end)), list(logs[key][start:end])))
                read[key] = end
        batches.append(batch)
    return batches


def views(states: PartitionStates) -> dict[tuple[str, int], Export]:
    return {key: export(states.units[key]) for key in PARTITIONS}


def as_format_4(data: bytes) -> bytes:
    """A unit checkpoint as format 4 wrote it: no query lists, worsened queries or drift."""
    payload = json.loads(data.split(b"\n", 2)[2])
    del payload["pipeline"]["queries"]
    del payload["pipeline"]["judged"]["worsened"], payload["pipeline"]["judged"]["drift"]
    encoded = json.dumps(payload).encode()
    return PREFIX + b"4 unit\n" + hashlib.sha256(encoded).hexdigest().encode() + b"\n" + encoded


def run(
    state: Path, batches: list[list[Part]], checkpoints: set[int], restart: int | None = None,
    upgrade: bool = False,
) -> PartitionStates:
    """Every batch through one worker, a checkpoint before the batches of ``checkpoints``;
    before batch ``restart``, a checkpoint and a new worker on the same state directory
    (``upgrade``: the checkpoints rewritten as format 4 first)."""
    config = Config.model_validate({"state": {"dir": str(state)}})
    keys = frozenset(PARTITIONS)
    states = PartitionStates(config, "replica-1")
    states.handle(Assign(keys))
    for number, batch in enumerate(batches):
        if number in checkpoints or number == restart:
            states.handle(Checkpoint(keys))
        if number == restart:
            for path in (state / DIRECTORY).iterdir() if upgrade else ():
                path.write_bytes(as_format_4(path.read_bytes()))
            states = PartitionStates(config, "replica-1")
            states.handle(Assign(keys))
        states.handle(Process(batch, True))
    return states


@pytest.mark.parametrize(("judged_every", "restart", "upgrade"), [
    (0.0, 3, False), (0.0, 17, False), (600.0, 9, False), (600.0, 9, True),
])
def test_a_restart_exports_the_live_join_of_a_run_without_one(
    tmp_path: Path, judged_every: float, restart: int, upgrade: bool
) -> None:
    """A checkpoint reads the offline state for the query lists (the worsened queries), and
    the daemon takes one whenever its interval says so: neither that nor a restart (nor an
    upgrade from format 4) may change which live queries are scored, or the scores, windows
    and samples exported."""
    batches = polls(partitioned(judged_every))
    assert len(batches) > 20
    whole = run(tmp_path / "whole", batches, {5, 11})
    again = run(tmp_path / "again", batches, set(), restart, upgrade)
    assert whole.offline == again.offline == HOLDER
    if upgrade:  # format 4 kept no precision-recall curves: the rest is the same
        assert {k: sans_curves(v) for k, v in views(again).items()} == {
            k: sans_curves(v) for k, v in views(whole).items()}
    else:
        assert views(again) == views(whole)
    (overall,) = [
        s.histogram for s in views(whole)[HOLDER].scores
        if s.source == "live" and s.slice == ("all",) and s.measure == "nDCG@10"
    ]
    assert sum(overall.counts) > 1000, "live queries were scored"
    assert not whole.units[HOLDER].judged.pending, (
        "what is exported between batches holds every query joined"
    )


def test_a_restart_from_a_checkpoint_written_in_the_background_counts_every_record_once(
    tmp_path: Path,
) -> None:
    """A forked copy writes the state as of the checkpoint's start while the batches go on;
    its answer comes later, with the offsets and views of that start. A state process
    killed after it (its later batches lost) restores that state and reads every record
    after those offsets again: what it exports is what a run without a restart exports."""
    batches = polls(partitioned(0.0))
    keys = frozenset(PARTITIONS)
    whole = run(tmp_path / "whole", batches, set())
    config = Config.model_validate({"state": {"dir": str(tmp_path / "again")}})
    first = PartitionStates(config, "replica-1")
    assert first.forks
    first.copy_ended = multiprocessing.RawValue("b", 0)  # as in the daemon
    first.handle(Assign(keys))
    for batch in batches[:9]:
        first.handle(Process(batch, True))
    began = first.handle(Checkpoint(keys, wait=False))
    assert isinstance(began, Checkpointed)
    assert began.written == {} and began.written_at is None, "nothing ended yet"
    at_start, offsets = views(first), dict(first.offsets)
    for batch in batches[9:14]:  # the copy writes meanwhile; these are lost with the process
        first.handle(Process(batch, True))
    assert views(first) != at_start
    wait_for(lambda: first.copy_ended.value == 1, "the copy says it has written the checkpoint")
    ended = first.handle(Checkpoint(keys, start=False, wait=False))
    assert isinstance(ended, Checkpointed) and ended.written_at is not None
    assert ended.written == {key: (offsets[key], at_start[key]) for key in PARTITIONS}
    assert first.writing is None and not first.ended and first.copy_ended.value == 0
    again = PartitionStates(config, "replica-1")
    again.handle(Assign(keys))
    assert again.offsets == offsets and views(again) == at_start
    for batch in batches[9:]:  # read again from the checkpoint's offsets
        again.handle(Process(batch, True))
    assert views(again) == views(whole)


def test_a_write_in_the_background_that_fails_is_reported_and_written_again(
    tmp_path: Path,
) -> None:
    """A copy that cannot write (here its directory is a file) says it has ended, and
    why: the answer that takes it fails, and its partitions, dirty again, are written
    again at once by a new copy."""
    batches = polls(partitioned(0.0))[:6]
    keys = frozenset(PARTITIONS)
    config = Config.model_validate({"state": {"dir": str(tmp_path)}})
    states = PartitionStates(config, "replica-1")
    states.copy_ended = multiprocessing.RawValue("b", 0)  # as in the daemon
    states.handle(Assign(keys))
    for batch in batches:
        states.handle(Process(batch, True))
    (tmp_path / DIRECTORY).write_text("not a directory")
    states.handle(Checkpoint(keys, wait=False))
    assert not states.dirty and states.writing is not None
    wait_for(lambda: states.copy_ended.value == 1, "the copy says it has ended")
    with pytest.raises(OSError, match="checkpoint not written: FileExistsError"):
        states.handle(Checkpoint(keys, start=False, wait=False))
    assert states.writing is not None and not states.dirty, "written again at once"
    wait_for(lambda: states.copy_ended.value == 1, "the second copy says it has ended")
    (tmp_path / DIRECTORY).unlink()
    with pytest.raises(OSError, match="checkpoint not written"):
        states.handle(Checkpoint(keys, start=False, wait=False))
    wait_for(lambda: states.copy_ended.value == 1, "the third copy says it has ended")
    answer = states.handle(Checkpoint(keys, start=False, wait=False))
    assert isinstance(answer, Checkpointed)
    assert set(answer.written) == set(keys) and answer.written_at is not None
    restored = PartitionStates(config, "replica-1")
    restored.handle(Assign(keys))
    assert views(restored) == views(states)


def test_a_write_in_the_background_whose_result_cannot_be_sent_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy that has written but cannot send its result (here a view that cannot be
    pickled) says so: the answer that takes it fails with the reason, and its partitions
    are written again."""
    batches = polls(partitioned(0.0))[:3]
    keys = frozenset(PARTITIONS)
    states = PartitionStates(Config.model_validate({"state": {"dir": str(tmp_path)}}),
                             "replica-1")
    states.copy_ended = multiprocessing.RawValue("b", 0)  # as in the daemon
    states.handle(Assign(keys))
    for batch in batches:
        states.handle(Process(batch, True))
    monkeypatch.setattr("monitor.run.worker.export", lambda pipeline: lambda: pipeline)
    states.handle(Checkpoint(keys, wait=False))
    wait_for(lambda: states.copy_ended.value == 1, "the copy says it has ended")
    with pytest.raises(OSError, match=r"checkpoint not written: .*[Pp]ickl"):
        states.handle(Checkpoint(keys, start=False, wait=False))
    assert states.writing is not None, "written again at once"
    monkeypatch.undo()
    wait_for(lambda: states.copy_ended.value == 1, "the second copy says it has ended")
    with pytest.raises(OSError, match="checkpoint not written"):  # forked before the undo
        states.handle(Checkpoint(keys, start=False, wait=False))
    wait_for(lambda: states.copy_ended.value == 1, "the third copy says it has ended")
    answer = states.handle(Checkpoint(keys, start=False, wait=False))
    assert isinstance(answer, Checkpointed) and set(answer.written) == set(keys)
