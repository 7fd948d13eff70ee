"""The changelog store against a real broker: chunks, generations, an interrupted write, a
missing chunk."""

from __future__ import annotations

import uuid

import pytest
from kafka import KafkaProducer

from monitor.config import Config
from monitor.run.worker import PartitionStates, StartError
from monitor.state.checkpoint import CheckpointError, KafkaStore
from monitor.state.codec import decode_unit
from tests.support.broker import Broker
from tests.support.checkpoints import encode, pipeline_with


def kafka_config(broker: Broker, **state: object) -> Config:
    return Config.model_validate({
        "kafka": {"bootstrap_servers": [broker.address], "group_id": f"g-{uuid.uuid4().hex}"},
        "state": {"store": "kafka", "changelog_replication_factor": 1, "chunk_bytes": 1024,
                  **state},
    })


def test_changelog_round_trip_in_chunks_and_generations(broker: Broker) -> None:
    config = kafka_config(broker)
    store = KafkaStore(config)
    big = encode(pipeline_with(200), 200, 1.0, "r1")
    assert len(big) > 10 * config.state.chunk_bytes
    store.load({("events", 0)})  # creates the topic
    store.save({("events", 0): big, ("events", 1): encode(pipeline_with(1), 1)})
    store.save({("events", 0): encode(pipeline_with(300), 300, 2.0, "r1")})
    store.close()
    other = KafkaStore(config)  # another replica
    found = other.load({("events", 0), ("events", 1), ("events", 2)})
    assert set(found) == {("events", 0), ("events", 1)}
    unit = decode_unit(found[("events", 0)], "test")
    assert (unit.offset, unit.writer, unit.pipeline.health.accepted) == (300, "r1", 300)
    assert decode_unit(found[("events", 1)], "test").offset == 1
    other.close()


def test_an_interrupted_write_leaves_the_previous_checkpoint(broker: Broker) -> None:
    config = kafka_config(broker)
    store = KafkaStore(config)
    store.load(set())
    store.save({("events", 0): encode(pipeline_with(5), 5)})
    store.close()
    # chunks of a newer generation whose manifest never came (the writer died)
    producer = KafkaProducer(bootstrap_servers=broker.address)
    topic = f"{config.kafka.group_id}-changelog"
    producer.send(topic, key=b"c/events/0/deadbeef/0", value=b"half a checkpoint")
    producer.flush()
    producer.close()
    found = KafkaStore(config).load({("events", 0)})
    assert decode_unit(found[("events", 0)], "test").offset == 5


def test_a_missing_chunk_is_reported(broker: Broker) -> None:
    config = kafka_config(broker)
    store = KafkaStore(config)
    store.load(set())
    store.save({("events", 0): encode(pipeline_with(50), 50)})
    generation, _ = store.generations[("events", 0)]
    store.close()
    producer = KafkaProducer(bootstrap_servers=broker.address)
    topic = f"{config.kafka.group_id}-changelog"
    producer.send(topic, key=f"c/events/0/{generation}/1".encode(), value=None)  # compacted away
    producer.flush()
    producer.close()
    with pytest.raises(CheckpointError, match="missing 1 of its"):
        KafkaStore(config).load({("events", 0)})


def test_a_restore_takes_the_checkpoint_of_the_highest_group_generation(broker: Broker) -> None:
    """A replica that lost its membership may still write a checkpoint under the generation
    it held: a restore ignores it when a newer generation's owner wrote one, in whatever
    order the changelog holds them; a manifest of the format before generations is read."""
    config = kafka_config(broker)
    key = ("events", 0)
    owner, fenced = KafkaStore(config), KafkaStore(config)
    owner.load({key})
    fenced.load({key})
    legacy = KafkaProducer(bootstrap_servers=broker.address)
    chunk = encode(pipeline_with(5), 5, 1.0, "old")
    legacy.send(owner.topic, key=b"c/events/0/legacy/0", value=chunk, partition=0)
    legacy.send(owner.topic, key=b"m/events/0",
                value=b'{"generation": "legacy", "chunks": 1}', partition=0)
    legacy.flush()
    legacy.close()
    assert decode_unit(KafkaStore(config).load({key})[key], "t").writer == "old"
    fenced.save({key: encode(pipeline_with(10), 10, 2.0, "fenced")}, generation=3)
    owner.save({key: encode(pipeline_with(20), 20, 3.0, "owner")}, generation=4)
    fenced.save({key: encode(pipeline_with(30), 30, 4.0, "fenced")}, generation=3)  # late
    fenced.close()
    owner.close()
    restored = decode_unit(KafkaStore(config).load({key})[key], "t")
    assert (restored.writer, restored.offset) == ("owner", 20)


