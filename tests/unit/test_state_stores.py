"""Where partitions' state lives between owners: the directory store, and the ledger that
keeps a replica's exported counters monotonic (the changelog store against a real broker:
tests/integration/test_state_stores.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import Config
from monitor.core.export import Export, export
from monitor.core.pipeline import Pipeline
from monitor.state import codec
from monitor.state.checkpoint import CheckpointError, DirStore
from monitor.state.codec import decode_unit
from monitor.state.ledger import Ledger
from tests.support.checkpoints import encode, pipeline_with
from tests.support.events import query


def counters_of(pipeline: Pipeline) -> Export:
    return export(pipeline)


def test_the_directory_store_keeps_partitions_given_up(tmp_path: Path) -> None:
    store = DirStore(tmp_path)
    store.save({("events", 0): encode(pipeline_with(1), 1),
                ("events", 1): encode(pipeline_with(2), 2)})
    store.save({("events", 0): encode(pipeline_with(3), 3)})
    again = DirStore(tmp_path).load({("events", 0), ("events", 1)})
    assert {k: decode_unit(v, "t").offset for k, v in again.items()} == {
        ("events", 0): 3, ("events", 1): 2,
    }
    (tmp_path / "checkpoint.bin").write_bytes(b"searchmon-checkpoint 2\n00\nxx")
    with pytest.raises(CheckpointError, match="checksum"):  # format 2, corrupt
        DirStore(tmp_path)


def accepted(ledger: Ledger, owned: set[tuple[str, int]]) -> int:
    return ledger.exported(owned, None).accepted


def test_ledgers_count_every_event_once_while_a_partition_moves() -> None:
    """Replica A counts partition 0 up to 10 events, B takes it over from A's checkpoint and
    counts 5 more, then A gets it back from B's checkpoint: each replica's export only grows
    and the two add up to the 15 events."""
    a, b = Ledger(), Ledger()
    key = ("events", 0)
    a.acquire(key, counters_of(pipeline_with(0)), None)
    a.update(key, counters_of(pipeline_with(10)))
    assert accepted(a, {key}) == 10
    a.release(key)  # revoked
    b.acquire(key, counters_of(pipeline_with(10)), a.replica)
    assert (accepted(a, set()), accepted(b, {key})) == (10, 0)
    b.update(key, counters_of(pipeline_with(15)))
    assert accepted(a, set()) + accepted(b, {key}) == 15
    a.acquire(key, counters_of(pipeline_with(15)), b.replica)
    a.update(key, counters_of(pipeline_with(18)))
    b.release(key)
    assert (accepted(a, {key}), accepted(b, set())) == (13, 5)  # 10 + 3, and 5: 18 in all


def test_a_replica_restarting_on_its_own_checkpoint_continues_its_counters() -> None:
    ledger = Ledger()
    key = ("events", 0)
    ledger.acquire(key, counters_of(pipeline_with(0)), None)
    ledger.update(key, counters_of(pipeline_with(7)))
    restarted = encoded_round_trip(ledger)
    assert accepted(restarted, set()) == 7, "before the partition is restored"
    restarted.acquire(key, counters_of(pipeline_with(9)), ledger.replica)
    assert accepted(restarted, {key}) == 9
    # the same partition restored from a checkpoint another replica wrote meanwhile
    moved = encoded_round_trip(ledger)
    moved.acquire(key, counters_of(pipeline_with(20)), "another replica")
    assert accepted(moved, {key}) == 7, "what the other replica counted is its to export"


def test_a_partition_given_up_and_restored_from_a_newer_checkpoint_of_its_own_counts_it() -> (
    None
):
    """A replica gives a partition up at 7 events (another member held it a while and wrote
    nothing), restarts, and restores it from its own checkpoint of 12, written after the last
    view its ledger took (in the background, or just before a crash): the 5 it adds count."""
    ledger = Ledger()
    key = ("events", 0)
    ledger.acquire(key, counters_of(pipeline_with(0)), None)
    ledger.update(key, counters_of(pipeline_with(7)))
    ledger.release(key)
    restarted = encoded_round_trip(ledger)
    assert accepted(restarted, set()) == 7
    restarted.acquire(key, counters_of(pipeline_with(12)), ledger.replica)
    assert accepted(restarted, {key}) == 12
    restarted.update(key, counters_of(pipeline_with(15)))
    assert accepted(restarted, {key}) == 15
    # restored from another replica's checkpoint instead: what it counted is its own
    moved = encoded_round_trip(ledger)
    moved.acquire(key, counters_of(pipeline_with(20)), "another replica")
    assert accepted(moved, {key}) == 7


def encoded_round_trip(ledger: Ledger) -> Ledger:
    """The ledger written and read back as the daemon does at a restart."""
    data = codec.encode("ledger", ledger.snapshot())
    return Ledger.restore(codec.decode_ledger(data, "test"))


def test_no_secret_is_written_with_the_state(tmp_path: Path) -> None:
    config = Config.model_validate({"kafka": {
        "sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password": "hunter2-secret",
        "ssl_keyfile": "/etc/secret/key.pem",
    }})
    pipeline = Pipeline(config)
    ledger = Ledger()
    ledger.acquire(("events", 0), counters_of(pipeline), None)
    for data in (encode(pipeline, 0), codec.encode("ledger", ledger.snapshot())):
        assert b"hunter2-secret" not in data and b"/etc/secret" not in data


def test_checkpoints_and_the_ledger_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    import os

    from monitor.state.checkpoint import write_file

    store = DirStore(tmp_path / "state")
    store.save({("events", 0): encode(pipeline_with(2), 2)})
    write_file(tmp_path / "state" / "ledger.bin", b"ledger")
    stale = tmp_path / "state" / "other.bin.tmp"
    stale.write_bytes(b"left by a crash")
    stale.chmod(0o666)
    write_file(tmp_path / "state" / "other.bin", b"x")
    for path in (store.path(("events", 0)), tmp_path / "state" / "ledger.bin",
                 tmp_path / "state" / "other.bin"):
        assert os.stat(path).st_mode & 0o777 == 0o600, path
    assert os.stat(store.path(("events", 0)).parent).st_mode & 0o077 == 0


def test_a_replica_exports_at_most_max_query_classes_however_many_partitions_learn_them(
) -> None:
    """Three partitions learn 20 classes each, all different: the replica exports the first
    20 it sees as label values and the other 40 in ``other``, with every count kept; the
    admitted set only grows (counters stay monotonic)."""
    config = Config()
    ledger = Ledger()
    totals = 0
    for number in range(3):
        pipeline = Pipeline(config)
        for i in range(25):
            event = query(f"p{number}-{i}", float(i), f"s{number}-{i}", f"q{i}",
                          klass=f"class-{number}-{i:02d}")
            assert pipeline.feed(event) is None
        totals += 25
        ledger.acquire(("events", number), Export(), None)
        ledger.update(("events", number), export(pipeline))
        figures = ledger.exported({("events", n) for n in range(number + 1)}, None, 20)
        names = [part.slice[0] for part in figures.slices]
        assert len(names) == len(set(names)) <= 21 and "other" in names
        assert sum(part.count("queries") for part in figures.slices) == totals
    assert ledger.classes == [f"class-0-{i:02d}" for i in range(20)]
    restored = Ledger.restore(ledger.snapshot())
    assert restored.classes == ledger.classes
