"""The precision-recall curve of each judged sample and class, against its baseline's: kept
in the judged state (version 4), exported, migrated from version 3 without one."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest
from pydantic import TypeAdapter

from monitor.config import Config, OfflineConfig
from monitor.core.export import export
from monitor.core.judged import OVERALL, Judged, JudgedState
from monitor.core.pipeline import Pipeline
from monitor.core.snapshots import Layout
from monitor.offline.curves import interpolated_precision, mean_curve
from monitor.offline.ranking import RankedLists


def offline(**settings: object) -> Judged:
    return Judged(OfflineConfig.model_validate({"measures": ["AP"], **settings}))


# Hand-checked (tests/unit/test_plots.py): relevant at ranks 1 and 3 of R = 2 gives 1.0 up to
# recall 0.7 and 2/3 from 0.8; one relevant at rank 2 of R = 2, none else: 0.5, then 0.
FIRST = (["a", "x", "b"], {"a": 1, "b": 1})
SECOND = (["y", "c"], {"c": 1, "d": 1})
FIRST_CURVE = [1.0] * 8 + [2 / 3] * 3
SECOND_CURVE = [0.5] * 8 + [0.0] * 3


def test_a_completed_sample_has_each_class_s_mean_curve_and_its_baseline_s() -> None:
    judged = offline()
    judged.judgment("s1", 0.0, 1, "q1", *FIRST)
    judged.judgment("s1", 1.0, 2, "q2", *SECOND)
    judged.close()
    first = judged.curves(1)
    assert first is not None and first.sample_id == "s1" and first.queries == 1
    assert first.curve == pytest.approx(FIRST_CURVE)
    assert first.baseline is None and first.baseline_id is None, "the first sample has none"
    overall = judged.curves(OVERALL)
    assert overall is not None and overall.queries == 2
    assert overall.curve == pytest.approx([(a + b) / 2 for a, b in zip(
        FIRST_CURVE, SECOND_CURVE, strict=True)])
    # the next sample swaps the rankings of the classes; q1 is judged twice (counts once)
    judged.judgment("s2", 100.0, 1, "q1", SECOND[0], FIRST[1])
    judged.judgment("s2", 101.0, 1, "q1", *FIRST)
    judged.close()
    pair = judged.curves(1)
    assert pair is not None and (pair.sample_id, pair.baseline_id) == ("s2", "s1")
    assert pair.queries == 1 and pair.baseline == pytest.approx(FIRST_CURVE)
    # ["y", "c"] against {a, b}: nothing relevant retrieved
    assert pair.curve == pytest.approx([0.0] * 11), "the first judgment of q1 counts"
    assert judged.curves(2) is None, "s2 has no query of class 2"


def test_the_curve_is_the_mean_of_its_queries_curves() -> None:
    rankings = [[f"d{i}" for i in range(n, n + 12)] for n in range(6)]
    labels = [{f"d{i}": (i * 7 + q) % 3 for i in range(20)} for q in range(6)]
    judged = offline()
    for q, (ranking, judgments) in enumerate(zip(rankings, labels, strict=True)):
        judged.judgment("s1", float(q), 1, f"query {q}", ranking, judgments)
    judged.close()
    expected = mean_curve(interpolated_precision(RankedLists.from_lists(rankings, labels)))
    pair = judged.curves(1)
    assert pair is not None and expected is not None
    assert pair.curve == pytest.approx(expected, rel=1e-12)


def test_curves_survive_a_snapshot_and_are_exported() -> None:
    judged = offline()
    for sample, start in (("s1", 0.0), ("s2", 100.0)):
        judged.judgment(sample, start, 1, "q1", *FIRST)
        judged.judgment(sample, start + 1, 1, "q2", *SECOND)
        judged.close()
    config = Config.model_validate({"offline": {"measures": ["AP"]}})
    again = Judged.restore(Layout(config, 3), judged.snapshot())
    assert again.curve_pairs == judged.curve_pairs
    assert again.previous is not None and judged.previous is not None
    assert again.previous.curves == judged.previous.curves
    pipeline = Pipeline(config)
    pipeline.judged.active = True
    pipeline.judged.curve_pairs = judged.curve_pairs
    figures = export(pipeline).offline
    assert figures is not None
    overall = next(c for c in figures.curves if c.slice[0] == "all")
    assert (overall.sample_id, overall.baseline_id, overall.queries) == ("s2", "s1", 2)
    assert overall.precision == overall.baseline


def test_a_version_3_judged_state_migrates_without_curves() -> None:
    judged = offline()
    judged.judgment("s1", 0.0, 1, "q1", *FIRST)
    judged.close()
    judged.judgment("s2", 100.0, 1, "q1", *FIRST)
    judged.score_waiting()
    document: dict[str, Any] = json.loads(json.dumps(asdict(judged.snapshot())))
    for sample in [document["previous"], *document["open_samples"]]:
        del sample["curve_classes"], sample["curve_sums"]
    del document["curve_pairs"]  # as version 3 wrote it
    migrated = TypeAdapter(JudgedState).validate_python(Judged.MIGRATIONS[3](document))
    config = Config.model_validate({"offline": {"measures": ["AP"]}})
    restored = Judged.restore(Layout(config, 3), migrated)
    assert restored.curve_pairs == {} and restored.open_samples["s2"].curves == {}
    assert restored.previous is not None and restored.previous.curves == {}
    restored.close()
    assert restored.curves(1) is None, "s2's queries were scored before: no curve"
    restored.judgment("s3", 200.0, 1, "q1", *FIRST)
    restored.close()
    pair = restored.curves(1)
    assert pair is not None and pair.curve == pytest.approx(FIRST_CURVE)
    assert pair.baseline is None and pair.baseline_id is None, "s2 has no curve to compare"
    assert Judged.MIGRATIONS[3](None) is None
    assert Judged.MIGRATIONS[3]({"held": 5}) == {"held": 5, "curve_pairs": []}, (
        "a malformed document is left to the validation")
