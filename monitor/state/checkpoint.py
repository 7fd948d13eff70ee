"""Checkpoints: each partition's state with the offset it reflects, kept where the next owner
of the partition finds it.

A partition's checkpoint is a ``unit`` document of the checkpoint codec (``monitor.codec``):
versioned, checksummed JSON of plain data. Two stores keep them:

- ``DirStore`` (one replica): one file per partition in ``<state dir>/checkpoints/``, named
  ``<topic>-<partition>.ckpt``, each replaced atomically (temporary file, fsync, rename, fsync
  of the directory). Only partitions whose state changed are written.
- ``KafkaStore`` (several replicas): a compacted changelog topic. A checkpoint is split into
  chunk records keyed ``c/<topic>/<partition>/<chunk set>/<index>`` (the set named
  ``<group generation>.<random>``), then a manifest record keyed
  ``g/<topic>/<partition>/<group generation>`` names the set and its number of chunks; the
  previous set's chunks are deleted (tombstones) afterwards. A crash while writing leaves the
  previous manifest and its chunks intact. Restoring reads the topic to its end and takes the
  checkpoint of the highest group generation.

Checkpoints are data: whoever can write to the state directory or the changelog topic can
make the daemon count wrongly, never make it run code.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Protocol

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError
from kafka.structs import TopicPartition

from monitor.config import Config
from monitor.core.pipeline import Pipeline
from monitor.core.snapshots import StateError
from monitor.inputs.events import Key
from monitor.state import format2
from monitor.state.codec import CheckpointError, UnitState, changed_sections, decode_unit

log = logging.getLogger(__name__)

DIRECTORY = "checkpoints"
SUFFIX = ".ckpt"
FORMAT_2_FILE = "checkpoint.bin"
"""Where format 2 kept every partition, pickled."""

__all__ = ["CheckpointError", "DirStore", "KafkaStore", "Key", "Store", "restore_unit"]


def restore_unit(
    data: bytes, source: str, config: Config, key: Key = ("", 0)
) -> tuple[UnitState, Pipeline]:
    """A checkpoint's unit (of partition ``key``) and its pipeline rebuilt under ``config``;
    ``CheckpointError`` when it is unreadable, or its state does not fit ``config``. A unit
    of format 2 is migrated."""
    if data.startswith(format2.MAGIC):  # the first releases' pickles: migrated as data
        unit = format2.migrate_unit(data, key, config, source)
    else:
        unit = decode_unit(data, source)
    changed = changed_sections(unit, config)
    if changed:
        raise CheckpointError(
            f"configuration of [{', '.join(changed)}] changed since the {source}; "
            "its state does not fit"
        )
    try:
        return unit, Pipeline.restore(config, unit.pipeline)
    except StateError as error:
        raise CheckpointError(f"{source}: inconsistent checkpoint ({error})") from None


def write_file(path: Path, data: bytes, sync_directory: bool = True) -> None:
    """Durably replace ``path`` with ``data``, readable by this user only (state holds
    query texts, and ids of what was counted)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        os.fchmod(descriptor, 0o600)  # a temporary file left by a crash kept its own mode
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    if sync_directory:
        _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read ({error.strerror})") from None


def discard_file(path: Path) -> Path | None:
    """Move an unusable file aside (kept for inspection, never replaced); returns where."""
    if not path.exists():
        return None
    aside = path.with_name(path.name + ".discarded")
    number = 1
    while aside.exists():
        number += 1
        aside = path.with_name(f"{path.name}.discarded.{number}")
    os.replace(path, aside)
    return aside


LOCK_FILE = ".lock"
_held_lock: int | None = None


class DirectoryInUse(Exception):
    """Another process holds the state directory."""


