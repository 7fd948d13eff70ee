"""Dead letters: a copy too large for the producer is cut to fit (the partition goes on), and a
copy counts, and its offset is committed past, only once the dead-letter topic acknowledged it
(also when the broker restarted under an idempotent producer, which then goes fatal)."""

from __future__ import annotations

import contextlib
import hashlib
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError, MessageSizeTooLargeError, TopicAlreadyExistsError
from kafka.future import Future
from kafka.structs import OffsetAndMetadata, TopicPartition

from monitor.config import Config, KafkaConfig
from monitor.inputs.deadletters import (
    MAX_COPY_BYTES,
    DeadLetters,
)
from monitor.inputs.kafka import KafkaSource, RebalanceFence, Records
from tests.support.broker import FAST_GROUP, Broker, free_port
from tests.support.daemon import DEAD, log_of, start_daemon
from tests.support.http import scrape
from tests.support.wait import wait_for

BIG = 1_048_400
"""An invalid message under the broker's limit whose copy, with its headers, is over the
producer's ``max_request_size`` (1048576). (The 1,048,000 bytes reported are over it with a
detail of some 500 bytes; the daemon's ``invalid_json`` detail is 47.)"""


# --- the source against a real broker --------------------------------------------------------

def source_config(broker: Broker, events: str, dead: str) -> Config:
    return Config(kafka=KafkaConfig.model_validate({
        "bootstrap_servers": [broker.address], "group_id": f"g-{uuid.uuid4().hex}",
        "events_topic": events, "judgments_topic": f"{events}-judgments",
        "dead_letter_topic": dead, **FAST_GROUP,
    }))


def poll_all(source: KafkaSource, topic: str, count: int) -> Records:
    """The first ``count`` records of partition 0 of ``topic``, polled by ``source``."""
    records: list[ConsumerRecord] = []
    stop = threading.Event()
    deadline = time.monotonic() + 60
    while len(records) < count:
        assert time.monotonic() < deadline, f"polled {len(records)} of {count}"
        for tp, found in source.poll(None, stop).items():
            if tp.topic == topic:
                records.extend(found)
    return {TopicPartition(topic, 0): records}


def restart_with_topics(broker: Broker, events: str) -> None:
    """Restart ``broker`` (empty) and create the topics again, unless a client's metadata
    request created them first (Tansu does, with 4 partitions: the tests use partition 0)."""
    broker.stop()
    broker.start()
    for name in (events, f"{events}-judgments", DEAD):
        with contextlib.suppress(TopicAlreadyExistsError):
            broker.create_topics({name: 1})


def produce(broker: Broker, topic: str, values: list[bytes]) -> None:
    """``values`` to partition 0 of ``topic``."""
    producer = KafkaProducer(bootstrap_servers=broker.address, acks="all")
    try:
        for value in values:
            producer.send(topic, value, partition=0).get(timeout=30)
    finally:
        producer.close(timeout=10)


def read_letters(broker: Broker, topic: str) -> list[ConsumerRecord]:
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.address,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    try:
        return list(consumer)
    finally:
        consumer.close()


def test_a_rejected_message_too_large_to_copy_whole_is_truncated(broker: Broker) -> None:
    """Was: MessageSizeTooLargeError out of ``dead_letter``, which killed the daemon."""
    events, dead = f"ev-{uuid.uuid4().hex}", f"dl-{uuid.uuid4().hex}"
    broker.create_topics({events: 1, f"{events}-judgments": 1, dead: 1})
    big = b"x" * BIG
    broker.produce(events, [(b"key", big), (b"key", b"not json")])
    source = KafkaSource(source_config(broker, events, dead), RebalanceFence())
    letters = DeadLetters(source.config)
    try:
        batch = poll_all(source, events, 2)
        letters.send(batch, [((events, 0), 0, "invalid_json", "bad"),
                                   ((events, 0), 1, "invalid_json", "bad")])
        assert letters.flush()
        assert (letters.acknowledged, letters.truncated) == (2, 1)
        assert letters.pending == 0
    finally:
        letters.close()
        source.close()
    first, second = read_letters(broker, dead)
    headers = dict(first.headers)
    assert first.key == b"key" and big.startswith(first.value)
    assert MAX_COPY_BYTES - 1000 < len(first.value) < BIG
    assert headers["searchmon.truncated"] == str(BIG).encode()
    assert headers["searchmon.sha256"] == hashlib.sha256(big).hexdigest().encode()
    assert headers["searchmon.source.topic"] == events.encode()
    assert headers["searchmon.source.offset"] == b"0"
    assert headers["searchmon.reason"] == b"invalid_json"
    assert (second.key, second.value) == (b"key", b"not json"), "copied unchanged"
    assert "searchmon.truncated" not in dict(second.headers)


