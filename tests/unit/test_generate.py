"""The generator: reproducible, and realistic where the metrics depend on it."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from monitor.cli.common import EXIT_USAGE
from monitor.cli.main import main
from monitor.config import Config
from monitor.core.pipeline import Pipeline
from monitor.inputs.generate import (
    DEFAULT_MIXES,
    Mix,
    Regression,
    Traffic,
    World,
    events,
    parse_mix,
    parse_slice,
    rfc3339,
)
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


# Slices: each session's platform, locale and variant, drawn from a mix of its own.

START = Traffic().start
SLICED = re.compile(rb',"attributes":\{[^{}]*\}\}$')


def generate(tmp_path: Path, *flags: str) -> list[bytes]:
    """The lines of ``searchmon generate`` run in this process with ``flags``."""
    output = tmp_path / f"generated-{len(list(tmp_path.iterdir()))}.jsonl"
    assert main(["generate", *flags, "-o", str(output)]) == 0
    return output.read_bytes().splitlines()


def parsed(lines: list[bytes]) -> list[dict[str, Any]]:
    """The events among ``lines`` (the malformed ones left out)."""
    found = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            found.append(event)
    return found


def unsliced(lines: list[bytes]) -> list[bytes]:
    """``lines`` with the attributes of query events taken out."""
    return [SLICED.sub(b"}", line) for line in lines]


def test_the_same_seed_gives_the_same_bytes_slices_included(tmp_path: Path) -> None:
    flags = ("--duration", "10m", "--judged-every", "5m", "--qrels", "--regression-slice",
             "platform=ios", "--regression-after", "5m")
    first = generate(tmp_path, "--seed", "4", *flags)
    assert first == generate(tmp_path, "--seed", "4", *flags)
    assert first != generate(tmp_path, "--seed", "5", *flags)
    assert any(b'"attributes":{"platform":' in line for line in first)


def test_the_slices_leave_the_rest_of_the_stream_as_it_was() -> None:
    """The slices come from a random stream of their own: whatever the mix, or none, the
    lines without their attributes are the same bytes (malformed and duplicated ones
    included), so figures computed from generated traffic do not move."""
    def lines(mixes: tuple[Mix, ...]) -> list[bytes]:
        traffic = Traffic(seed=7, duration=1800.0, sessions_per_second=5.0, malformed_rate=0.05,
                          duplicate_rate=0.05, judged_every=600.0, qrels=True, mixes=mixes)
        return [line for _, _, line in events(World.build(7), traffic)]

    bare = lines(())
    assert not any(b'"attributes"' in line for line in bare)
    assert any(line[:1] != b"{" or not line.endswith(b"}") for line in bare), "truncated"
    for mixes in (DEFAULT_MIXES, (parse_mix("platform", "ios:1"),
                                  parse_mix("locale", "xx-LONG-LOCALE-NAME:1,en-US:2"))):
        sliced = lines(mixes)
        assert sliced != bare
        assert unsliced(sliced) == bare


def test_every_query_carries_its_session_s_slice_drawn_per_the_mix(tmp_path: Path) -> None:
    lines = generate(tmp_path, "--seed", "2", "--duration", "20m", "--malformed-rate", "0",
                     "--platforms", "ios:1,android:1,web:2", "--variants", "a:0.9,b:0.1")
    slice_of: dict[str, dict[str, str]] = {}
    queries = 0
    for event in parsed(lines):
        if event["type"] != "query":
            continue
        queries += 1
        attributes = event["attributes"]
        assert set(attributes) == {"platform", "locale", "variant"}, event
        assert slice_of.setdefault(event["session_id"], attributes) == attributes, event
    sessions = len(slice_of)
    assert sessions > 5000 and queries > sessions
    expected = {
        "platform": {"ios": 0.25, "android": 0.25, "web": 0.5},
        "locale": {"en-US": 0.5, "de-DE": 0.2, "fr-FR": 0.15, "ja-JP": 0.15},  # the default
        "variant": {"a": 0.9, "b": 0.1},
    }
    for dimension, shares in expected.items():
        drawn = Counter(attributes[dimension] for attributes in slice_of.values())
        assert set(drawn) == set(shares), dimension
        for value, share in shares.items():
            assert abs(drawn[value] / sessions - share) < 0.02, (dimension, value, drawn)


def ctr_by_platform(lines: list[bytes], cut: str) -> dict[tuple[str, bool], float]:
    """CTR (queries with a click / queries) by platform, before and after (True) ``cut``
    (an RFC 3339 time), counted from the lines: a click names its query."""
    queries: dict[str, tuple[str, bool]] = {}
    clicked: set[str] = set()
    for event in parsed(lines):
        if event["type"] == "query":
            queries[event["query_id"]] = (event["attributes"]["platform"],
                                          event["timestamp"] >= cut)
        elif event["type"] == "click":
            clicked.add(event["query_id"])
    shown = Counter(queries.values())
    clicks = Counter(cell for query_id, cell in queries.items() if query_id in clicked)
    assert min(shown.values()) > 1500, shown
    return {cell: clicks[cell] / count for cell, count in shown.items()}


def test_a_regression_confined_to_a_slice_lowers_only_that_slice_s_ctr(
    tmp_path: Path,
) -> None:
    """``--regression-slice platform=ios`` without a class: every class of ios is shuffled
    from 30m; android and web click as before, and so does ios without the regression."""
    flags = ("--seed", "1", "--duration", "1h", "--sessions-per-second", "3",
             "--malformed-rate", "0")
    cut = rfc3339(START + 1800)
    healthy = ctr_by_platform(generate(tmp_path, *flags), cut)
    broken = ctr_by_platform(generate(tmp_path, *flags, "--regression-slice", "platform=ios",
                                      "--regression-after", "30m"), cut)
    for ctr in (healthy, broken):
        for platform in ("ios", "android", "web"):
            assert 0.7 < ctr[platform, False] < 0.8, (platform, ctr)
    for platform in ("ios", "android", "web"):
        assert abs(healthy[platform, True] - healthy[platform, False]) < 0.03, platform
    assert broken["ios", True] < broken["ios", False] - 0.3, broken
    for platform in ("android", "web"):
        assert abs(broken[platform, True] - broken[platform, False]) < 0.03, (platform, broken)


# (regression's class, its slice), query's class, session's slice (None: a judged sample),
# whether the query is shuffled at START
ACTIVE = [
    (("navigational", ()), "navigational", None, True),
    (("navigational", ()), "navigational", {"platform": "web"}, True),
    (("navigational", ()), "local", {"platform": "web"}, False),
    ((None, (("platform", "ios"),)), "local", {"platform": "ios", "locale": "de-DE"}, True),
    ((None, (("platform", "ios"),)), "local", {"platform": "web", "locale": "de-DE"}, False),
    ((None, (("platform", "ios"),)), "local", None, False),
    ((None, (("platform", "ios"),)), "local", {}, False),
    (("local", (("platform", "ios"),)), "local", {"platform": "ios"}, True),
    (("local", (("platform", "ios"),)), "product", {"platform": "ios"}, False),
    ((None, (("platform", "ios"), ("locale", "de-DE"))), "local",
     {"platform": "ios", "locale": "de-DE"}, True),
    ((None, (("platform", "ios"), ("locale", "de-DE"))), "local",
     {"platform": "ios", "locale": "fr-FR"}, False),
    ((None, ()), "product", None, True),
]


@pytest.mark.parametrize(("regression", "klass", "attributes", "shuffled"), ACTIVE)
def test_a_regression_reaches_the_queries_of_its_class_and_slice(
    regression: tuple[str | None, tuple[tuple[str, str], ...]], klass: str,
    attributes: dict[str, str] | None, shuffled: bool,
) -> None:
    klass_of, slice_of = regression
    active = Regression(klass_of, START, START + 60, slice_of)
    assert active.active(klass, START, attributes) is shuffled
    assert not active.active(klass, START - 1, attributes), "before"
    assert not active.active(klass, START + 60, attributes), "fixed"


@pytest.mark.parametrize(("flags", "message"), [
    (["--platforms", "ios"], "--platforms 'ios': 'ios' is not name:weight"),
    (["--platforms", ""], "is not name:weight"),
    (["--platforms", "ios:0.5,:0.5"], "':0.5' is not name:weight"),
    (["--locales", "en-US:lots"], "the weight of 'en-US' ('lots') is not a number >= 0"),
    (["--locales", "en-US:-1"], "is not a number >= 0"),
    (["--locales", "en-US:inf"], "is not a number >= 0"),
    (["--variants", "a:1,a:2"], "'a' is given twice"),
    (["--variants", "a:0,b:0"], "every weight is 0"),
    (["--regression-slice", "ios"], "'ios' is not dimension=value"),
    (["--regression-slice", "platform="], "is not dimension=value"),
    (["--regression-slice", "device=ios"], "no dimension 'device' (the dimensions: "
                                           "platform, locale, variant)"),
    (["--regression-slice", "platform=blackberry"], "platform 'blackberry' is never drawn"),
    (["--platforms", "ios:1,web:0", "--regression-slice", "platform=web"],
     "platform 'web' is never drawn (the platform mix: ios:1,web:0)"),
    (["--regression-slice", "platform=ios", "--regression-slice", "platform=web"],
     "platform is given twice"),
])
def test_bad_slice_flags_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str,
) -> None:
    output = tmp_path / "generated.jsonl"
    assert main(["generate", "--duration", "1m", *flags, "-o", str(output)]) == EXIT_USAGE
    error = capsys.readouterr().err
    assert error.startswith("searchmon: generate: ") and message in error, error
    assert error.count("\n") == 1, "one line"
    assert not output.exists(), "nothing generated"


def test_the_mixes_print_back_as_written_and_the_help_names_the_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for mix in DEFAULT_MIXES:
        assert parse_mix(mix.dimension, str(mix)) == mix
    assert parse_mix("platform", " ios : 1 , web:3") == Mix("platform", ("ios", "web"),
                                                             (1.0, 3.0))
    assert parse_slice(["platform=ios, locale = de-DE", "variant=control"], DEFAULT_MIXES) == (
        ("platform", "ios"), ("locale", "de-DE"), ("variant", "control"))
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = "".join(capsys.readouterr().out.split())  # wrapped at spaces and hyphens
    for mix in DEFAULT_MIXES:
        assert f"(default{mix})" in text, mix