def lock_directory(directory: Path) -> None:
    """Hold ``directory``'s lock file (``fcntl`` lock, with the holder's pid and host in it)
    for the life of this process; ``DirectoryInUse`` when another process holds it. A
    directory that cannot be written is not locked (nothing can be written to it by anyone;
    the checkpoint alerts say so)."""
    global _held_lock
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        log.warning("cannot lock %s (%s): not locked", directory, error.strerror or error)
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(descriptor, 200).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise DirectoryInUse(
            f"the state directory {directory} is in use by another searchmon ({holder}); "
            "two daemons on one directory would overwrite each other's checkpoints. Give "
            "each replica its own [state] dir"
        ) from None
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    _held_lock = descriptor


def forget_inherited_lock() -> None:
    """In a forked child: close its copy of the lock, which stays the parent's alone (so
    the lock goes with the parent, even when the child outlives it for a moment)."""
    global _held_lock
    if _held_lock is not None:
        os.close(_held_lock)
        _held_lock = None


class UnreadableCheckpoints(CheckpointError):
    """Checkpoints of some partitions that cannot be read whole (``problems``: why, per
    partition); those of the others were read (``found``)."""

    def __init__(self, problems: dict[Key, str], found: dict[Key, bytes]) -> None:
        super().__init__("; ".join(problems[key] for key in sorted(problems)))
        self.problems = problems
        self.found = found


class Store(Protocol):
    def load(self, keys: set[Key], generation: int = -1) -> dict[Key, bytes]:
        """The newest checkpoint of each of ``keys`` that has one; ``generation``: the
        consumer group generation that assigned them (-1: unknown). ``UnreadableCheckpoints``
        when some cannot be read whole (it holds the others)."""
        ...

    def save(self, units: dict[Key, bytes], generation: int = -1) -> None:
        """Make ``units`` durable (when this returns, a restart or another replica sees them);
        ``generation``: the consumer group generation they were written under."""
        ...

    def discard(self, keys: set[Key]) -> None:
        """Forget the checkpoints of ``keys`` (after an unusable one was reported)."""
        ...

    def close(self) -> None: ...


