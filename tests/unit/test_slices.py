"""Slices: per-slice counts against an independent count, in order and shuffled within the
allowed lateness; closed value sets, the series budget, and where the values come from."""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import (
    Config,
    ConfigError,
    QueryClassesConfig,
    QueryListsConfig,
    SlicesConfig,
    load_config,
    parse_config,
)
from monitor.core.export import export
from monitor.core.pipeline import Pipeline
from monitor.serve.metrics import ExportCollector
from monitor.serve.queries import FilterError, query_report, select
from monitor.serve.report import report
from monitor.state import codec
from monitor.state.checkpoint import restore_unit
from monitor.state.codec import UnitState
from tests.support.checkpoints import round_trip
from tests.support.events import click, query, stamp

DIMENSIONS = ["platform", "locale"]
PLATFORMS = ["ios", "android", "web", "tv", "car", "watch", "kiosk", "fridge"]
LOCALES = ["en-US", "de-DE", "fr-FR"]
LATENESS = 120.0


def traffic(
    seed: int, sessions: int = 400, classes: tuple[str, ...] = ("head", "tail"),
    spacing: float = 10.0,
) -> list[tuple[float, dict[str, Any], bytes]]:
    """Sessions of one to three queries, some clicked, whose dimension values come as a
    top-level field, in ``attributes``, both (the field wins) or not at all; every event
    time distinct. Returns (time, what the query says, the line) per event."""
    rng = random.Random(seed)
    out: list[tuple[float, dict[str, Any], bytes]] = []
    times = rng.sample(range(0, 40 * sessions), sessions)
    for s, start in enumerate(times):
        at = float(start) * spacing + 0.001 * s
        platform = rng.choice([*PLATFORMS, None])
        locale = rng.choice([*LOCALES, None])
        fields: dict[str, Any] = {}
        where = rng.randrange(3)
        if platform is not None:
            if where == 0:
                fields["platform"] = platform
            elif where == 1:
                fields["attributes"] = {"platform": platform}
            else:
                fields["platform"] = platform
                fields["attributes"] = {"platform": "wrong"}
        if locale is not None:
            fields.setdefault("attributes", {})["locale"] = locale
        klass = rng.choice(classes)
        for q in range(rng.randint(1, 3)):
            qid = f"s{s}q{q}"
            at += rng.uniform(1, 30)
            said = {"session": f"s{s}", "query": qid, "class": klass, "platform": platform,
                    "locale": locale}
            out.append((at, said, query(f"{qid}", at, f"s{s}", qid, klass=klass, **fields)))
            if rng.random() < 0.4:
                at += rng.uniform(1, 10)
                out.append((at, {"click": qid}, click(f"c{qid}", at, f"s{s}", qid)))
    out.sort(key=lambda event: event[0])
    return out


def expected(
    events: list[tuple[float, dict[str, Any], bytes]], limit: int, class_limit: int = 20,
) -> dict[tuple[str, ...], Counter[str]]:
    """Per slice, counted apart from the pipeline: the classes are the first
    ``class_limit`` in event time and each dimension's members its first ``limit`` values;
    a query's slice is its class and values (``unknown`` when not given, ``other`` outside
    the set); a session's is its first query's."""
    members: dict[str, list[str]] = {name: [] for name in DIMENSIONS}
    classes: list[str] = []
    for _, said, _ in events:
        if "class" in said and said["class"] not in classes and len(classes) < class_limit:
            classes.append(said["class"])
        for name in DIMENSIONS:
            value = said.get(name)
            if value is not None and value not in members[name] and len(members[name]) < limit:
                members[name].append(value)

    def slice_of(said: dict[str, Any]) -> tuple[str, ...]:
        values = [said["class"] if said["class"] in classes else "other"]
        for name in DIMENSIONS:
            value = said[name]
            values.append("unknown" if value is None else value if value in members[name]
                          else "other")
        return tuple(values)

    counts: dict[tuple[str, ...], Counter[str]] = {}
    of_query: dict[str, tuple[str, ...]] = {}
    clicked: set[str] = set()
    sessions: set[str] = set()
    for _, said, _ in events:
        if "click" in said:
            counts[of_query[said["click"]]]["clicks"] += 1
            if said["click"] not in clicked:
                clicked.add(said["click"])
                counts[of_query[said["click"]]]["clicked_queries"] += 1
            continue
        key = slice_of(said)
        of_query[said["query"]] = key
        counter = counts.setdefault(key, Counter())
        counter["queries"] += 1
        if said["session"] not in sessions:
            sessions.add(said["session"])
            counter["sessions"] += 1
    return counts


