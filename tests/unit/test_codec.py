"""The checkpoint codec: versioned JSON that restores exactly, a committed fixture of the
current format, and bytes from a disk or a topic that can only fail with a clear error."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from monitor.config import Config, SlicesConfig
from monitor.core import judged
from monitor.core.export import export
from monitor.core.pipeline import Pipeline
from monitor.inputs.generate import Regression, Traffic, World, events
from monitor.run.coordinator import CheckpointCoordinator
from monitor.state import codec
from monitor.state.checkpoint import CheckpointError, DirStore, restore_unit
from monitor.state.codec import UnitState
from monitor.state.ledger import Ledger, LedgerState
from tests.support.checkpoints import sans_curves
from tests.support.files import DATA

CUT = 24000
FIXTURE = DATA / "checkpoint-v6.ckpt"
"""A partition's checkpoint written by format 6 (``SEARCHMON_WRITE_GOLDEN=1`` rewrites it):
the first ``CUT`` messages of ``fixture_stream()`` under the default configuration."""
FIXTURE_V5 = DATA / "checkpoint-v5.ckpt"
"""The same, written by format 5 (no part versions; one baseline for every class and
measure); its parts are migrated on read."""
FIXTURE_V4 = DATA / "checkpoint-v4.ckpt"
"""The same, written by format 4 (no query lists, no worsened queries); migrated on read."""
FIXTURE_V3 = DATA / "checkpoint-v3.ckpt"
"""The same, written by format 3 (which applied events on arrival); migrated on read."""


FIXTURE_BATCH = 256
"""The live join's batch (``monitor.core.judged.BATCH``) the committed checkpoints were
written with. Fed without a tick per batch of input, as ``fed`` feeds, a query is scored
when its batch fills, and a window admits it by the clock then: the references here score
in batches of that size, as the checkpoints' writers did."""