def test_a_restore_leaves_chunks_of_a_newer_generation_in_progress(broker: Broker) -> None:
    """A replica restoring under an assignment the group has already moved past must not
    delete the chunks the partition's new owner is writing (their manifest follows them): a
    restore that finds no checkpoint deletes nothing. Chunks of an older generation than the
    checkpoint a restore takes, that its manifest does not name (a crashed write), are
    deleted."""
    config = kafka_config(broker)
    key = ("events", 0)
    KafkaStore(config).load(set())  # creates the topic
    topic = f"{config.kafka.group_id}-changelog"
    producer = KafkaProducer(bootstrap_servers=broker.address)
    chunk = encode(pipeline_with(7), 7, 1.0, "owner")
    producer.send(topic, key=b"c/events/0/2.crashed/0", value=b"half a checkpoint", partition=0)
    producer.send(topic, key=b"c/events/0/5.inflight/0", value=chunk, partition=0)
    producer.flush()
    stale = KafkaStore(config)
    assert stale.load({key}, generation=4) == {}
    stale.close()  # what it would delete is delivered
    assert dict(KafkaStore(config)._read())[b"c/events/0/2.crashed/0"] is not None, (
        "no checkpoint taken, nothing deleted"
    )
    producer.send(topic, key=b"g/events/0/5",
                  value=b'{"generation": "5.inflight", "chunks": 1}', partition=0)
    producer.flush()
    producer.close()
    owner = KafkaStore(config)
    found = owner.load({key}, generation=6)
    assert decode_unit(found[key], "test").writer == "owner"
    owner.close()
    last = dict(KafkaStore(config)._read())
    assert last[b"c/events/0/2.crashed/0"] is None, "the crashed write is deleted"
    assert last[b"c/events/0/5.inflight/0"] == chunk


def test_a_restore_leaves_the_chunks_of_a_late_write_under_the_generation_it_restores(
    broker: Broker,
) -> None:
    """The partition's previous owner, fenced, may still be writing under the generation
    whose checkpoint a restore takes (the new owner has written none yet): its chunks come
    before its manifest, which then replaces the one restored. A restore must leave those
    chunks, else the next restore finds that manifest and not its chunks."""
    config = kafka_config(broker)
    key = ("events", 0)
    previous = KafkaStore(config)
    previous.load({key})
    previous.save({key: encode(pipeline_with(10), 10, 1.0, "previous")}, generation=2)
    # its next checkpoint, under the same generation: the chunks are in, the manifest not yet
    producer = KafkaProducer(bootstrap_servers=broker.address)
    chunk = encode(pipeline_with(20), 20, 2.0, "previous")
    producer.send(previous.topic, key=b"c/events/0/2.late/0", value=chunk, partition=0)
    producer.flush()
    owner = KafkaStore(config)
    assert decode_unit(owner.load({key}, generation=3)[key], "t").offset == 10
    owner.close()  # its deletions are delivered
    producer.send(previous.topic, key=b"g/events/0/2", partition=0,
                  value=b'{"generation": "2.late", "chunks": 1, "group_generation": 2}')
    producer.flush()
    producer.close()
    previous.close()
    assert decode_unit(KafkaStore(config).load({key}, generation=4)[key], "t").offset == 20


def test_a_checkpoint_missing_a_chunk_refuses_or_with_discard_starts_the_partition_anew(
    broker: Broker,
) -> None:
    """The remedy the refusal names works for a changelog checkpoint that cannot be read
    whole: with ``--discard-checkpoint`` its partition starts anew (its manifests deleted),
    and the other partitions restore theirs."""
    config = kafka_config(broker)
    broken, whole = ("events", 0), ("events", 1)
    store = KafkaStore(config)
    store.load(set())
    store.save({broken: encode(pipeline_with(50), 50), whole: encode(pipeline_with(5), 5)},
               generation=1)
    chunk_set, _ = store.generations[broken]
    store.close()
    producer = KafkaProducer(bootstrap_servers=broker.address)
    producer.send(store.topic, key=f"c/events/0/{chunk_set}/1".encode(), value=None,
                  partition=0)
    producer.flush()
    producer.close()
    refused = PartitionStates(config, "replica-1")
    with pytest.raises(StartError, match=r"missing 1 of its .*--discard-checkpoint"):
        refused.assign({broken, whole}, generation=2)
    refused.store.close()
    with pytest.raises(CheckpointError, match="missing 1 of its"):  # refused: left as it was
        KafkaStore(config).load({broken})
    states = PartitionStates(config, "replica-1", discard=True)
    answers = states.assign({broken, whole}, generation=2)
    assert answers[broken].offset is None and answers[whole].offset == 5
    states.store.close()
    assert KafkaStore(config).load({broken, whole}).keys() == {whole}, "set aside"