def counted(
    config: Config, lines: list[bytes], restore_at: list[int] | None = None
) -> dict[tuple[str, ...], Counter[str]]:
    """Per slice, as the pipeline counts ``lines`` (restored from its checkpoint before
    each line number of ``restore_at``)."""
    pipeline = Pipeline(config)
    for n, data in enumerate(lines):
        if restore_at and n in restore_at:
            pipeline = round_trip(pipeline)
        assert pipeline.feed(data) is None
    pipeline.close()
    figures = export(pipeline)
    assert figures.labels == ("query_class", *DIMENSIONS)
    return {
        part.slice: Counter({name: part.count(name) for name in
                             ("queries", "clicks", "clicked_queries", "sessions")
                             if part.count(name)})
        for part in figures.slices if part.count("queries") or part.count("sessions")
    }


def shuffled_within_lateness(
    events: list[tuple[float, dict[str, Any], bytes]], seed: int
) -> list[bytes]:
    """Arrival order: each event delayed by up to 100 s, less than the allowed lateness, so
    that no event arrives behind the watermark."""
    rng = random.Random(seed)
    return [line for _, _, line in sorted(events, key=lambda e: e[0] + rng.uniform(0, 100))]


@pytest.mark.parametrize("limit", [20, 5, 2])
def test_per_slice_counts_equal_an_independent_count_in_order_and_shuffled(limit: int) -> None:
    config = Config(slices=SlicesConfig(dimensions=DIMENSIONS, max_values=limit))
    events = traffic(seed=limit)
    want = expected(events, limit)
    assert counted(config, [line for _, _, line in events]) == want
    for seed in range(3):
        assert counted(config, shuffled_within_lateness(events, seed)) == want, seed


