"""The checkpoint codec: state snapshots as versioned, checksummed JSON documents.

An encoded document is three parts::

    searchmon-checkpoint 4 KIND\n      (KIND: unit or ledger)
    SHA-256 of the payload, hex\n
    payload: one JSON object

A ``unit`` is one source partition's state (``UnitState``): the partition, the offset it
reflects, when and by which replica it was written, a fingerprint of the configuration
sections its state depends on, and the pipeline's snapshot (``PipelineState``). A ``ledger`` is
a replica's ``LedgerState``. Decoding is data only: a document is parsed and validated
against the snapshot types (every integer within 64 bits, every float finite), then its parts
are checked against each other when a component is rebuilt from it. Bytes that are truncated,
altered, of another kind or of an unknown version fail with a ``CheckpointError`` that says
which; nothing in them can run code.

Versions of the format: 2 was a pickle of the live objects; ``monitor.state.format2`` reads
it as data (an unpickler that builds no object) and migrates it. 3, 4 and 5 named no part
versions (they are implied: ``PARTS_OF_FORMAT``); 6 (this format) records the version of each
part of the pipeline's state (``PipelineState.versions``). A part that changes its snapshot
raises its own ``VERSION`` and adds a migration next to itself (``Pipeline.PARTS``); this
codec runs the migrations an older document needs, part by part, before validation. A change
of the envelope itself raises ``VERSION`` and adds to ``MIGRATIONS``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from pydantic import TypeAdapter, ValidationError

from monitor.config import Config
from monitor.core.pipeline import Pipeline
from monitor.core.snapshots import Float, Int
from monitor.core.states import PipelineState
from monitor.state.ledger import LedgerState

VERSION = 6
PREFIX = b"searchmon-checkpoint "
STATE_SETTINGS: dict[str, tuple[str, ...] | None] = {
    "sessions": (
        "timeout", "allowed_lateness", "success_dwell", "reformulation_window", "recent_queries",
    ),
    "query_classes": None,
    "offline": ("measures", "windows", "last_samples", "qrels_capacity"),
}
"""The settings a partition's state is laid out by (None: the whole section). A change of
one of them makes the state meaningless; the others (rejection logging, the verdicts'
thresholds, ...) can change across a restart."""

Document = dict[str, Any]


PARTS_OF_FORMAT: dict[int, dict[str, int]] = {
    3: {"sessions": 1, "judged": 1, "queries": 1},
    4: {"sessions": 2, "judged": 1, "queries": 1},
    5: {"sessions": 2, "judged": 2, "queries": 2},
}
"""The part versions formats 3 to 5 held (a part not named: version 1)."""


def _name_the_parts(version: int) -> Callable[[Document], Document]:
    def migrate(document: Document) -> Document:
        pipeline = document.get("pipeline") if isinstance(document, dict) else None
        if isinstance(pipeline, dict):  # else a ledger, or malformed (validation says so)
            pipeline["versions"] = {
                name: PARTS_OF_FORMAT[version].get(name, 1) for name, _ in Pipeline.PARTS
            }
        return document

    return migrate


MIGRATIONS: dict[int, Callable[[Document], Document]] = {
    version: _name_the_parts(version) for version in PARTS_OF_FORMAT
}
"""``MIGRATIONS[n]`` turns a version-n envelope into a version n+1 envelope (3 and 4 go to
6 directly: their parts are migrated by the parts)."""


def migrate_parts(document: Document) -> Document:
    """Each part of the pipeline's state brought to its class's version by its own
    migrations; a part newer than this version knows is refused."""
    pipeline = document.get("pipeline") if isinstance(document, dict) else None
    if not isinstance(pipeline, dict) or not isinstance(pipeline.get("versions"), dict):
        return document  # a ledger, or malformed (then validation says so)
    versions = pipeline["versions"]
    for name, part in Pipeline.PARTS:
        # a part added since the document was written: its version 1, its document absent
        version = versions.get(name, 1 if name not in pipeline else None)
        if not isinstance(version, int) or not 1 <= version <= part.VERSION:
            raise ValueError(f"{name}: version {version!r}, this version of searchmon reads "
                             f"up to {part.VERSION}")
        while version < part.VERSION:
            pipeline[name] = part.MIGRATIONS[version](pipeline.get(name))
            version += 1
        versions[name] = version
    return document


class CheckpointError(Exception):
    """A checkpoint that exists but cannot be used."""


@dataclass(frozen=True)
class UnitState:
    """One source partition's state."""

    topic: str
    partition: Int
    offset: Int
    """Next offset to process: everything before it is in the pipeline."""
    written_at: Float
    """Wall-clock time of writing (for the checkpoint-age alert)."""
    writer: str | None
    """The replica that wrote it (its ledger's id): whoever restores it knows who counted."""
    fingerprint: dict[str, str]
    """Per section of ``STATE_SETTINGS``: a digest of those settings when this was written."""
    pipeline: PipelineState
    topic_id: str | None = None
    """The id the brokers gave the topic (where they give one): a topic deleted and created
    again has another, and its partitions are then read from their start."""
    group_generation: Int = -1
    """The consumer group generation the writer held the partition under (-1: unknown)."""