class BrokerLimit:
    """The real producer, before a broker whose limit is ``limit`` bytes of value (Tansu
    enforces none): larger records fail as Kafka's MESSAGE_TOO_LARGE answer does."""

    def __init__(self, producer: KafkaProducer, limit: int) -> None:
        self.producer, self.limit = producer, limit

    def send(self, topic: str, value: bytes | None = None, **rest: Any) -> Any:
        if len(value or b"") > self.limit:
            return Future().failure(MessageSizeTooLargeError())
        return self.producer.send(topic, value=value, **rest)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)


def test_a_copy_the_broker_refuses_as_too_large_is_replaced_by_its_headers(
    broker: Broker,
) -> None:
    events, dead = f"ev-{uuid.uuid4().hex}", f"dl-{uuid.uuid4().hex}"
    broker.create_topics({events: 1, f"{events}-judgments": 1, dead: 1})
    broker.produce(events, [(b"key", b"y" * 5000)])
    source = KafkaSource(source_config(broker, events, dead), RebalanceFence())
    letters = DeadLetters(source.config)
    try:
        letters.producer = BrokerLimit(letters.producer, 1000)
        batch = poll_all(source, events, 1)
        letters.send(batch, [((events, 0), 0, "invalid_json", "bad")])
        assert letters.flush()
        assert (letters.acknowledged, letters.truncated) == (1, 1)
        assert isinstance(letters.producer, BrokerLimit), "not replaced for a size refusal"
    finally:
        letters.close()
        source.close()
    (letter,) = read_letters(broker, dead)
    headers = dict(letter.headers)
    assert (letter.key, letter.value) == (b"", b"")
    assert headers["searchmon.truncated"] == b"5000"
    assert headers["searchmon.sha256"] == hashlib.sha256(b"y" * 5000).hexdigest().encode()
    assert headers["searchmon.key.sha256"] == hashlib.sha256(b"key").hexdigest().encode()
    assert headers["searchmon.source.offset"] == b"0"


def test_copies_failed_by_a_fatal_producer_are_sent_again_and_counted_when_acknowledged(
) -> None:
    """After a broker restart kafka-python's idempotent producer fails its sends and goes
    fatal (InitProducerId: UnknownError); ``flush()`` does not raise. Was: the copy lost, the
    flush said delivered."""
    broker = Broker().start()
    events = "ev"
    source = None
    try:
        broker.create_topics({events: 1, f"{events}-judgments": 1, DEAD: 1})
        broker.produce(events, [(b"k", b"not json 0"), (b"k", b"not json 1")])
        source = KafkaSource(source_config(broker, events, DEAD), RebalanceFence())
        letters = DeadLetters(source.config)
        batch = poll_all(source, events, 2)
        reported = letters.send(batch, [((events, 0), 0, "invalid_json", "bad")])
        assert letters.flush()
        assert letters.acknowledged == 1
        restart_with_topics(broker, events)  # empty: the producer's id is unknown to it
        reported += letters.send(batch, [((events, 0), 1, "invalid_json", "bad")])
        deadline = time.monotonic() + 90
        while not letters.flush():
            assert letters.acknowledged == 1, "a copy not acknowledged is not counted"
            assert letters.pending == 1
            assert time.monotonic() < deadline, "the copy is never acknowledged"
        copies = read_letters(broker, DEAD)
        assert [dict(r.headers)["searchmon.source.offset"] for r in copies] == [b"1"]
        assert copies[0].value == b"not json 1"
        assert letters.acknowledged == 2
        assert reported <= letters.acknowledged
        assert reported + letters.send(batch, []) == 2, "reported once acknowledged"
    finally:
        if source is not None:
            letters.close()
            source.close()
        broker.stop()


# --- the daemon ------------------------------------------------------------------------------

def topics_lines(events: str) -> str:
    return f'events_topic = "{events}"\njudgments_topic = "{events}-judgments"\n'


def test_the_daemon_goes_on_past_a_message_too_large_to_copy(tmp_path: Path) -> None:
    """Was: the daemon died at the first such message, and again at every restart."""
    broker = Broker().start()
    events = "ev"
    port = free_port()
    daemon = None
    try:
        broker.create_topics({events: 1, f"{events}-judgments": 1, DEAD: 1})
        broker.produce(events, [(None, b"x" * BIG), (None, b"not json")])
        daemon = start_daemon(tmp_path, broker, "big", port, kafka=topics_lines(events))
        deadline = time.monotonic() + 90
        while True:
            assert daemon.poll() is None, "the daemon died:\n" + log_of(tmp_path)
            letters = read_letters(broker, DEAD)
            if len(letters) == 2:
                break
            assert time.monotonic() < deadline, f"{len(letters)} dead letters"
            time.sleep(0.5)
        offsets = [dict(r.headers)["searchmon.source.offset"] for r in letters]
        assert sorted(offsets) == [b"0", b"1"]
        big, small = sorted(letters, key=lambda r: dict(r.headers)["searchmon.source.offset"])
        assert dict(big.headers)["searchmon.truncated"] == str(BIG).encode()
        assert small.value == b"not json"
        assert "truncated" in log_of(tmp_path)
    finally:
        stop_both(daemon, broker)
    assert daemon.returncode == 0, log_of(tmp_path)