def test_the_classes_are_the_first_in_event_time_whatever_the_order_of_arrival() -> None:
    """More classes than ``max_query_classes``: the set is the first classes in event time,
    and every count per slice equals an independent count, in order and shuffled within the
    allowed lateness (a class arriving before an earlier one takes its place, and gives it
    back)."""
    config = Config(slices=SlicesConfig(dimensions=DIMENSIONS, max_values=5),
                    query_classes=QueryClassesConfig(max_query_classes=4))
    # sessions starting 2 s apart on average: classes first come within the lateness
    events = traffic(seed=11, classes=tuple(f"class-{i}" for i in range(10)), spacing=0.05)
    want = expected(events, 5, class_limit=4)
    assert len({key[0] for key in want}) == 5, "four classes and other"
    assert counted(config, [line for _, _, line in events]) == want
    for seed in range(4):
        assert counted(config, shuffled_within_lateness(events, seed)) == want, seed
    # restored from a checkpoint while classes and values wait: the same counts
    lines = shuffled_within_lateness(events, 7)
    assert counted(config, lines, restore_at=[len(lines) // 20, len(lines) // 9]) == want
    plain = Config(query_classes=QueryClassesConfig(max_query_classes=4))
    for seed in range(2):
        pipeline = Pipeline(plain)
        for data in shuffled_within_lateness(events, seed):
            assert pipeline.feed(data) is None
        pipeline.close()
        queries, per_class = Counter[str](), Counter[str]()
        for part in export(pipeline).slices:
            queries[part.slice[0]] += part.count("queries")
        for key, counts in want.items():
            per_class[key[0]] += counts["queries"]
        assert +queries == per_class, seed


def test_folded_queries_are_counted_per_dimension() -> None:
    config = Config(slices=SlicesConfig(dimensions=DIMENSIONS, max_values=2))
    events = traffic(seed=9)
    folded = {}
    for name in DIMENSIONS:
        given = [said[name] for _, said, _ in events if said.get(name)]
        kept = set(list(dict.fromkeys(given))[:2])
        folded[name] = sum(1 for value in given if value not in kept)
    assert all(folded.values())
    for lines in ([line for _, _, line in events], shuffled_within_lateness(events, 1)):
        pipeline = Pipeline(config)
        for data in lines:
            pipeline.feed(data)
        assert export(pipeline).folded_values == folded


def test_configured_values_are_the_closed_set_and_the_rest_is_other() -> None:
    config = Config(slices=SlicesConfig(dimensions=["platform"],
                                        values={"platform": ["ios", "android"]}))
    pipeline = Pipeline(config)
    for i, platform in enumerate(["ios", "web", "android", "tv", "ios"]):
        pipeline.feed(query(f"q{i}", i, f"s{i}", f"q{i}", platform=platform))
    pipeline.feed(query("q9", 9, "s9", "q9"))
    pipeline.close()
    figures = export(pipeline)
    queries = {p.slice: p.count("queries") for p in figures.slices if p.count("queries")}
    assert queries == {("travel", "ios"): 2, ("travel", "android"): 1, ("travel", "other"): 2,
                       ("travel", "unknown"): 1}
    assert figures.folded_values == {"platform": 2}


def test_the_series_budget_folds_new_slices_and_logs_once(
    caplog: pytest.LogCaptureFixture
) -> None:
    config = Config(slices=SlicesConfig(dimensions=["platform", "locale"], max_values=50,
                                        max_series=10))
    pipeline = Pipeline(config)
    with caplog.at_level(logging.WARNING):
        for i in range(40):
            pipeline.feed(query(f"q{i}", i, f"s{i}", f"q{i}", platform=f"p{i % 7}",
                                locale=f"l{i % 5}"))
    pipeline.close()
    labels = {p.slice for p in export(pipeline).slices}
    assert len(labels) <= 10 + len(pipeline.slices.classes.names)
    assert ("travel", "other", "other") in labels
    assert sum("max_series" in r.getMessage() for r in caplog.records) == 1
    assert sum(p.count("queries") for p in export(pipeline).slices) == 40


@pytest.mark.parametrize(("order", "restore"), [
    ("in", False), ("reversed", False), ("shuffled", False), ("shuffled", True),
])
def test_past_the_budget_no_slice_counts_a_query_of_other_values(order: str, restore: bool) -> None:
    """Values learned in event time, many of them losing their place to earlier ones that
    arrive later, and the series budget full: a slice that names a value counts only
    queries of that value, and the slices stay within the budget."""
    rng = random.Random(7)
    said: list[tuple[float, str, str]] = [
        (rng.uniform(0, 60), f"p{a}", f"l{b}") for a in range(30) for b in range(30)
    ]
    said.sort()
    if order == "reversed":
        said.reverse()
    elif order == "shuffled":
        rng.shuffle(said)
    config = Config(slices=SlicesConfig(dimensions=DIMENSIONS, max_values=12, max_series=25))
    lines = [query(f"q{n}", at, f"s{n}", f"q{n}", platform=platform, locale=locale)
             for n, (at, platform, locale) in enumerate(said)]
    pipeline = Pipeline(config)
    for n, data in enumerate(lines):
        if restore and n % 300 == 150:
            pipeline = round_trip(pipeline)
        assert pipeline.feed(data) is None
    pipeline.close()
    given = Counter((platform, locale) for _, platform, locale in said)
    parts = [p for p in export(pipeline).slices if p.count("queries")]
    for part in parts:
        _, platform, locale = part.slice
        assert part.count("queries") <= sum(
            n for (a, b), n in given.items()
            if platform in ("other", a) and locale in ("other", b)
        ), part.slice
    assert sum(p.count("queries") for p in parts) == len(said)
    assert len({p.slice for p in export(pipeline).slices}) <= 25


def test_label_values_stay_bounded_whatever_the_input_says() -> None:
    config = Config(slices=SlicesConfig(dimensions=["platform"], max_values=3))
    pipeline = Pipeline(config)
    for i in range(1000):
        pipeline.feed(query(f"q{i}", i * 200.0, f"s{i}", f"q{i}", platform=f"p{i}-" + "x" * i))
    values = {p.slice[1] for p in export(pipeline).slices}
    assert values <= {"p0-", "p1-x", "p2-xx", "other", "unknown"}


def test_a_configuration_whose_value_lists_exceed_the_budget_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "searchmon.toml"
    path.write_text('[slices]\ndimensions = ["platform", "locale"]\nmax_series = 5\n'
                    '[slices.values]\nplatform = ["ios", "android", "web"]\n'
                    'locale = ["de", "fr"]\n')
    with pytest.raises(ConfigError, match="max_series"):
        load_config(path)
    for bad in ('dimensions = ["query_class"]', 'dimensions = ["a-b"]',
                'dimensions = ["p", "p"]', 'dimensions = ["p"]\nvalues = {p = ["other"]}',
                'dimensions = ["p"]\nvalues = {q = ["x"]}'):
        path.write_text(f"[slices]\n{bad}\n")
        with pytest.raises(ConfigError):
            load_config(path)


def test_every_online_and_offline_family_carries_the_dimensions() -> None:
    config = Config(slices=SlicesConfig(dimensions=["platform"]))
    pipeline = Pipeline(config)
    pipeline.feed(query("q1", 0, "s1", "q1", platform="ios"))
    pipeline.feed(json.dumps({
        "type": "judgment", "sample_id": "A", "timestamp": stamp(1), "query_id": "j1",
        "query_text": "cheap flights", "ranking": ["d0", "d1"], "labels": {"d0": 1},
        "query_class": "travel", "platform": "ios",
    }).encode())
    pipeline.close()
    registry = CollectorRegistry()
    registry.register(ExportCollector(lambda: export(pipeline)))
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    sliced = [f for f in families if f.name.startswith("search_")
              and f.name != "search_judged_last_sample_timestamp_seconds"]  # of no slice
    assert sliced
    for family in sliced:
        for sample in family.samples:
            assert "platform" in sample.labels, (family.name, sample.labels)
            if sample.labels["query_class"] == "all":
                assert sample.labels["platform"] == ""  # never an "all" value
    scores = [s for f in families if f.name == "search_judged_score" for s in f.samples
              if s.name == "search_judged_score_count" and s.value]
    assert {(s.labels["query_class"], s.labels["platform"]) for s in scores} >= {
        ("travel", "ios")
    }


def test_without_slices_every_output_keeps_its_shape() -> None:
    pipeline = Pipeline(Config())
    pipeline.feed(query("q1", 0, "s1", "q1", platform="ios"))
    pipeline.close()
    result = report(pipeline)
    assert "dimensions" not in result and set(result["online"]) == {"all", "other", "travel"}
    assert export(pipeline).labels == ("query_class",)


@pytest.mark.parametrize("dimensions", [[], ["platform", "bucket"]])
def test_an_attribute_that_is_no_string_is_no_value_and_the_query_counts(
    dimensions: list[str],
) -> None:
    pipeline = Pipeline(Config(slices=SlicesConfig(dimensions=dimensions)))
    given: list[dict[str, Any]] = [
        {"platform": "ios", "bucket": 5}, {"platform": "ios", "flag": None},
        {"platform": None, "bucket": [1]}, {"bucket": {"nested": "x"}, "platform": 1.5},
    ]
    for n, attributes in enumerate(given):
        assert pipeline.feed(query(f"q{n}", n, f"s{n}", f"q{n}", attributes=attributes)) is None
    pipeline.close()
    assert pipeline.health.accepted == 4 and not any(pipeline.health.rejected.values())
    if dimensions:
        counts = {p.slice[1:]: p.count("queries") for p in export(pipeline).slices
                  if p.count("queries")}
        assert counts == {("ios", "unknown"): 2, ("unknown", "unknown"): 2}


def test_a_ubi_query_takes_its_values_from_its_record_and_query_attributes() -> None:
    config = Config(slices=SlicesConfig(dimensions=["platform", "application"]))
    pipeline = Pipeline(config)
    record = {
        "query_id": "u1", "client_id": "c1", "user_query": "laptop", "timestamp": stamp(0),
        "application": "shop", "query_response_hit_ids": ["a", "b"],
        "query_attributes": {"platform": "android", "application": "ignored"},
    }
    assert pipeline.feed(json.dumps(record).encode()) is None
    pipeline.close()
    (part,) = [p for p in export(pipeline).slices if p.count("queries")]
    assert part.slice == ("other", "android", "shop")


def restored_under(pipeline: Pipeline, config: Config) -> Pipeline:
    data = codec.encode("unit", UnitState(
        "search-events", 0, 0, 1.0, "replica-1", codec.fingerprint(pipeline.config),
        pipeline.snapshot(),
    ))
    return restore_unit(data, "test", config)[1]


def test_a_checkpoint_restores_under_the_dimensions_configured_now() -> None:
    """The same dimensions: as it was. One removed: the slices that differed by it alone add
    up. One added: ``unknown`` so far. Counting goes on."""
    config = Config(slices=SlicesConfig(dimensions=DIMENSIONS, max_values=5))
    events = traffic(seed=3)
    half = len(events) // 2
    pipeline = Pipeline(config)
    for _, _, data in events[:half]:
        pipeline.feed(data)
    same = restored_under(pipeline, config)
    assert export(same) == export(pipeline)
    fewer = restored_under(pipeline, Config(slices=SlicesConfig(dimensions=["platform"])))
    sums: Counter[tuple[str, ...]] = Counter()
    for part in export(pipeline).slices:
        sums[part.slice[:2]] += part.count("queries")
    assert {p.slice: p.count("queries") for p in export(fewer).slices} == dict(sums)
    more = restored_under(pipeline, Config(slices=SlicesConfig(
        dimensions=[*DIMENSIONS, "variant"], max_values=5)))
    assert {p.slice: p.count("queries") for p in export(more).slices} == {
        (*p.slice, "unknown"): p.count("queries") for p in export(pipeline).slices
    }
    for restored in (same, fewer, more):
        for _, _, data in events[half:]:
            pipeline_rejection = restored.feed(data)
            assert pipeline_rejection is None
        restored.close()
    total = sum(1 for _, said, _ in events if "query" in said)
    for restored in (same, fewer, more):
        assert sum(p.count("queries") for p in export(restored).slices) == total


def test_the_query_lists_are_kept_by_the_dimensions_configured_for_them() -> None:
    """``[query_lists] dimensions``: the lists of each class and of each value of those;
    a filter on another dimension is refused, saying which ones the lists are kept by."""
    config = Config(slices=SlicesConfig(dimensions=DIMENSIONS),
                    query_lists=QueryListsConfig(dimensions=["platform"], min_sessions=1))
    pipeline = Pipeline(config)
    for i in range(60):
        pipeline.feed(query(f"q{i}", i, f"s{i}", f"q{i}", text=f"shoes {i % 3}",
                            platform=("ios", "web")[i % 2], locale="de-DE"))
    pipeline.close()
    report = query_report([pipeline], pipeline, config)
    assert report["dimensions"] == ["platform"]
    kinds = {(e["query_class"], e.get("platform")) for e in report["lists"]}
    assert kinds == {("all", None), ("travel", None), ("travel", "ios"), ("travel", "web")}
    ios = select(report, values={"platform": "ios"})
    searched = [e for e in ios["lists"] if e["list"] == "searches"]
    assert searched and sum(r["count"] for r in searched[0]["rows"]) == 30
    with pytest.raises(FilterError, match="locale: the query lists are not kept by it"):
        select(report, values={"locale": "de-DE"})
    plain = Pipeline(Config(slices=SlicesConfig(dimensions=DIMENSIONS)))
    plain.feed(query("q1", 0, "s1", "q1", platform="ios"))
    by_class = query_report([plain], plain, plain.config)
    assert {e["query_class"] for e in by_class["lists"]} == {"all", "travel"}
    assert all("platform" not in e for e in by_class["lists"])


def test_a_judgment_is_placed_by_the_dimensions_alone_when_experiments_read_more() -> None:
    config = parse_config(
        '[slices]\ndimensions = ["platform"]\n[[experiments]]\nid = "e1"\n'
        'attribute = "ranker"\ncontrol = "A"\nsplit = {A = 0.5, B = 0.5}\n'
    )
    pipeline = Pipeline(config)
    for n, attributes in enumerate([None, {"platform": "ios", "ranker": "B"}]):
        judgment = {"type": "judgment", "sample_id": "s1", "timestamp": stamp(n),
                    "query_id": f"j{n}", "query_text": f"text {n}", "ranking": ["a"],
                    "labels": {"a": 1}, "attributes": attributes}
        assert pipeline.feed(json.dumps(judgment).encode()) is None
    pipeline.offline_tick(pipeline.sessions.newest, True)
    assert not any(pipeline.health.rejected.values())
    assert report(pipeline)["offline"]["all"]["judged_queries"] == 2


@pytest.mark.parametrize("seed", range(8))
def test_a_restored_checkpoint_holds_the_same_slices_and_the_same_canonical_ones(
    seed: int,
) -> None:
    """Values losing and getting back their places, the series budget reached: a checkpoint
    restores the same index, hidden values and canonical slices the live pipeline had."""
    rng = random.Random(seed)
    config = Config(slices=SlicesConfig(dimensions=DIMENSIONS, max_values=3, max_series=12))
    pipeline = Pipeline(config)
    events = [(rng.uniform(0, 50), f"p{rng.randrange(8)}", f"l{rng.randrange(5)}")
              for _ in range(120)]
    for n, (at, platform, locale) in enumerate(sorted(events, key=lambda e: -e[0])):
        assert pipeline.feed(query(f"q{n}", at, f"s{n}", f"q{n}", platform=platform,
                                   locale=locale)) is None
        if n % 20 == 19:
            restored = round_trip(pipeline)
            live, back = pipeline.slices, restored.slices
            assert back.names == live.names and back.index == live.index
            assert back.hidden == live.hidden
            assert [back.canonical(i) for i in range(len(back.names))] == [
                live.canonical(i) for i in range(len(live.names))]
            pipeline = restored


def test_a_class_keeps_its_own_slice_when_the_series_budget_is_full() -> None:
    config = Config(slices=SlicesConfig(dimensions=["platform"], max_series=4))
    pipeline = Pipeline(config)
    for n, (klass, platform) in enumerate(
        [("head", "ios"), ("head", "web"), ("head", "tv"), ("tail", "ios")]
    ):
        assert pipeline.feed(query(f"q{n}", n, f"s{n}", f"q{n}", klass=klass,
                                   platform=platform)) is None
    restored = round_trip(pipeline)
    assert ("tail", "unknown") in restored.slices.index