@pytest.fixture
def scored_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the tests that compare a committed checkpoint with the stream it holds."""
    monkeypatch.setattr(judged, "BATCH", FIXTURE_BATCH)


def fixture_stream() -> list[bytes]:
    return [line for _, _, line in events(World.build(3), Traffic(
        seed=3, duration=4 * 3600.0, sessions_per_second=1.0, qrels=True, judged_every=3600.0,
        judged_queries=40, regression=Regression("navigational", 1.79e9 + 3600.0),
        tag="",  # the ids the committed checkpoints were written with
    ))]


def fed(lines: list[bytes]) -> Pipeline:
    pipeline = Pipeline(Config())
    for line in lines:
        pipeline.feed(line)
    return pipeline


def encoded(pipeline: Pipeline, offset: int = 0) -> bytes:
    return codec.encode("unit", UnitState(
        "search-events", 0, offset, 1.0, "replica-1", codec.fingerprint(pipeline.config),
        pipeline.snapshot(),
    ))


@pytest.mark.usefixtures("scored_as_written")
@pytest.mark.parametrize("fixture", [FIXTURE, FIXTURE_V5], ids=["format-6", "format-5"])
def test_the_committed_checkpoints_of_formats_5_and_6_restore_as_the_stream_they_hold(
    fixture: Path,
) -> None:
    """Every later format must read these files (or migrate them): an upgrade keeps the open
    sessions, windows and baselines of a running deployment."""
    stream = fixture_stream()
    if os.environ.get("SEARCHMON_WRITE_GOLDEN") and fixture == FIXTURE:
        FIXTURE.write_bytes(encoded(fed(stream[:CUT]), CUT))
    unit, restored = restore_unit(fixture.read_bytes(), str(fixture), Config())
    assert (unit.topic, unit.partition, unit.offset, unit.writer) == (
        "search-events", 0, CUT, "replica-1"
    )
    reference = as_of(fed(stream[:CUT]), held(fixture))
    if not holds_curves(fixture):
        assert restored.judged.previous is not None and not restored.judged.previous.curves
        without_curves(reference)
    assert close(export(restored), export(reference))
    assert restored.sessions.open_count > 0 and restored.judged.verdicts
    assert restored.sessions.waiting, "events waiting for the watermark are kept"
    assert restored.lists is not None and reference.lists is not None
    assert restored.lists.snapshot() == reference.lists.snapshot()
    assert restored.lists.open, "queries waiting for their outcome are kept"
    assert restored.judged.worsened == reference.judged.worsened is not None
    counts_on(restored, reference, stream[CUT:])


@pytest.mark.parametrize("fixture", [FIXTURE, FIXTURE_V5], ids=["format-6", "format-5"])
def test_state_from_before_slices_restores_with_its_counts_under_unknown(
    fixture: Path,
) -> None:
    """Dimensions configured on an upgrade: the counts so far are those of each class under
    ``unknown`` of every dimension, and counting goes on by slice."""
    stream = fixture_stream()
    config = Config(slices=SlicesConfig(dimensions=["platform", "variant"]))
    unit, restored = restore_unit(fixture.read_bytes(), str(fixture), config)
    assert unit.offset == CUT
    before = export(as_of(fed(stream[:CUT]), held(fixture)))
    after = export(restored)
    assert after.labels == ("query_class", "platform", "variant")
    assert {p.slice: p.counts for p in after.slices} == {
        (*p.slice, "unknown", "unknown"): p.counts for p in before.slices
    }
    assert restored.sessions.open_count > 0 and restored.judged.verdicts
    assert {v.slice[1:] for v in after.offline.verdicts} <= {  # type: ignore[union-attr]
        ("unknown", "unknown"), ("", "")
    }
    for i, line in enumerate(stream[CUT:CUT + 2000]):
        try:
            event = json.loads(line)
        except ValueError:
            event = None  # a malformed line of the stream: fed as it is
        if isinstance(event, dict) and event.get("type") == "query":
            event["platform"] = ("ios", "web")[i % 2]
            line = json.dumps(event).encode()
        restored.feed(line)
    restored.close()
    figures = export(restored)
    platforms = {p.slice[1] for p in figures.slices if p.count("queries")}
    assert platforms == {"unknown", "ios", "web"}
    assert sum(p.count("queries") for p in figures.slices) > sum(
        p.count("queries") for p in before.slices
    )


def test_the_committed_checkpoint_of_format_4_migrates_with_empty_query_lists() -> None:
    stream = fixture_stream()
    unit, restored = restore_unit(FIXTURE_V4.read_bytes(), str(FIXTURE_V4), Config())
    assert unit.offset == CUT and restored.sessions.waiting
    assert restored.lists is not None and not restored.lists.open
    assert restored.judged.worsened is None
    counts_on(restored, as_of(fed(stream[:CUT]), held(FIXTURE_V4)), stream[CUT:])


def held(fixture: Path) -> set[str]:
    """The online counters and histograms a committed checkpoint holds: one added to the
    catalogue since restores at 0, with no migration."""
    document = json.loads(fixture.read_bytes().split(b"\n", 2)[2])
    counters = document["pipeline"]["counters"]
    return set(counters["counts"]) | set(counters["histograms"])


def holds_curves(fixture: Path) -> bool:
    """Whether a committed checkpoint's samples keep their precision-recall curves (judged
    state 4 on)."""
    document = json.loads(fixture.read_bytes().split(b"\n", 2)[2])
    return "curve_classes" in (document["pipeline"]["judged"]["previous"] or {})


def without_curves(pipeline: Pipeline) -> None:
    """``pipeline``'s samples without their curves, and no curve of the newest sample: what
    a checkpoint of judged state 3 migrates to."""
    judged = pipeline.judged
    judged.curve_pairs = {}
    for sample in [*judged.open_samples.values(), *judged.baselines.values(),
                   judged.previous, judged.pinned]:
        if sample is not None:
            sample.curves = {}


def as_of(pipeline: Pipeline, names: set[str]) -> Pipeline:
    """``pipeline`` with its counters and histograms outside ``names`` at 0: what restoring
    a checkpoint that holds only ``names`` starts from."""
    counters = pipeline.counters
    for name in counters.COUNTS:
        if name not in names:
            setattr(counters, name, [0] * len(getattr(counters, name)))
    for name, histogram in counters.histograms():
        if name not in names:
            histogram.counts = [[0] * len(row) for row in histogram.counts]
            histogram.sums = [0.0] * len(histogram.sums)
    return pipeline


def counts_on(restored: Pipeline, reference: Pipeline, rest: list[bytes]) -> None:
    """The rest of the stream counts the same on both; so do the totals at its end (but
    the precision-recall curves, which a checkpoint before judged state 4 did not keep)."""
    for line in rest:
        restored.feed(line)
        reference.feed(line)
    restored.close()
    reference.close()
    assert close(sans_curves(export(restored)), sans_curves(export(reference)))


def test_the_committed_checkpoint_of_format_3_migrates_and_counting_goes_on() -> None:
    """Format 3 applied events on arrival, so its counters at the cut are ahead of this
    version's (which waits for the watermark); on this in-order stream the totals at the end
    are the same."""
    stream = fixture_stream()
    unit, restored = restore_unit(FIXTURE_V3.read_bytes(), str(FIXTURE_V3), Config())
    assert unit.offset == CUT and restored.sessions.open_count > 0
    assert not restored.sessions.waiting
    counts_on(restored, as_of(fed(stream[:CUT]), held(FIXTURE_V3)), stream[CUT:])


def close(a: object, b: object) -> bool:
    """Equal, floats within rounding (a later version may add scores up in another order)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    if is_dataclass(a) and is_dataclass(b):
        return type(a) is type(b) and all(
            close(getattr(a, f.name), getattr(b, f.name)) for f in fields(a)
        )
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def test_a_ledger_round_trips() -> None:
    ledger = Ledger()
    ledger.acquire(("events", 0), export(fed(fixture_stream()[:500])), None)
    ledger.release(("events", 0))
    ledger.acquire(("events", 1), export(fed(fixture_stream()[:800])), "r")
    ledger.history.observe(ledger.exported({("events", 1)}, None))
    assert len(ledger.history) == 1
    data = codec.encode("ledger", ledger.snapshot())
    again = Ledger.restore(codec.decode_ledger(data, "test"))
    assert again == ledger