def stop_both(daemon: subprocess.Popen[str] | None, broker: Broker) -> None:
    if daemon is not None:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    broker.stop()


def committed(broker: Broker, group: str, topic: str) -> int | None:
    """The offset ``group`` committed for partition 0 of ``topic`` (None: none yet)."""
    consumer = KafkaConsumer(bootstrap_servers=broker.address, group_id=group,
                             enable_auto_commit=False)
    try:
        offset = consumer.committed(TopicPartition(topic, 0))
    except KafkaError:  # the group coordinator is not there yet
        return None
    finally:
        consumer.close(autocommit=False)
    return None if offset is None else int(offset)


def test_no_offset_is_committed_past_a_rejected_message_before_its_copy_is_acknowledged(
    tmp_path: Path,
) -> None:
    """A broker restart under the daemon: its dead-letter producer fails, then goes fatal.
    Was: the copies lost, counted, and their offsets committed."""
    broker = Broker().start()
    events, group = "ev", "restart"
    port = free_port()
    daemon = None
    try:
        broker.create_topics({events: 1, f"{events}-judgments": 1, DEAD: 1})
        broker.produce(events, [(None, b"not json 0")])
        daemon = start_daemon(tmp_path, broker, group, port, kafka=topics_lines(events))
        def first_committed() -> int | None:
            assert daemon.poll() is None, log_of(tmp_path)
            return committed(broker, group, events)

        # its copy acknowledged, then committed
        wait_for(first_committed, "the first rejected message committed", 90,
                 until=lambda offset: offset == 1, every=0.5)
        assert len(read_letters(broker, DEAD)) == 1
        restart_with_topics(broker, events)  # empty: the producer's id is unknown to it
        produce(broker, events, [f"not json {n}".encode() for n in range(4)])
        # the daemon reads offsets 1-3 (0 too when it finds the log short at first)
        deadline = time.monotonic() + 120
        while True:
            assert daemon.poll() is None, log_of(tmp_path)
            counted = scrape(port).get("searchmon_dead_lettered_total", 0.0)
            position = committed(broker, group, events) or 0
            letters = read_letters(broker, DEAD)  # read after the counter and the commit
            copied = {int(dict(r.headers)["searchmon.source.offset"]) for r in letters}
            assert set(range(1, position)) <= copied, (
                f"committed {position} with copies of {sorted(copied)} only"
            )
            assert counted <= 1 + len(letters), "counted copies that were not acknowledged"
            if position == 4 and {1, 2, 3} <= copied:
                break
            assert time.monotonic() < deadline, (
                f"committed {position}, copies of {sorted(copied)}"
            )
            time.sleep(0.5)
    finally:
        stop_both(daemon, broker)
    assert daemon.returncode == 0, log_of(tmp_path)


