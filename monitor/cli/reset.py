"""``searchmon reset``: start over, as Kafka Streams' application reset tool does. The state is
moved aside (never deleted) and the consumer group's committed offsets of the events topic
are set to the earliest, the latest, or those of a time; those of the judgments topic to the
earliest (the qrels, samples and baselines are read again).

Every replica of the group must be stopped: a running one would write its state back. The
local one holds the state directory's lock (checked); the group's coordinator refuses to
move the offsets of a group with members (reported)."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.cli.common import EXIT_FAILURE, EXIT_OK, UsageError, load, parse_time
from monitor.config import Config

if TYPE_CHECKING:
    from kafka import KafkaConsumer, TopicPartition

HIGHWATER_WAIT = 30.0
"""Seconds to learn the partitions' ends from fetches."""


def command(args: argparse.Namespace) -> int:
    from kafka.errors import KafkaError

    from monitor.state import checkpoint

    config = load(args.config)
    to = _target(args.to)
    try:
        checkpoint.lock_directory(config.state.dir)
    except checkpoint.DirectoryInUse as error:
        raise UsageError(f"reset: {error}; stop it first") from None
    try:
        offsets = _offsets(config, to)
    except KafkaError as error:
        print(f"searchmon: reset: Kafka: {error}", file=sys.stderr)
        return EXIT_FAILURE
    if args.dry_run:
        _show(offsets, "would set")
        return EXIT_OK
    try:
        _commit(config, offsets)
    except KafkaError as error:
        print(f"searchmon: reset: {error}", file=sys.stderr)
        return EXIT_FAILURE
    aside = _state_aside(config)
    _show(offsets, f"set the committed offsets of group {config.kafka.group_id}:")
    for line in aside:
        print(line)
    return EXIT_OK


def _target(text: str) -> str | float:
    """``earliest``, ``latest``, or a time in epoch milliseconds."""
    if text in ("earliest", "latest"):
        return text
    return parse_time(text, "reset: --to (earliest, latest or a time)") * 1000.0


def _offsets(config: Config, to: str | float) -> dict[tuple[str, int], int]:
    """The offset each partition of the events and judgments topics is to start from."""
    from kafka import KafkaConsumer, TopicPartition

    kafka = config.kafka
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, group_id=None,
                             enable_auto_commit=False, client_id="searchmon-reset",
                             **kafka.client_options())
    try:
        partitions = [
            TopicPartition(topic, number)
            for topic in (kafka.events_topic, kafka.judgments_topic)
            for number in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        if not partitions:
            raise UsageError(f"reset: neither {kafka.events_topic} nor {kafka.judgments_topic} "
                             "has a partition")
        # the judgments topic from its start whatever ``to`` says: the state moved aside
        # held its qrels, samples and baselines, which only reading it again gives back
        judged = [tp for tp in partitions if tp.topic != kafka.events_topic]
        events = [tp for tp in partitions if tp.topic == kafka.events_topic]
        found = dict(consumer.beginning_offsets(judged)) if judged else {}
        if events and to == "earliest":
            found.update(consumer.beginning_offsets(events))
        elif events:
            ends = _ends(consumer, events)
            if not isinstance(to, str):
                stamps = consumer.offsets_for_times({tp: int(to) for tp in events})
                ends = {
                    tp: stamp.offset if stamp is not None else ends[tp]  # none since: the end
                    for tp, stamp in stamps.items()
                }
            found.update(ends)
        return {(tp.topic, tp.partition): int(offset) for tp, offset in found.items()}
    finally:
        consumer.close()


def _ends(
    consumer: KafkaConsumer, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """Each partition's end as fetches report it (its highwater mark: what every broker
    answers alike)."""
    from kafka.errors import KafkaTimeoutError

    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    deadline = time.monotonic() + HIGHWATER_WAIT
    ends: dict[TopicPartition, int] = {}
    while len(ends) < len(partitions):
        consumer.poll(timeout_ms=200)
        for tp in partitions:
            mark = consumer.highwater(tp)
            if mark is not None:
                ends[tp] = mark
                consumer.pause(tp)
        if time.monotonic() > deadline:
            raise KafkaTimeoutError(f"the ends of {len(partitions) - len(ends)} partitions "
                                    f"were not known within {HIGHWATER_WAIT:g} s")
    return ends


def _commit(config: Config, offsets: dict[tuple[str, int], int]) -> None:
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    kafka = config.kafka
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers,
                             client_id="searchmon-reset", **kafka.client_options())
    try:
        errors = admin.alter_group_offsets(kafka.group_id, {
            TopicPartition(*key): OffsetAndMetadata(offset, "searchmon reset", -1)
            for key, offset in offsets.items()
        })
    finally:
        admin.close()
    failed = {tp: error for tp, error in errors.items() if error.__name__ != "NoError"}
    if failed:
        names = ", ".join(sorted({error.__name__ for error in failed.values()}))
        raise KafkaError(f"the group {kafka.group_id} refused the offsets of {len(failed)} "
                         f"partitions ({names}): stop every replica of the group first")


def _state_aside(config: Config) -> list[str]:
    """The replica's checkpoints and ledger moved into ``reset-<time>/`` of the state
    directory; with the changelog store, its records deleted."""
    from monitor.run.coordinator import LEDGER_FILE
    from monitor.state.checkpoint import DIRECTORY, KafkaStore

    directory = config.state.dir
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    aside = directory / f"reset-{stamp}"
    moved = []
    for name in (DIRECTORY, LEDGER_FILE):
        path: Path = directory / name
        if path.exists():
            aside.mkdir(mode=0o700, exist_ok=True)
            path.rename(aside / name)
            moved.append(name)
    lines = [f"moved {', '.join(moved)} to {aside}" if moved else
             f"no state in {directory} to move aside"]
    if config.state.store == "kafka":
        store = KafkaStore(config)
        try:
            count = store.forget_all()
        finally:
            store.close()
        lines.append(f"deleted the {count} records of the changelog topic {store.topic}")
    return lines


def _show(offsets: dict[tuple[str, int], int], title: str) -> None:
    print(title)
    for (topic, partition), offset in sorted(offsets.items()):
        print(f"  {topic}/{partition}: {offset}")