class DirStore:
    """One file per partition's checkpoint: the store of a single replica. A file is read
    when its partition is restored (its bytes are not kept: a forked copy of the process
    may have written it since)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory / DIRECTORY
        found: set[Key] = set()
        old = directory / FORMAT_2_FILE
        data = read_file(old)
        if data is not None:
            # format 2 (one file of every partition's unit): each unit to a file of its own,
            # as it was; each is migrated when its partition is restored
            units = format2.read_store(data, str(old))
            for key, unit in units.items():
                write_file(self.path(key), unit, sync_directory=False)
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            _sync_directory(self.directory)
            aside = old.with_name(old.name + ".format2")
            os.replace(old, aside)
            log.warning("format-2 checkpoint of %d partitions split into %s (the original is "
                        "kept as %s)", len(units), self.directory, aside)
        if self.directory.is_dir():
            for path in sorted(self.directory.glob(f"*{SUFFIX}")):
                topic, _, number = path.name[: -len(SUFFIX)].rpartition("-")
                if topic and number.isdigit():
                    found.add((topic, int(number)))
        self.at_start = frozenset(found)
        """The partitions with a checkpoint when the store was opened (not kept up to date:
        a forked copy of the process writes others since, and ``load`` reads the files)."""

    def path(self, key: Key) -> Path:
        return self.directory / f"{key[0]}-{key[1]}{SUFFIX}"

    def load(self, keys: set[Key], generation: int = -1) -> dict[Key, bytes]:
        found = {}
        for key in sorted(keys):  # a forked copy's first checkpoint of a partition included
            data = read_file(self.path(key))
            if data is not None:
                found[key] = data
        return found

    def save(self, units: dict[Key, bytes], generation: int = -1) -> None:
        for key, data in units.items():
            write_file(self.path(key), data, sync_directory=False)
        if units:
            _sync_directory(self.directory)

    def discard(self, keys: set[Key]) -> None:
        for key in keys:
            aside = discard_file(self.path(key))
            if aside is not None:
                log.warning("moved the checkpoint of %s/%d aside as %s", *key, aside)

    def close(self) -> None:
        pass

    @staticmethod
    def discard_unreadable(directory: Path) -> Path | None:
        return discard_file(directory / FORMAT_2_FILE)


class KafkaStore:
    """Checkpoints in a compacted changelog topic, reachable from every replica."""

    def __init__(self, config: Config) -> None:
        kafka, state = config.kafka, config.state
        self.topic = state.changelog_topic or f"{kafka.group_id}-changelog"
        self.chunk_bytes = state.chunk_bytes
        self.servers = kafka.bootstrap_servers
        self.options = kafka.client_options()
        self.replication = state.changelog_replication_factor
        self.partition = TopicPartition(self.topic, 0)
        self.generations: dict[Key, tuple[str, int]] = {}
        """Per source partition: the chunk set of its newest checkpoint and its chunk count."""
        self.manifests: dict[Key, set[bytes]] = {}
        """Per source partition: the manifest keys known to be in the changelog."""
        self._producer: KafkaProducer | None = None
        self._created = False

    def load(self, keys: set[Key], generation: int = -1) -> dict[Key, bytes]:
        """The checkpoint of each of ``keys`` written under the highest group generation
        (the newest of those): one a fenced replica wrote late, under a generation the group
        had left, is ignored. Chunks no chosen manifest names, written under a generation
        before the chosen one's, are deleted: a write a crash interrupted, or a late write no
        restore takes. Those of the chosen generation or later stay: they may be a write in
        progress whose manifest follows them and replaces the one chosen (the previous
        owner's, fenced, still writing under the generation restored; a newer owner's, when
        this assignment is already stale), and those of a partition with no checkpoint yet
        stay too."""
        self._create_topic()
        manifests: dict[Key, dict[bytes, tuple[int, str, int]]] = {}
        chunks: dict[bytes, bytes] = {}
        for key, value in self._read():
            kind, _, rest = key.partition(b"/")
            if kind == b"m" or kind == b"g":
                named = _parse_manifest_key(kind, rest)
                if named is None or named[0] not in keys:
                    continue
                unit, group = named
                held = manifests.setdefault(unit, {})
                held.pop(key, None)  # in log order: the newest record of a key is last
                if value is not None:
                    held[key] = (group, *_parse_manifest(value, unit, self.topic))
            elif kind == b"c" and _chunk_unit(key) in keys:
                if value is None:
                    chunks.pop(key, None)
                else:
                    chunks[key] = value
        found: dict[Key, bytes] = {}
        problems: dict[Key, str] = {}
        chosen: dict[Key, int] = {}
        """Per partition restored: the group generation of its checkpoint."""
        for unit, held in manifests.items():
            if not held:
                continue
            # the highest generation wins; within one, dict order is log order (newest last)
            newest = max(enumerate(held.items()), key=lambda item: (item[1][1][0], item[0]))
            _, (_, (group, chunk_set, count)) = newest
            names = [_chunk_key(unit, chunk_set, i) for i in range(count)]
            self.manifests[unit] = set(held)  # what ``discard`` deletes, read whole or not
            missing = [name for name in names if name not in chunks]
            if missing:
                problems[unit] = (
                    f"{self.topic}: checkpoint of {unit[0]}/{unit[1]} is missing "
                    f"{len(missing)} of its {count} chunks"
                )
                continue
            found[unit] = b"".join(chunks.pop(name) for name in names)
            chosen[unit] = group
            self.generations[unit] = (chunk_set, count)
            if len(held) > 1:
                log.info("%s/%d: restored the checkpoint of group generation %d; %d other "
                         "manifests are stale", *unit, group, len(held) - 1)
        # chunks no chosen manifest names, older than the checkpoint chosen
        producer = self._producer_()
        for name in chunks:
            of = _chunk_unit(name)
            if of in chosen and _chunk_group(name) < chosen[of]:
                producer.send(self.topic, key=name, value=None, partition=0)
        if problems:
            raise UnreadableCheckpoints(problems, found)
        return found

    def save(self, units: dict[Key, bytes], generation: int = -1) -> None:
        producer = self._producer_()
        previous = {}
        stale: list[bytes] = []
        for unit, data in units.items():
            chunk_set = f"{generation}.{uuid.uuid4().hex}"
            pieces = [
                data[i:i + self.chunk_bytes] for i in range(0, len(data), self.chunk_bytes)
            ] or [b""]
            for i, piece in enumerate(pieces):
                producer.send(
                    self.topic, key=_chunk_key(unit, chunk_set, i), value=piece, partition=0
                )
            manifest = json.dumps({
                "generation": chunk_set, "chunks": len(pieces), "group_generation": generation,
            }).encode()
            key = _manifest_key(unit, generation)
            producer.send(self.topic, key=key, value=manifest, partition=0)
            if unit in self.generations:
                previous[unit] = self.generations[unit]
            self.generations[unit] = (chunk_set, len(pieces))
            known = self.manifests.setdefault(unit, set())
            stale.extend(name for name in known if name != key and _manifest_group(
                name) < generation)
            known.add(key)
        producer.flush(timeout=30)
        for unit, (chunk_set, count) in previous.items():
            for i in range(count):  # delivered with the next flush; harmless if lost
                producer.send(
                    self.topic, key=_chunk_key(unit, chunk_set, i), value=None, partition=0
                )
        for name in stale:  # manifests of lower generations, superseded
            producer.send(self.topic, key=name, value=None, partition=0)
            named = _parse_manifest_key(*_kind_rest(name))
            if named is not None:
                self.manifests.get(named[0], set()).discard(name)

    def discard(self, keys: set[Key]) -> None:
        producer = self._producer_()
        for key in keys:
            for name in self.manifests.pop(key, set()) | {_legacy_manifest_key(key)}:
                producer.send(self.topic, key=name, value=None, partition=0)
            self.generations.pop(key, None)
        producer.flush(timeout=30)

    def forget_all(self) -> int:
        """Delete every checkpoint of the changelog (``searchmon reset``): a tombstone for
        each key that holds a record. Returns how many."""
        self._create_topic()
        live: dict[bytes, bool] = {}
        for key, value in self._read():
            live[key] = value is not None
        producer = self._producer_()
        keys = [key for key, alive in live.items() if alive]
        for key in keys:
            producer.send(self.topic, key=key, value=None, partition=0)
        producer.flush(timeout=30)
        self.generations.clear()
        self.manifests.clear()
        return len(keys)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)
            self._producer = None

    def _producer_(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = KafkaProducer(
                bootstrap_servers=self.servers, acks="all", linger_ms=5,
                max_request_size=self.chunk_bytes + 65536, client_id="searchmon-changelog",
                **self.options,
            )
        return self._producer

    def _create_topic(self) -> None:
        if self._created:
            return
        admin = KafkaAdminClient(
            bootstrap_servers=self.servers, client_id="searchmon-changelog", **self.options
        )
        try:
            admin.create_topics([NewTopic(
                self.topic, 1, self.replication,
                topic_configs={
                    "cleanup.policy": "compact",
                    "max.message.bytes": str(self.chunk_bytes + 65536),
                },
            )])
            log.info("created the changelog topic %s", self.topic)
        except TopicAlreadyExistsError:
            pass
        finally:
            admin.close()
        self._created = True

    def _read(self) -> list[tuple[bytes, bytes | None]]:
        """Every record of the changelog, oldest first."""
        consumer = KafkaConsumer(
            bootstrap_servers=self.servers, enable_auto_commit=False, group_id=None,
            client_id="searchmon-restore", max_partition_fetch_bytes=4 * self.chunk_bytes,
            fetch_max_bytes=64 * 1024 * 1024, **self.options,
        )
        records: list[tuple[bytes, bytes | None]] = []
        try:
            consumer.assign([self.partition])
            consumer.seek_to_beginning(self.partition)
            deadline = time.monotonic() + 120
            while True:
                for batch in consumer.poll(timeout_ms=500).values():
                    records.extend((r.key, r.value) for r in batch if r.key is not None)
                highwater = consumer.highwater(self.partition)
                if highwater is not None and consumer.position(self.partition) >= highwater:
                    return records
                if time.monotonic() > deadline:
                    raise KafkaError(f"reading the changelog {self.topic} timed out")
        finally:
            consumer.close(autocommit=False)


def _manifest_key(unit: Key, generation: int) -> bytes:
    """A manifest's key names the group generation it was written under: compaction keeps
    one per generation, so a late write under an older one cannot replace a newer one."""
    return f"g/{unit[0]}/{unit[1]}/{generation}".encode()


def _legacy_manifest_key(unit: Key) -> bytes:
    """The key of manifests written before they carried a group generation."""
    return f"m/{unit[0]}/{unit[1]}".encode()


def _kind_rest(key: bytes) -> tuple[bytes, bytes]:
    kind, _, rest = key.partition(b"/")
    return kind, rest


def _parse_manifest_key(kind: bytes, rest: bytes) -> tuple[Key, int] | None:
    """The partition a manifest key names and its group generation (-1 before they had
    one, or when the generation was unknown)."""
    if kind == b"m":
        unit = _parse_key(rest)
        return (unit, -1) if unit is not None else None
    head, _, group = rest.rpartition(b"/")
    unit = _parse_key(head)
    try:
        return (unit, int(group)) if unit is not None else None
    except ValueError:
        return None


def _manifest_group(key: bytes) -> int:
    named = _parse_manifest_key(*_kind_rest(key))
    return named[1] if named is not None else -1


def _chunk_key(unit: Key, chunk_set: str, index: int) -> bytes:
    """A chunk set is named ``<group generation>.<random>`` (a random name alone before
    chunk sets carried the generation they were written under)."""
    return f"c/{unit[0]}/{unit[1]}/{chunk_set}/{index}".encode()


def _chunk_unit(key: bytes) -> Key | None:
    """The partition a chunk's key (``c/<topic>/<partition>/<chunk set>/<index>``) names."""
    return _parse_key(key.partition(b"/")[2].rsplit(b"/", 2)[0])


