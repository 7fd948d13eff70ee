"""Pipelines and their checkpoints as the daemon writes and reads them."""

from __future__ import annotations

from dataclasses import replace

from monitor.config import Config
from monitor.core.export import Export
from monitor.core.pipeline import Pipeline
from monitor.state import codec
from monitor.state.checkpoint import restore_unit
from monitor.state.codec import UnitState
from tests.support.events import query


def round_trip(pipeline: Pipeline) -> Pipeline:
    """``pipeline`` through a checkpoint, as the daemon writes and reads it."""
    data = codec.encode("unit", UnitState(
        "events", 0, 0, 0.0, None, codec.fingerprint(pipeline.config), pipeline.snapshot()
    ))
    return restore_unit(data, "test", pipeline.config)[1]


def encode(
    pipeline: Pipeline, offset: int, written_at: float = 0.0, writer: str | None = None
) -> bytes:
    """A partition's checkpoint as the daemon writes it."""
    return codec.encode("unit", UnitState(
        "events", 0, offset, written_at, writer, codec.fingerprint(pipeline.config),
        pipeline.snapshot(),
    ))


def pipeline_with(queries: int) -> Pipeline:
    """A pipeline of the default configuration that has read ``queries`` queries."""
    pipeline = Pipeline(Config())
    for i in range(queries):
        assert pipeline.feed(query(f"e{i}", float(i), f"s{i}", f"q{i}")) is None
    return pipeline


def sans_curves(figures: Export) -> Export:
    """``figures`` without the judged samples' precision-recall curves: a checkpoint from
    before judged state 4 migrates without them, so the samples scored before the upgrade
    add nothing to the curves of the samples completed after it."""
    if figures.offline is None:
        return figures
    return replace(figures, offline=replace(figures.offline, curves=()))
