"""Checkpoints: the pipeline's state with the offsets it reflects, written atomically.

Layout of a checkpoint file: a magic line, the SHA-256 of the payload, the payload (a pickle
of ``Checkpoint``). Write: temporary file, fsync, rename, fsync of the directory. A file that
is truncated, altered or from another format is reported, never silently used or replaced.
The state directory is trusted: a checkpoint is code-level data (pickle), like a database file.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

from monitor.pipeline import Pipeline

MAGIC = b"searchmon-checkpoint 1\n"
FILE_NAME = "checkpoint.bin"


class CheckpointError(Exception):
    """A checkpoint that exists but cannot be used."""


@dataclass
class Checkpoint:
    pipelines: dict[tuple[str, int], Pipeline]
    """One pipeline per (topic, partition); they share one offline (judged) state."""
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    """Next offset to process per (topic, partition): everything before it is in the state."""
    written_at: float = 0.0
    """Wall-clock time of writing (for the checkpoint-age alert)."""


def encode(checkpoint: Checkpoint) -> bytes:
    payload = pickle.dumps(checkpoint, protocol=5)
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(data: bytes, source: str) -> Checkpoint:
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{source}: not a searchmon checkpoint (bad header)")
    rest = data[len(MAGIC):]
    digest, newline, payload = rest.partition(b"\n")
    if not newline or hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CheckpointError(f"{source}: corrupt checkpoint (checksum mismatch)")
    try:
        checkpoint = pickle.loads(payload)
    except Exception as error:  # any unpickling failure means the same to the operator
        raise CheckpointError(f"{source}: unreadable checkpoint ({error})") from None
    if not isinstance(checkpoint, Checkpoint):
        raise CheckpointError(f"{source}: unexpected checkpoint content")
    return checkpoint


def write(directory: Path, data: bytes) -> None:
    """Durably replace the checkpoint in ``directory`` with ``data``."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / FILE_NAME
    temporary = directory / (FILE_NAME + ".tmp")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, target)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read(directory: Path) -> Checkpoint | None:
    """The checkpoint in ``directory``, None when there is none; CheckpointError if unusable."""
    path = directory / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read ({error.strerror})") from None
    return decode(data, str(path))


def discard(directory: Path) -> Path | None:
    """Move an unusable checkpoint aside (kept for inspection); returns where it went."""
    path = directory / FILE_NAME
    if not path.exists():
        return None
    aside = directory / (FILE_NAME + ".discarded")
    os.replace(path, aside)
    return aside