def _chunk_group(key: bytes) -> int:
    """The group generation a chunk was written under; -1 when its name does not say."""
    chunk_set = key.rsplit(b"/", 2)[-2] if key.count(b"/") >= 2 else b""
    group, dot, _ = chunk_set.partition(b".")
    try:
        return int(group) if dot else -1
    except ValueError:
        return -1


def _parse_key(text: bytes) -> Key | None:
    """The partition a changelog key names; None for a key that is not one of ours."""
    try:
        topic, _, number = text.decode().rpartition("/")
        return (topic, int(number)) if topic and number.isdigit() else None
    except UnicodeDecodeError:
        return None


MAX_CHUNKS = 1 << 20


def _parse_manifest(value: bytes, unit: Key, topic: str) -> tuple[str, int]:
    try:
        manifest = json.loads(value)
        generation, chunks = manifest["generation"], manifest["chunks"]
    except (ValueError, TypeError, KeyError):
        raise CheckpointError(
            f"{topic}: the manifest of {unit[0]}/{unit[1]} is not readable"
        ) from None
    if not isinstance(generation, str) or not isinstance(chunks, int) or not (
        0 < chunks <= MAX_CHUNKS
    ):
        raise CheckpointError(f"{topic}: the manifest of {unit[0]}/{unit[1]} is not valid")
    return generation, chunks