def test_a_checkpoint_holds_the_document_pydantic_would_write() -> None:
    """msgspec writes the payload: the same JSON document as pydantic's serializer (the
    exponents of its floats aside, which JSON reads alike), for a unit with judged samples,
    a regression and query lists, and for a ledger."""
    pipeline = fed(fixture_stream()[:CUT])
    unit = UnitState("search-events", 0, CUT, 1.5, "replica-1",
                     codec.fingerprint(pipeline.config), pipeline.snapshot())
    ledger = Ledger()
    ledger.acquire(("events", 0), export(pipeline), None)
    ledger.history.observe(ledger.exported({("events", 0)}, None))
    for kind, value, of in (("unit", unit, UnitState), ("ledger", ledger.snapshot(), LedgerState)):
        payload = codec.encode(kind, value).split(b"\n", 2)[2]
        assert json.loads(payload) == json.loads(TypeAdapter(of).dump_json(value)), kind


LEDGER_V5 = DATA / "ledger-v5.bin"
"""A replica's ledger as written before it kept the history of its counters."""


def test_a_ledger_written_before_the_history_opens_and_keeps_one_from_then(
    tmp_path: Path,
) -> None:
    """The ledger of a running deployment opens after an upgrade: the same counters, an
    empty history, which is then kept and written with the ledger, and read back."""
    shutil.copy(LEDGER_V5, tmp_path / "ledger.bin")
    config = Config.model_validate({"state": {"dir": str(tmp_path)}})
    key = ("search-events", 0)
    coordinator = CheckpointCoordinator(config, discard=False)
    ledger = coordinator.ledger
    assert ledger.replica == "replica-1" and list(ledger.views) == [key]
    assert len(ledger.history) == 0
    assert ledger.exported({key}, None).accepted == reference_accepted(fixture_stream()[:3000])
    coordinator.export({key})
    assert len(ledger.history) == 1 and coordinator.recent.hour is None
    assert coordinator._save()
    again = CheckpointCoordinator(config, discard=False).ledger
    assert again.history == ledger.history and len(again.history) == 1


@pytest.mark.parametrize(("data", "problem"), [
    (b"", "bad header"),
    (b"PK\x03\x04 a zip file", "bad header"),
    (b"searchmon-checkpoint 2\nabc\n\x80\x05", "checksum"),  # format 2: migrated if whole
    (b"searchmon-checkpoint 9 unit\nabc\n{}", "reads format 6"),
    (b"searchmon-checkpoint 3 ledger\nabc\n{}", "a ledger checkpoint where a unit"),
    (b"searchmon-checkpoint 3 unit\nabc\n{}", "checksum"),
])
def test_what_is_not_a_checkpoint_of_this_version_is_named(data: bytes, problem: str) -> None:
    with pytest.raises(CheckpointError, match=problem):
        restore_unit(data, "test", Config())


def with_payload(payload: bytes) -> bytes:
    digest = hashlib.sha256(payload).hexdigest().encode()
    return b"searchmon-checkpoint 3 unit\n" + digest + b"\n" + payload


