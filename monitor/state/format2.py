"""Reading the state of the first releases (format 2: pickled live objects) as data, to
migrate it to the current format.

Format 2 kept a directory store's partitions in ``checkpoint.bin`` (a pickled dict of
encoded units) and the replica's ledger in ``ledger.bin``; each was a magic line
``searchmon-checkpoint 2``, the SHA-256 of the payload and the payload (a pickle). The payload
is read by an unpickler that builds no object of any class: every class it names must be one
of the few that format 2 used (checked by module and name), and becomes a plain record of its
attributes; anything else is refused. So a hostile file can fail to migrate, never run code.
The records are then turned into today's snapshots, the windows' scored queries into
buckets, the completed samples into per-sample sums.
"""

from __future__ import annotations

import hashlib
import io
import math
import pickle
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from monitor.config import Config
from monitor.core.export import Export, export
from monitor.core.judged import Sample, Summary, Window
from monitor.core.pipeline import Pipeline
from monitor.core.snapshots import StateError, finite_or_none
from monitor.inputs.events import Key
from monitor.state.codec import CheckpointError, UnitState, fingerprint
from monitor.state.ledger import Ledger

MAGIC = b"searchmon-checkpoint 2\n"

# Slotted frozen dataclasses pickled their fields as a list, in this order.
_FIELDS = {
    "Pending": ("source", "time", "klass", "key", "sample_id", "ranking", "labels"),
    "Scored": ("source", "time", "klass", "key", "values"),
    "Verdict": ("sample_id", "baseline_id", "comparison", "regression"),
    "PairedComparison": ("shared", "delta", "p_permutation", "p_t"),
    "_Rule": ("index", "pattern", "min_terms", "max_terms"),
    "MeasureSpec": (),
}
_CLASSES = {  # the modules as the first releases named them (not this version's layout)
    "monitor.checkpoint": {"Unit"},
    "monitor.classes": {"QueryClasses", "_Rule"},
    "monitor.config": {
        "Config", "KafkaConfig", "HttpConfig", "StateConfig", "SessionsConfig", "ClassRule",
        "QueryClassesConfig", "InputConfig", "OfflineConfig",
    },
    "monitor.judged": {"Judged", "Pending", "Scored", "Window", "Sample", "Verdict"},
    "monitor.offline.spec": {"MeasureSpec"},
    "monitor.online": {"OnlineCounters", "Sessions", "Histogram"},
    "monitor.pipeline": {"Pipeline", "Health"},
    "monitor.stats": {"PairedComparison"},
    "monitor.merge": {"Ledger"},
}


class Record:
    """An object of format 2 as data: ``kind`` is its class's name."""

    kind = ""

    def __init__(self, *_: object) -> None:
        self.fields: dict[str, Any] = {}

    def __setstate__(self, state: object) -> None:
        self.fields = {}
        if isinstance(state, tuple) and len(state) == 2:  # (__dict__, slots)
            for part in state:
                if isinstance(part, dict):
                    self.fields.update(part)
        elif isinstance(state, list):
            self.fields.update(zip(_FIELDS.get(self.kind, ()), state, strict=False))
        elif isinstance(state, dict):
            inner = state.get("__dict__")  # a pydantic model
            self.fields.update(inner if isinstance(inner, dict) else state)
        else:
            raise pickle.UnpicklingError(f"unexpected state of a {self.kind}")

    def __getitem__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise StateError(f"format 2: a {self.kind} without {name}") from None


def _record_class(name: str) -> type[Record]:
    return type(name, (Record,), {"kind": name})


_SAFE: dict[tuple[str, str], Callable[..., Any] | type] = {
    ("collections", "deque"): deque,
    ("collections", "OrderedDict"): OrderedDict,
    ("monitor.events", "Reason"): str,
    ("pathlib", "PosixPath"): lambda *parts: "/".join(parts),
    ("pathlib", "Path"): lambda *parts: "/".join(parts),
    ("re", "_compile"): lambda pattern, *_: pattern,
    ("pydantic.types", "SecretStr"): lambda *_: None,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        if name in _CLASSES.get(module, ()):
            return _record_class(name)
        raise pickle.UnpicklingError(f"format 2 has no {module}.{name}")


def _load(data: bytes, source: str) -> Any:
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{source}: not a checkpoint of format 2")
    digest, newline, payload = data[len(MAGIC):].partition(b"\n")
    if not newline or hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CheckpointError(f"{source}: corrupt checkpoint (checksum mismatch)")
    try:
        return _Unpickler(io.BytesIO(payload)).load()
    except Exception as error:  # whatever the bytes: one clear error
        raise CheckpointError(f"{source}: unreadable format-2 checkpoint ({error})") from None


def read_store(data: bytes, source: str) -> dict[Key, bytes]:
    """A format-2 ``checkpoint.bin``: each partition's encoded unit."""
    units = _load(data, source)
    if not isinstance(units, dict) or not all(
        isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], str) and isinstance(k[1], int)
        and isinstance(v, bytes) for k, v in units.items()
    ):
        raise CheckpointError(f"{source}: unexpected content")
    return units


