"""The generator: reproducible, and realistic where the metrics depend on it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from monitor.config import Config
from monitor.core.pipeline import Pipeline
from monitor.inputs.generate import Regression, Traffic, World, events
from monitor.serve.report import report

HOUR = 3600.0


def clicks_by_position(seed: int) -> tuple[Counter[int], Counter[int], int, int]:
    world = World.build(seed)
    clicks: Counter[int] = Counter()
    relevant_clicks = clicked = 0
    shown: Counter[int] = Counter()
    queries: dict[str, tuple[str, list[str]]] = {}
    by_text = {q.text: q for q in world.queries}
    for _, _, line in events(world, Traffic(seed=seed, sessions_per_second=5, duration=1800,
                                            malformed_rate=0, duplicate_rate=0)):
        event = json.loads(line)
        if event["type"] == "query":
            queries[event["query_id"]] = (event["query_text"], event["result_ids"])
            for position in range(1, len(event["result_ids"]) + 1):
                shown[position] += 1
        elif event["type"] == "click":
            clicks[event["position"]] += 1
            text, _ = queries[event["query_id"]]
            clicked += 1
            relevant_clicks += by_text[text].relevance[event["doc_id"]] > 0
    return clicks, shown, relevant_clicks, clicked


def test_click_through_falls_with_position_and_favours_relevant_results() -> None:
    clicks, shown, relevant_clicks, clicked = clicks_by_position(2)
    rate = [clicks[p] / shown[p] for p in range(1, 11)]
    assert rate[0] > rate[2] > rate[5] > rate[9]
    # about half of the documents in result lists are relevant; clicks favour them strongly
    assert relevant_clicks / clicked > 0.8


@pytest.mark.slow
def test_injected_regression_moves_only_its_class() -> None:
    def replay(regression: Regression | None) -> dict[str, dict[str, float]]:
        world = World.build(6)
        traffic = Traffic(seed=6, sessions_per_second=3, duration=2 * HOUR,
                          judged_every=HOUR, judged_queries=300, regression=regression)
        pipeline = Pipeline(Config())
        for _, _, line in events(world, traffic):
            pipeline.feed(line)
        pipeline.close()
        online = report(pipeline)["online"]
        ndcg = {name: pipeline.judged.samples_mean(1, k, 0)
                for k, name in enumerate(pipeline.slices.classes.names)}
        return {name: {"ctr": online[name]["ctr"] or 0.0,
                       "ndcg": (ndcg[name] or (0.0, 0))[0]}
                for name in online if name not in ("all", "other")}

    base = replay(None)
    broken = replay(Regression("navigational", Traffic().start))
    assert broken["navigational"]["ctr"] < base["navigational"]["ctr"] - 0.1
    assert broken["navigational"]["ndcg"] < base["navigational"]["ndcg"] - 0.2
    for klass in ("informational", "product", "local"):
        assert abs(broken[klass]["ctr"] - base[klass]["ctr"]) < 0.05, klass
        assert abs(broken[klass]["ndcg"] - base[klass]["ndcg"]) < 0.05, klass




def ids_of(seed: int, start: float) -> set[str]:
    traffic = Traffic(seed=seed, start=start, duration=600, sessions_per_second=2,
                      malformed_rate=0, duplicate_rate=0, judged_every=300, judged_queries=10)
    found = set()
    for _, _, line in events(World.build(seed), traffic):
        event = json.loads(line)
        found |= {event[k] for k in ("event_id", "session_id", "query_id") if k in event}
    return found


def test_ids_are_unique_per_seed_and_start() -> None:
    """Two runs into one daemon share no event, session or query id (they were rejected as
    duplicates, or joined each other's sessions)."""
    start = Traffic().start
    first = ids_of(1, start)
    assert first and not first & ids_of(2, start), "another seed"
    assert not first & ids_of(1, start + 3600), "another start"
    assert first == ids_of(1, start), "the same seed and start: the same ids"


def test_to_kafka_the_traffic_ends_at_the_wall_clock() -> None:
    import argparse
    import time

    from monitor.cli.common import UsageError
    from monitor.cli.generate import _start

    def start(**given: object) -> float:
        args = {"start": None, "end": None, "kafka": None, "duration": 3600.0} | given
        return _start(argparse.Namespace(**args), 7.0)

    assert start() == 7.0, "to a file: the fixed start"
    before = time.time()
    assert before - 3600 <= start(kafka="127.0.0.1:9092") <= time.time() - 3600
    assert start(end="2026-11-26T00:00:00Z") == 1_795_651_200.0 - 3600
    assert start(start="1790000000") == 1_790_000_000.0
    for bad in ({"start": "2026-11-26T00:00:00"}, {"start": "yesterday"},
                {"start": "now", "end": "now"}):
        with pytest.raises(UsageError):
            start(**bad)