@given(st.binary(max_size=300))
def test_random_bytes_fail_only_with_a_checkpoint_error(data: bytes) -> None:
    for candidate in (data, b"searchmon-checkpoint 3 unit\n" + data, with_payload(data)):
        with pytest.raises(CheckpointError):
            restore_unit(candidate, "test", Config())


SMALL = encoded(fed(fixture_stream()[:1500]))
PAYLOAD = SMALL.split(b"\n", 2)[2]


def test_the_checkpoint_the_mutations_start_from_restores() -> None:
    """Else every mutated checkpoint below would fail, and test nothing."""
    _, pipeline = restore_unit(SMALL, "test", Config())
    assert pipeline.sessions.open_count > 0 and pipeline.judged.pending


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(PAYLOAD) - 1), st.binary(min_size=0, max_size=4)),
                min_size=1, max_size=4))
def test_mutated_checkpoints_with_a_valid_checksum_restore_or_fail_clearly(
    edits: list[tuple[int, bytes]],
) -> None:
    """Someone who can write to the state's store: whatever they write, the daemon either
    restores a state whose parts fit together or says the checkpoint is unusable."""
    payload = bytearray(PAYLOAD)
    for position, replacement in edits:
        payload[position:position + len(replacement) or position + 1] = replacement
    try:
        _, pipeline = restore_unit(with_payload(bytes(payload)), "test", Config())
    except CheckpointError:
        return
    export(pipeline)  # what a scrape does with it
    pipeline.close()


def leaf_paths(document: object, ends: bool) -> list[list[str | int]]:
    """Where the leaves of a JSON document are: every key of an object, the first element of
    a list (``ends``: and the last)."""
    paths: list[list[str | int]] = []

    def leaves(node: object, path: list[str | int]) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                leaves(child, [*path, key])
        elif isinstance(node, list) and node:
            leaves(node[0], [*path, 0])
            if ends and len(node) > 1:
                leaves(node[-1], [*path, len(node) - 1])
        else:
            paths.append(path)

    leaves(document, [])
    return paths


VALUES = [10**400, -(10**30), 2**63, 1e308 * 10, "x" * 3, None, [], {}, -1, 0.5]


@pytest.mark.slow
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_every_field_of_a_checkpoint_rejects_values_out_of_range(value: object) -> None:
    """Each leaf of the document replaced by an extreme or mistyped value (checksum valid)."""
    paths = leaf_paths(json.loads(PAYLOAD), ends=False)
    assert len(paths) > 60
    for path in paths:
        changed = json.loads(PAYLOAD)
        node = changed
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value
        try:
            text = json.dumps(changed).encode()
        except ValueError:
            continue
        try:
            _, pipeline = restore_unit(with_payload(text), "test", Config())
        except CheckpointError:
            continue
        export(pipeline)
        pipeline.close()


@pytest.mark.slow
def test_a_ledger_of_the_wrong_shape_is_refused_not_added_up() -> None:
    """Every leaf of a ledger document replaced by a mistyped or extreme value: decoding and
    rebuilding fail with a clear error, or the ledger adds up."""
    from monitor.core.snapshots import StateError

    ledger = Ledger()
    ledger.acquire(("events", 0), export(fed(fixture_stream()[:300])), None)
    ledger.release(("events", 0))
    ledger.acquire(("events", 1), export(fed(fixture_stream()[:600])), "r")
    payload = codec.encode("ledger", ledger.snapshot()).split(b"\n", 2)[2]
    paths = leaf_paths(json.loads(payload), ends=True)
    refused = 0
    for path in paths:
        for value in (10**30, -1, "x", None, [], [1, 2]):
            changed = json.loads(payload)
            node = changed
            for step in path[:-1]:
                node = node[step]
            node[path[-1]] = value
            text = json.dumps(changed).encode()
            data = b"searchmon-checkpoint 3 ledger\n" + hashlib.sha256(text).hexdigest().encode()
            try:
                restored = Ledger.restore(codec.decode_ledger(data + b"\n" + text, "test"))
            except (CheckpointError, StateError):
                refused += 1
                continue
            restored.exported({("events", 1)}, None)
    assert refused > len(paths)


FORMAT_2 = DATA / "format2"