def migrate_unit(data: bytes, key: Key, config: Config, source: str) -> UnitState:
    """A format-2 unit as a current ``UnitState`` of ``key`` (its configuration must be
    ``config``'s as far as the state is concerned)."""
    unit = _load(data, source)
    try:
        if not isinstance(unit, Record) or unit.kind != "Unit":
            raise StateError("not a partition's checkpoint")
        changed = _changed(unit["pipeline"]["config"], config)
        if changed:
            raise CheckpointError(
                f"configuration of [{', '.join(changed)}] changed since the {source}; "
                "its state does not fit"
            )
        pipeline = _pipeline(unit["pipeline"], config)
        writer = unit.fields.get("writer")
        return UnitState(
            key[0], key[1], int(unit["offset"]), float(unit.fields.get("written_at", 0.0)),
            writer if isinstance(writer, str) else None, fingerprint(config),
            pipeline.snapshot(),
        )
    except (StateError, TypeError, ValueError, KeyError, AttributeError, IndexError) as error:
        raise CheckpointError(f"{source}: cannot migrate format 2 ({error})") from None


def migrate_ledger(data: bytes, config: Config, source: str) -> Ledger:
    ledger = _load(data, source)
    try:
        if not isinstance(ledger, Record) or ledger.kind != "Ledger":
            raise StateError("not a ledger")

        def view(record: Any) -> Export:
            return export(_pipeline(record, config))

        return Ledger(
            str(ledger["replica"]),
            export(Pipeline(config)) if not ledger["retired"] else _sum(
                [view(r) for r in ledger["retired"]]
            ),
            {tuple(k): view(v) for k, v in ledger["bases"].items()},
            {tuple(k): view(v) for k, v in ledger["views"].items()},
        )
    except (StateError, TypeError, ValueError, KeyError, AttributeError, IndexError) as error:
        raise CheckpointError(f"{source}: cannot migrate format 2 ({error})") from None


def _changed(record: Any, config: Config) -> list[str]:
    """The sections whose state-relevant settings differ from those the unit was written
    under (the settings ``codec.STATE_SETTINGS`` names)."""
    from monitor.state.codec import STATE_SETTINGS

    changed = []
    for section, names in STATE_SETTINGS.items():
        then = record[section].fields
        now = getattr(config, section).model_dump()
        for name in names if names is not None else tuple(now):
            value = then.get(name)
            if name == "rules":
                value = [rule.fields if isinstance(rule, Record) else rule for rule in value or []]
                now_value: Any = [
                    {k: v for k, v in rule.items()} for rule in now[name]
                ]
                same = [
                    {k: r.get(k) for k in n} for r, n in zip(value, now_value, strict=False)
                ] == now_value
            else:
                same = value == now[name]
            if not same:
                changed.append(section)
                break
    return changed


def _sum(views: list[Export]) -> Export:
    from monitor.core.export import combine

    return combine([(v, 1) for v in views])


def _pipeline(record: Any, config: Config) -> Pipeline:
    """A pipeline rebuilt from a format-2 ``Pipeline`` record under ``config``."""
    pipeline = Pipeline(config)
    names = list(record["classes"]["names"])
    classes = pipeline.slices.classes
    for name in names[len(classes.names):]:
        pipeline.slices.add_class(name)
    if classes.names != names:
        raise StateError("the query classes are not those of this configuration")
    counters, old = pipeline.counters, record["counters"]
    pipeline.grow()
    for name in counters.COUNTS:  # one added to the catalogue since starts at 0
        if name in old.fields:
            setattr(counters, name, [int(v) for v in old[name]])
    for name, histogram in counters.histograms():
        if name in old.fields:
            histogram.counts = [[int(c) for c in row] for row in old[name]["counts"]]
            histogram.sums = [float(v) for v in old[name]["sums"]]
    _sessions(pipeline, record["sessions"])
    health, old_health = pipeline.health, record["health"]
    health.accepted = int(old_health["accepted"])
    for reason, count in old_health["rejected"].items():
        health.rejected[type(next(iter(health.rejected)))(reason)] = int(count)
    health.ignored_actions = int(old_health["ignored_actions"])
    health.judged_messages = int(old_health["judged_messages"])
    _judged(pipeline, record["judged"])
    # every part is checked as a restore checks it
    return Pipeline.restore(config, pipeline.snapshot())