def test_copies_waiting_for_the_dead_letter_topic_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker that stops answering (SIGSTOP) while copies are sent: once the copies held
    reach the bound, ``dead_letters_full`` says so (the daemon then reads nothing more);
    once the broker acknowledges them, it no longer does."""
    import os

    from monitor.inputs import deadletters as module

    monkeypatch.setattr(module, "MAX_PENDING_COPIES", 3)
    broker = Broker().start()
    events, dead = "ev", "dl"
    source = None
    try:
        broker.create_topics({events: 1, f"{events}-judgments": 1, dead: 1})
        produce(broker, events, [b"bad %d" % i for i in range(5)])
        source = KafkaSource(source_config(broker, events, dead), RebalanceFence())
        letters = DeadLetters(source.config)
        batch = poll_all(source, events, 5)
        letters.send(batch, [((events, 0), 0, "invalid_json", "bad")])
        assert letters.flush() and not letters.full()
        assert broker.process is not None
        os.killpg(broker.process.pid, signal.SIGSTOP)
        try:
            letters.send(batch, [((events, 0), i, "invalid_json", "bad") for i in range(1, 5)])
            assert letters.pending == 4
            assert letters.full()
        finally:
            os.killpg(broker.process.pid, signal.SIGCONT)
        deadline = time.monotonic() + 60
        while not letters.flush():
            assert time.monotonic() < deadline, "the copies are acknowledged"
        assert not letters.full() and letters.acknowledged == 5
    finally:
        if source is not None:
            letters.close()
            source.close()
        broker.stop()


def test_the_dead_lettered_counter_continues_after_a_restart(tmp_path: Path) -> None:
    """searchmon_dead_lettered_total is the replica's, not the process's: a restarted daemon
    starts from what the earlier ones had copied."""
    broker = Broker().start()
    events = "ev"
    daemon = None
    try:
        broker.create_topics({events: 1, f"{events}-judgments": 1, DEAD: 1})
        broker.produce(events, [(None, b"not json %d" % i) for i in range(3)])
        for number, expected in enumerate((3.0, 5.0)):
            if number:
                broker.produce(events, [(None, b"again %d" % i) for i in range(2)])
            port = free_port()
            daemon = start_daemon(tmp_path, broker, "restart", port, kafka=topics_lines(events))
            deadline = time.monotonic() + 90
            while scrape(port).get("searchmon_dead_lettered_total") != expected:
                assert daemon.poll() is None and time.monotonic() < deadline, scrape(port).get(
                    "searchmon_dead_lettered_total")
                time.sleep(0.3)
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=30)
    finally:
        stop_both(daemon if daemon is not None and daemon.poll() is None else None, broker)


def test_a_checkpoint_restored_ahead_of_the_committed_offset_is_committed_at_takeover(
    tmp_path: Path,
) -> None:
    """A durable checkpoint whose commit the group never took (the replica fell out of the
    group right after writing it, as after a broker restart): the offset is rewound here
    while the daemon is stopped. The next takeover commits it with nothing new to read.
    Was: uncommitted until new records came, which may be never."""
    broker = Broker().start()
    events, group = "ev", "takeover"
    daemon = None
    try:
        broker.create_topics({events: 1, f"{events}-judgments": 1, DEAD: 1})
        broker.produce(events, [(None, b"not json 0"), (None, b"not json 1")])
        daemon = start_daemon(tmp_path, broker, group, free_port(), kafka=topics_lines(events))
        wait_for(lambda: committed(broker, group, events), "the first commit", 90,
                 until=lambda offset: offset == 2, every=0.5)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
        rewind = KafkaConsumer(bootstrap_servers=broker.address, group_id=group,
                               enable_auto_commit=False, **FAST_GROUP)
        try:
            rewind.assign([TopicPartition(events, 0)])
            rewind.commit({TopicPartition(events, 0): OffsetAndMetadata(0, "", -1)})
        finally:
            rewind.close(autocommit=False)
        assert committed(broker, group, events) == 0
        daemon = start_daemon(tmp_path, broker, group, free_port(), kafka=topics_lines(events))
        wait_for(lambda: committed(broker, group, events), "the restored offset committed",
                 90, until=lambda offset: offset == 2, every=0.5)
        assert "restored its checkpoint at offset 2" in log_of(tmp_path)
    finally:
        stop_both(daemon, broker)


def test_a_group_join_that_completes_while_no_poll_waits_is_made_again() -> None:
    """After a broker restart the consumer joins the group again; kafka-python (3.0) loses
    that join when it completes while no poll waits for it (a loaded machine's pause between
    polls): the member never becomes stable and nothing is fetched, for good. Was: a daemon
    that read nothing after its broker restarted (seen once in CI), reproduced here by the
    pause."""
    broker = Broker().start()
    events = "ev"
    source = None
    try:
        broker.create_topics({events: 1, f"{events}-judgments": 1, DEAD: 1})
        broker.produce(events, [(b"k", b"before")])
        source = KafkaSource(source_config(broker, events, DEAD), RebalanceFence())
        assert [r.value for r in poll_all(source, events, 1)[TopicPartition(events, 0)]] == [
            b"before"
        ]
        restart_with_topics(broker, events)
        produce(broker, events, [b"after"])
        deadline = time.monotonic() + 60
        while not source.fence.rebalancing:  # the join the restart brings has begun
            assert time.monotonic() < deadline, "no rebalance after the broker restart"
            source.consumer.poll(timeout_ms=100)
        time.sleep(5)  # the pause: the join completes (about 3 s) while no poll waits
        stop = threading.Event()  # set at the deadline: a lost join fails, not hangs
        timer = threading.Timer(max(deadline - time.monotonic(), 0), stop.set)
        timer.start()
        try:
            while source.fence.rebalancing:  # the product's polls while the group rebalances
                assert not stop.is_set(), "the group never assigned the partitions again"
                source.poll(None, stop)
        finally:
            timer.cancel()
        source.seek_to_beginning((events, 0))  # the topic is new (the daemon rewinds it so)
        records = poll_all(source, events, 1)[TopicPartition(events, 0)]
        assert [r.value for r in records] == [b"after"]
    finally:
        if source is not None:
            source.close()
        broker.stop()