@pytest.mark.usefixtures("scored_as_written")
def test_the_first_releases_state_is_migrated(tmp_path: Path) -> None:
    """Format 2 (pickled objects): a directory store's checkpoint.bin is split into one file
    per partition and set aside, each unit migrates as data to the state the current code
    reaches on the same messages (windows: their scored queries into buckets), and counting
    goes on exactly; the ledger migrates with the replica's id and its views."""
    shutil.copy(FORMAT_2 / "checkpoint.bin", tmp_path / "checkpoint.bin")
    store = DirStore(tmp_path)
    assert not (tmp_path / "checkpoint.bin").exists()
    assert (tmp_path / "checkpoint.bin.format2").exists()
    key = ("search-events", 0)
    data = store.load({key})[key]
    unit, migrated = restore_unit(data, "checkpoint of search-events/0", Config(), key)
    assert (unit.topic, unit.partition, unit.offset, unit.writer) == (*key, CUT, "replica-1")
    assert DirStore(tmp_path).load({key}) == {key: data}, "the split files stay"
    stream = fixture_stream()
    reference = as_of(fed(stream[:CUT]), held(FIXTURE_V3))  # format 2 had the same ones
    got, want = export(migrated), export(reference)
    assert got.offline is not None and want.offline is not None
    assert close(got.offline.verdicts, want.offline.verdicts)
    assert got.offline.last_sample_time == want.offline.last_sample_time
    for mine, theirs in zip(got.offline.means, want.offline.means, strict=True):
        assert (mine.slice, mine.measure, mine.source, mine.window) == (
            theirs.slice, theirs.measure, theirs.source, theirs.window
        )
        # format 2 left a window at its exact edge; buckets keep the edge bucket whole
        assert mine.queries <= theirs.queries
        assert abs(mine.mean - theirs.mean) <= (
            (theirs.queries - mine.queries) / theirs.queries + 1e-9
        )
    for line in stream[CUT:]:
        migrated.feed(line)
        reference.feed(line)
    migrated.close()
    reference.close()
    assert close(export(migrated).slices, export(reference).slices)

    config = Config.model_validate({"state": {"dir": str(tmp_path)}})
    shutil.copy(FORMAT_2 / "ledger.bin", tmp_path / "ledger.bin")
    ledger = CheckpointCoordinator(config, discard=False).ledger
    assert ledger.replica == "replica-1" and list(ledger.views) == [key]
    assert ledger.exported({key}, None).accepted == reference_accepted(stream[:CUT])


def reference_accepted(lines: list[bytes]) -> int:
    return fed(lines).health.accepted


def test_a_format_2_file_can_name_no_other_class(tmp_path: Path) -> None:
    """The migration's unpickler builds no object of any class: a file that would run code
    when unpickled is refused, and nothing runs."""
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps({("search-events", 0): Exploit()}, protocol=5)
    data = b"searchmon-checkpoint 2\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n"
    (tmp_path / "checkpoint.bin").write_bytes(data + payload)
    with pytest.raises(CheckpointError, match="format 2 has no"):
        DirStore(tmp_path)
    assert not marker.exists()


def test_a_counter_added_to_the_catalogue_reads_0_from_state_written_before() -> None:
    """A new online counter is an entry at the end of the catalogue: checkpoints and ledger
    exports written before it restore with it at 0, with no migration."""
    from dataclasses import replace

    from monitor.core.export import check, export, padded
    from monitor.core.states import CountersState

    pipeline = fed(fixture_stream()[:400])
    state = pipeline.snapshot()
    counts = {k: v for k, v in state.counters.counts.items() if k != "reformulated_queries"}
    histograms = {k: v for k, v in state.counters.histograms.items()
                  if k != "first_click_reciprocal_rank"}
    earlier = replace(state, counters=CountersState(counts, histograms))
    restored = Pipeline.restore(Config(), earlier)
    classes = len(restored.slices.classes.names)
    assert restored.counters.reformulated_queries == [0] * classes
    assert restored.counters.first_click_reciprocal_rank.counts[0] == [0] * len(
        restored.counters.first_click_reciprocal_rank.counts[0])
    assert restored.counters.queries == pipeline.counters.queries
    figures = export(pipeline)
    shorter = replace(figures, slices=tuple(
        replace(part, counts=part.counts[:-1], histograms=part.histograms[:-1])
        for part in figures.slices
    ))
    check(shorter)
    for before, after in zip(figures.slices, padded(shorter).slices, strict=True):
        assert after.counts == (*before.counts[:-1], 0)
        assert len(after.histograms) == len(before.histograms)