def _sessions(pipeline: Pipeline, record: Any) -> None:
    sessions = pipeline.sessions
    ids, last, klass, queries, flags, query_id, query_class, query_time, older = record["open"]
    from monitor.core.online import restored_session

    # format 2 applied events on arrival: nothing waits, and a session's first event time
    # is unknown (its latest query's, or its last event's, is the earliest time kept)
    first = [min(t, q) for t, q in zip(last, query_time, strict=True)]
    sessions.open = dict(zip(ids, map(
        restored_session, first, last, klass, queries, flags, query_id, query_class,
        query_time, older, [None] * len(ids),
    ), strict=True))
    sessions.newest = float(record["newest"])
    sessions.seen, sessions.seen_before = set(record["seen"]), set(record["seen_before"])
    sessions.generation_end = float(record["generation_end"])
    sessions.next_due = float(record["next_due"])
    sessions.next_settle = sessions.newest - pipeline.config.sessions.allowed_lateness
    sessions.unmatched_clicks = int(record["unmatched_clicks"])  # nothing closed is known


def _judged(pipeline: Pipeline, record: Any) -> None:
    from monitor.core.judged import Pending, Verdict
    from monitor.core.stats import PairedComparison

    judged = pipeline.judged
    judged.active = bool(record["active"])
    judged.clock = float(record["clock"])
    judged.judgment_clock = float(record["judgment_clock"])
    judged.pending = [
        Pending(p["source"], p["time"], p["klass"], p["key"], p["sample_id"], p["ranking"],
                p["labels"])
        for p in record["pending"]
    ]
    for (source, length), window in record["time_windows"].items():
        bucketed = judged.time_windows.get((source, float(length)))
        if bucketed is None:
            raise StateError(f"a window {source}/{length} this configuration does not have")
        _fill(bucketed, window["entries"])
        bucketed.evict(judged.clock)
    judged.histograms = {tuple(k): [int(c) for c in v] for k, v in record["histograms"].items()}
    judged.histogram_sums = {tuple(k): float(v) for k, v in record["histogram_sums"].items()}
    judged.open_samples = {k: _sample(v) for k, v in record["open_samples"].items()}
    completed = [_sample(s) for s in record["completed"]]
    keep = max([*judged.config.last_samples, 1])
    judged.completed = deque(Summary.of(s) for s in completed[-keep:])
    judged.previous = completed[-1] if completed else None
    pinned = record.fields.get("pinned")
    judged.pinned = _sample(pinned) if pinned is not None else None
    judged.verdicts = {
        tuple(key): Verdict(
            v["sample_id"], v["baseline_id"],
            PairedComparison(*(v["comparison"][f] for f in
                               ("shared", "delta", "p_permutation", "p_t"))),
            v["regression"],
        )
        for key, v in record["verdicts"].items()
    }
    judged.last_completed_time = finite_or_none(float(record["last_completed_time"] or -math.inf))
    judged.qrels = OrderedDict(record["qrels"])
    judged.skipped = int(record["skipped"])
    judged.totals = {tuple(k): (float(t), int(n)) for k, (t, n) in record["totals"].items()}
    judged.judged_queries = {int(k): int(v) for k, v in record["judged_queries"].items()}


def _fill(window: Window, entries: Any) -> None:
    for scored in entries:
        window.add(float(scored["time"]), int(scored["klass"]),
                   tuple(float(v) for v in scored["values"]))


def _sample(record: Any) -> Sample:
    return Sample(
        record["sample_id"], float(record["first"]), float(record["last"]),
        {key: (int(k), tuple(float(v) for v in values))
         for key, (k, values) in record["scores"].items()},
        int(record["pending"]),
    )