T = TypeVar("T")
CURRENT_PARTS = {name: part.VERSION for name, part in Pipeline.PARTS}
_ADAPTERS: dict[str, TypeAdapter[Any]] = {
    "unit": TypeAdapter(UnitState),
    "ledger": TypeAdapter(LedgerState),
}


def fingerprint(config: Config) -> dict[str, str]:
    prints = {}
    for section, names in STATE_SETTINGS.items():
        settings = getattr(config, section).model_dump(mode="json")
        if names is not None:
            settings = {name: settings[name] for name in names}
        prints[section] = _digest(settings)
    return prints


def _digest(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def changed_sections(unit: UnitState, config: Config) -> list[str]:
    now = fingerprint(config)
    return [
        section for section in STATE_SETTINGS
        if unit.fingerprint.get(section) not in (now[section], *_earlier(section, config))
    ]


def _earlier(section: str, config: Config) -> tuple[str, ...]:
    """Digests of ``section`` as earlier versions took them: ``[offline] baseline`` was a
    state setting (the state now keeps a baseline per class and measure under any policy),
    and ``previous`` its default."""
    if section != "offline":
        return ()
    names = STATE_SETTINGS["offline"]
    assert names is not None
    settings = config.offline.model_dump(mode="json")
    kept = {name: settings[name] for name in names}
    return tuple(
        _digest({**kept, "baseline": baseline})
        for baseline in dict.fromkeys((config.offline.baseline, "previous"))
    )


_JSON = msgspec.json.Encoder()


def encode(kind: str, value: object) -> bytes:
    """``value`` (a ``UnitState`` or a ``LedgerState``) as a checkpoint document. msgspec
    writes the JSON, about a third faster than pydantic's serializer, with the same values
    (its floats' exponents lack the ``+``, which JSON does not need); a value msgspec cannot
    write (a type outside the snapshot types) is written by pydantic, as before."""
    try:
        payload = _JSON.encode(value)
    except TypeError:
        payload = _ADAPTERS[kind].dump_json(value)
    digest = hashlib.sha256(payload).hexdigest().encode()
    return PREFIX + f"{VERSION} {kind}\n".encode() + digest + b"\n" + payload


def decode_unit(data: bytes, source: str) -> UnitState:
    unit: UnitState = _decode("unit", data, source)
    return unit


def decode_ledger(data: bytes, source: str) -> LedgerState:
    ledger: LedgerState = _decode("ledger", data, source)
    return ledger


def _decode(kind: str, data: bytes, source: str) -> Any:
    header, newline, rest = data.partition(b"\n")
    if not newline or not header.startswith(PREFIX):
        raise CheckpointError(f"{source}: not a searchmon checkpoint (bad header)")
    fields = header[len(PREFIX):].split(b" ")
    if fields == [b"2"]:
        raise CheckpointError(
            f"{source}: format 2 (pickled objects), which is migrated (monitor.state.format2), "
            "not decoded"
        )
    try:
        version, found = int(fields[0]), fields[1].decode()
    except (IndexError, ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{source}: not a searchmon checkpoint (bad header)") from None
    if version > VERSION or (version < VERSION and version not in MIGRATIONS):
        raise CheckpointError(
            f"{source}: format {version}, this version of searchmon reads format {VERSION}"
            + (" (written by a newer one)" if version > VERSION else "")
        )
    if found != kind:
        raise CheckpointError(f"{source}: a {found} checkpoint where a {kind} was expected")
    digest, newline, payload = rest.partition(b"\n")
    if not newline or hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CheckpointError(f"{source}: corrupt checkpoint (checksum mismatch)")
    adapter = _ADAPTERS[kind]
    try:
        if version == VERSION:
            try:  # the fast path: every part of this version
                decoded = adapter.validate_json(payload)
                if kind != "unit" or decoded.pipeline.versions == CURRENT_PARTS:
                    return decoded
            except ValidationError:
                pass  # an older part: migrated below, or the error is raised there
        document = json.loads(payload)
        while version < VERSION:
            document = MIGRATIONS[version](document)
            version = VERSION if version in PARTS_OF_FORMAT else version + 1
        return adapter.validate_python(migrate_parts(document))
    except (ValidationError, ValueError, RecursionError) as error:
        raise CheckpointError(f"{source}: unreadable checkpoint ({_first_line(error)})") from None


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return "; ".join(text[:3])
