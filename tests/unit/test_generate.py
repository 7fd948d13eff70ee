"""The generator: reproducible, and realistic where the metrics depend on it."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import socket
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.cli.common import EXIT_USAGE, UsageError, produce
from monitor.cli.main import main
from monitor.config import Config
from monitor.core.pipeline import Pipeline
from monitor.inputs.generate import (
    ATTRACTIVENESS,
    DEFAULT_MIXES,
    SATISFACTION,
    Mix,
    Regression,
    Traffic,
    World,
    click_probability,
    events,
    parse_experiment,
    parse_mix,
    parse_slice,
    rfc3339,
    team_draft,
    team_outcomes,
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


EXPERIMENT = ["--experiment", "exp-7:ranker:A=0.5,B=0.5"]
BAD_FLAGS = [
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
    (["--experiment", "exp-7"], "--experiment 'exp-7': 'exp-7' is not id:attribute:split"),
    (["--experiment", "exp-7:ranker:A=0.5"], "one variant ('A')"),
    (["--experiment", "exp-7:ranker:A=0.6,B=0.6"], "the shares add up to 1.2, not 1"),
    (["--experiment", "exp-7:ranker:A=x,B=1"], "the share of 'A' ('x') is not a number from "
                                               "0 to 1"),
    (["--experiment", "exp-7:ranker:A=0.5,A=0.5"], "variant 'A' is given twice"),
    (["--experiment", "exp-7:ranker:A"], "'A' is not variant=share"),
    ([*EXPERIMENT, "--experiment", "exp-8:ranker:x=0.5,y=0.5"],
     "the attribute of exp-7:ranker:A=0.5,B=0.5 (each experiment has its own)"),
    ([*EXPERIMENT, "--experiment", "exp-7:layout:x=0.5,y=0.5"], "the id of exp-7:"),
    (["--effect", "B:ctr=+0.02"], "--effect 'B:ctr=+0.02': no experiment with variant 'B' "
                                  "(the experiments: none: give --experiment)"),
    ([*EXPERIMENT, "--effect", "C:ctr=+0.02"], "no experiment with variant 'C'"),
    ([*EXPERIMENT, "--effect", "exp-8:B:ctr=+0.02"], "no experiment with variant 'exp-8:B'"),
    ([*EXPERIMENT, "--experiment", "exp-8:layout:A=0.5,B=0.5", "--effect", "B:ctr=0.01"],
     "more than one experiment with variant 'B'"),
    ([*EXPERIMENT, "--effect", "B"], "'B' is not variant:ctr=change"),
    ([*EXPERIMENT, "--effect", "B:clicks=1"], "no effect on 'clicks' (effects: ctr)"),
    ([*EXPERIMENT, "--effect", "B:ctr=0.5"], "the change '0.5' is not a number from -0.134 "
                                             "to 0.137"),
    ([*EXPERIMENT, "--effect", "B:ctr=0.01", "--effect", "exp-7:B:ctr=0.02"],
     "exp-7:B has an effect already"),
    ([*EXPERIMENT, "--regression-slice", "ranker=C"], "ranker 'C' is never drawn"),
    (["--interleave", "A"], "--interleave 'A': 'A' is not two rankers"),
    (["--interleave", "A:A"], "'A:A' is not two rankers"),
    (["--preference", "B=0.1"], "--preference needs --interleave"),
    (["--interleave", "A:B", "--preference", "C=0.1"], "--preference 'C=0.1': 'C=0.1' does "
                                                       "not name 'A' or 'B'"),
    (["--interleave", "A:B", "--preference", "B=0.5"], "the size '0.5' is not a number from "
                                                       "0 to below 0.5"),
    ([*EXPERIMENT, "--effect", "B:ctr=0.01", "--interleave", "A:B"],
     "give --effect or --interleave, not both"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS)
def test_bad_flags_are_usage_errors(
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


# Users, A/B experiments with true effects, and team-draft interleaving.

USER = re.compile(rb',"user_id":"u[^"]*"\}$')


def unusered(lines: list[bytes]) -> list[bytes]:
    """``lines`` with the attributes of query events and the user ids taken out."""
    return [USER.sub(b"}", line) for line in unsliced(lines)]


def test_users_and_experiments_only_add_fields_to_the_stream() -> None:
    """Users come from a random stream of their own and assignments from a hash: with them,
    the lines without their user ids and attributes are the same bytes (malformed and
    duplicated ones included); without them, no line has a user id."""
    def lines(**design: Any) -> list[bytes]:
        traffic = Traffic(seed=7, duration=1800.0, sessions_per_second=5.0, malformed_rate=0.05,
                          duplicate_rate=0.05, judged_every=600.0, qrels=True, **design)
        return [line for _, _, line in events(World.build(7), traffic)]

    bare = lines()
    assert not any(b'"user_id"' in line for line in bare)
    designs: list[dict[str, Any]] = [
        {"users": True},
        {"experiments": (parse_experiment("exp-1:ranker:A=0.5,B=0.5"),
                         parse_experiment("exp-2:variant:x=0.9,y=0.1"))},
    ]
    for design in designs:
        with_users = lines(**design)
        assert sum(b'"user_id":"u' in line for line in with_users) > len(with_users) * 0.9
        assert unusered(with_users) == unsliced(bare), design


def seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp).timestamp()


def test_sessions_belong_to_users_who_come_back_and_keep_their_slice(tmp_path: Path) -> None:
    lines = generate(tmp_path, "--users", "--seed", "3", "--duration", "1h",
                     "--malformed-rate", "0", "--duplicate-rate", "0")
    user_of: dict[str, str] = {}
    visits: dict[str, dict[str, float]] = {}  # user -> session -> its start
    slice_of: dict[str, dict[str, str]] = {}
    for event in parsed(lines):
        if "session_id" not in event:
            continue  # judged
        user = event["user_id"]  # every event of a session carries its user
        assert user_of.setdefault(event["session_id"], user) == user, event
        if event["type"] == "query":
            visits.setdefault(user, {}).setdefault(event["session_id"],
                                                   seconds(event["timestamp"]))
            assert slice_of.setdefault(user, event["attributes"]) == event["attributes"]
    assert {"click", "conversion"} <= {e["type"] for e in parsed(lines) if "user_id" in e}
    sessions = Counter(len(starts) for starts in visits.values())
    mean = sum(count * users for count, users in sessions.items()) / sum(sessions.values())
    # 3 on average (geometric), fewer in an hour: a user's next session may be after the end
    assert 2.0 < mean < 2.5, sessions
    assert sessions[1] > sessions[2] > sessions[3] > sessions[4] > sessions[6] > 0, sessions
    # after the first half hour, about a third of the sessions are new users' (1 / 3 each)
    firsts = {min(starts.values()) for starts in visits.values()}
    later = [start for starts in visits.values() for start in starts.values()
             if start >= START + 1800]
    assert 0.31 < sum(start in firsts for start in later) / len(later) < 0.37
    for starts in visits.values():  # a minute at least between a user's sessions
        times = sorted(starts.values())
        assert all(after - before >= 60 for before, after in itertools.pairwise(times))


def test_users_get_their_variant_by_a_hash_of_the_user_and_the_experiment() -> None:
    """The assignment documented in docs/reference/cli.md: the first 8 bytes of SHA-256 of
    ``id:user_id``, as a fraction of 2^64, against the cumulative shares."""
    experiment = parse_experiment("exp-7:ranker:A=0.52,B=0.48")
    other = parse_experiment("exp-8:layout:old=0.5,new=0.5")
    users = [f"u{number}" for number in range(20_000)]
    for user in users[:50]:
        fraction = int.from_bytes(hashlib.sha256(f"exp-7:{user}".encode()).digest()[:8],
                                  "big") / 2**64
        assert experiment.variant(user) == ("A" if fraction < 0.52 else "B"), user
    assigned = Counter(experiment.variant(user) for user in users)
    assert abs(assigned["A"] / len(users) - 0.52) < 0.01, assigned  # a sample ratio mismatch
    crossed = Counter((experiment.variant(user), other.variant(user)) for user in users)
    for (variant, layout), count in crossed.items():  # independent of each other
        share = {"A": 0.52, "B": 0.48}[variant] * 0.5
        assert abs(count / len(users) - share) < 0.01, (variant, layout, crossed)


def test_every_query_of_a_user_carries_the_user_s_variant(tmp_path: Path) -> None:
    lines = generate(tmp_path, "--seed", "5", "--duration", "10m", "--malformed-rate", "0",
                     "--experiment", "exp-7:ranker:A=0.52,B=0.48",
                     "--experiment", "exp-8:variant:old=0.5,new=0.5")
    experiments = (parse_experiment("exp-7:ranker:A=0.52,B=0.48"),
                   parse_experiment("exp-8:variant:old=0.5,new=0.5"))
    queries = [event for event in parsed(lines) if event["type"] == "query"]
    assert len({query["user_id"] for query in queries}) > 1000
    for query in queries:
        assert list(query["attributes"]) == ["platform", "locale", "variant", "ranker"]
        for experiment in experiments:
            assert query["attributes"][experiment.attribute] == \
                experiment.variant(query["user_id"]), query


def ctr_by_variant(lines: list[bytes], world: World,
                   change: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per variant of ``ranker``: the CTR of its queries with results; its truth, the mean of
    their click probabilities under the click model plus the variant's ``change``; the
    standard error of the CTR around its truth; and the CTR of all its queries (the
    daemon's: zero-result queries count)."""
    relevance = {query.text: query.relevance for query in world.queries}
    shown: dict[str, tuple[str, list[float]]] = {}
    clicked: set[str] = set()
    for event in parsed(lines):
        if event["type"] == "query":
            shown[event["query_id"]] = (event["attributes"]["ranker"], [
                ATTRACTIVENESS[relevance[event["query_text"]][doc]]
                for doc in event["result_ids"]])
        elif event["type"] == "click":
            clicked.add(event["query_id"])
    found = {}
    for variant in ("A", "B"):
        mine = {q: a for q, (v, a) in shown.items() if v == variant}
        truth = {q: click_probability(a) + change.get(variant, 0.0) for q, a in mine.items() if a}
        found[variant] = {
            "ctr": sum(q in clicked for q in truth) / len(truth),
            "truth": sum(truth.values()) / len(truth),
            "error": sum(p * (1 - p) for p in truth.values()) ** 0.5 / len(truth),
            "all": sum(q in clicked for q in mine) / len(mine),
            "served": len(truth) / len(mine),
        }
    return found


@pytest.mark.parametrize("change", [0.05, pytest.param(-0.05, marks=pytest.mark.slow)])
def test_a_ctr_effect_moves_its_variant_s_ctr_by_its_size(tmp_path: Path, change: float) -> None:
    """``--effect B:ctr=CHANGE``: each query with results of a user in B is clicked with its
    probability under the click model plus CHANGE; so B's CTR is the model's plus CHANGE,
    A's the model's, and B's less A's about CHANGE (exactly, but for the queries' mix)."""
    lines = generate(tmp_path, "--seed", "8", "--duration", "3m", "--sessions-per-second",
                     "150", "--malformed-rate", "0", "--duplicate-rate", "0",
                     "--experiment", "exp-7:ranker:A=0.5,B=0.5", "--effect", f"B:ctr={change}")
    ctr = ctr_by_variant(lines, World.build(8), {"B": change})
    for variant in ("A", "B"):
        assert abs(ctr[variant]["ctr"] - ctr[variant]["truth"]) < 4 * ctr[variant]["error"], ctr
    assert 0.0025 < ctr["A"]["error"] < 0.004, ctr
    lift = ctr["B"]["ctr"] - ctr["A"]["ctr"]
    assert abs(lift - change) < 0.015, ctr
    # the daemon's CTR counts zero-result queries too (1%): the lift is CHANGE x the rest
    assert 0.98 < ctr["B"]["served"] < 1
    assert abs(ctr["B"]["all"] - ctr["A"]["all"] - change * ctr["B"]["served"]) < 0.015, ctr


# first ranking, second ranking, coin flips (True: the first picks), the interleaved list and
# its teams: hand-checked against the team draft of Radlinski, Kurup and Joachims (2008)
TEAM_DRAFTS = [
    ("abcd", "beaf", (True, False), "abec", (0, 1, 1, 0)),
    ("abcd", "beaf", (False, True), "bace", (1, 0, 0, 1)),
    ("xyzw", "xyzw", (True, True), "xyzw", (0, 1, 0, 1)),
    ("xyzw", "xyzw", (False, True), "xyzw", (1, 0, 0, 1)),
    ("a", "bcd", (True, True), "abcd", (0, 1, 1, 1)),  # the first runs out
    ("ab", "ba", (True, True), "ab", (0, 1)),  # both run out
]


@pytest.mark.parametrize(("first", "second", "coins", "shown", "teams"), TEAM_DRAFTS)
def test_team_draft_interleaves_as_the_worked_examples(
    first: str, second: str, coins: tuple[bool, ...], shown: str, teams: tuple[int, ...],
) -> None:
    flips = iter(coins)
    assert team_draft(tuple(first), tuple(second), flips.__next__, 4) == (tuple(shown), teams)


# attractiveness, satisfaction and team of each result; P(first team wins), P(second wins),
# P(tie with a click): examined 0.9 at position 1, 0.95 x 0.8 = 0.76 at position 2
TEAM_OUTCOMES = [
    ((0.5,), (0.3,), (0,), (0.45, 0.0, 0.0)),
    ((1.0, 1.0), (0.0, 0.0), (0, 1), (0.9 * 0.24, 0.0, 0.9 * 0.76)),  # both clicked: a tie
    ((1.0, 1.0), (1.0, 0.0), (0, 1), (0.9, 0.0, 0.0)),  # satisfied by the first: no second
    ((0.0, 1.0), (0.0, 0.0), (0, 1), (0.0, 0.9 * 0.76, 0.0)),
]


@pytest.mark.parametrize(("attractiveness", "satisfaction", "teams", "outcomes"),
                         TEAM_OUTCOMES)
def test_team_outcomes_of_the_cascade_as_checked_by_hand(
    attractiveness: tuple[float, ...], satisfaction: tuple[float, ...],
    teams: tuple[int, ...], outcomes: tuple[float, float, float],
) -> None:
    assert team_outcomes(attractiveness, satisfaction, teams) == pytest.approx(outcomes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ATTRACTIVENESS), st.sampled_from(SATISFACTION),
                          st.integers(0, 1)), max_size=10))
def test_team_outcomes_add_up_to_the_click_probability_and_mirror(
    results: list[tuple[float, float, int]],
) -> None:
    attractiveness = [a for a, _, _ in results]
    satisfaction = [s for _, s, _ in results]
    teams = [t for _, _, t in results]
    wins, losses, ties = team_outcomes(attractiveness, satisfaction, teams)
    assert wins + losses + ties == pytest.approx(click_probability(attractiveness))
    assert min(wins, losses, ties) >= 0
    mirrored = team_outcomes(attractiveness, satisfaction, [1 - t for t in teams])
    assert mirrored == pytest.approx((losses, wins, ties))


def interleaving_delta(lines: list[bytes]) -> dict[str, tuple[float, int]]:
    """Per class and over all: Δ_AB = (wins_A + ties / 2) / (wins_A + wins_B + ties) - 0.5,
    over the queries with a click (a tie: as many clicks on each team's results), and how
    many such queries; the ``result_teams`` checked on the way."""
    team_of: dict[str, dict[str, str]] = {}
    class_of: dict[str, str] = {}
    clicks: dict[str, Counter[str]] = {}
    for event in parsed(lines):
        if event["type"] == "query":
            teams = event["result_teams"]
            assert len(teams) == len(event["result_ids"]), event
            assert all(abs(teams[:n].count("A") - teams[:n].count("B")) <= 1
                       for n in range(len(teams) + 1)), event  # a pick each, in turn
            team_of[event["query_id"]] = dict(zip(event["result_ids"], teams, strict=True))
            class_of[event["query_id"]] = event["query_class"]
        elif event["type"] == "click":
            clicks.setdefault(event["query_id"], Counter())[
                team_of[event["query_id"]][event["doc_id"]]] += 1
    outcomes: dict[str, Counter[str]] = {}
    for query_id, teams in clicks.items():
        outcome = "A" if teams["A"] > teams["B"] else "B" if teams["B"] > teams["A"] else "tie"
        for cell in ("all", class_of[query_id]):
            outcomes.setdefault(cell, Counter())[outcome] += 1
    return {cell: ((counts["A"] + counts["tie"] / 2) / counts.total() - 0.5, counts.total())
            for cell, counts in outcomes.items()}


@pytest.mark.parametrize(("preference", "delta"), [
    pytest.param(None, 0.0, marks=pytest.mark.slow), ("B=0.1", -0.1),
    pytest.param("A=0.2", 0.2, marks=pytest.mark.slow),
])
def test_interleaved_clicks_have_the_true_preference(
    tmp_path: Path, preference: str | None, delta: float,
) -> None:
    """``--interleave A:B --preference B=0.1``: Δ_AB is -0.1 in expectation in every query,
    so over the stream and in every class; without a preference, 0."""
    lines = generate(tmp_path, "--seed", "9", "--duration", "3m", "--sessions-per-second",
                     "100", "--malformed-rate", "0", "--duplicate-rate", "0",
                     "--interleave", "A:B", *(("--preference", preference) if preference else ()))
    found = interleaving_delta(lines)
    measured, clicked = found.pop("all")
    assert clicked > 12_000
    # a query's share of Δ is -1/2, 0 or 1/2: its standard deviation is 1/2 at most
    assert abs(measured - delta) < 3.5 * 0.5 / clicked ** 0.5, found
    for klass, (measured, clicked) in found.items():
        assert abs(measured - delta) < 3.5 * 0.5 / clicked ** 0.5, (klass, found)


def test_interleaved_lists_take_the_first_ranker_s_results_in_its_order(tmp_path: Path) -> None:
    """The first ranker is the world's (the ranking served without interleaving); each team's
    results come in its ranker's order, the first result is either ranker's best."""
    world = World.build(4)
    ranking = {query.text: query.ranking for query in world.queries}
    lines = generate(tmp_path, "--seed", "4", "--duration", "5m", "--malformed-rate", "0",
                     "--interleave", "old:new")
    seconds_best: dict[str, set[str]] = {}  # the first results the second ranker put there
    for query in (event for event in parsed(lines) if event["type"] == "query"):
        first = ranking[query["query_text"]]
        shown = dict(zip(query["result_ids"], query["result_teams"], strict=True))
        assert set(shown.values()) == ({"old", "new"} if shown else set()), query
        mine = [doc for doc, team in shown.items() if team == "old"]
        assert mine == sorted(mine, key=first.index), query
        if shown and query["result_ids"][0] != first[0]:
            top = query["result_ids"][0]
            assert shown[top] == "new", query
            seconds_best.setdefault(query["query_text"], set()).add(top)
    assert len(seconds_best) > 100
    # the second ranker's list is fixed per query: its best is the same in every impression
    assert all(len(tops) == 1 for tops in seconds_best.values())


def test_a_regression_can_be_confined_to_a_variant(tmp_path: Path) -> None:
    """``--regression-slice ranker=B``: the experiment's attribute is a dimension of the
    slices; B's lists are shuffled, and its users click them as the click model says."""
    lines = generate(tmp_path, "--seed", "8", "--duration", "10m", "--sessions-per-second",
                     "20", "--malformed-rate", "0", *EXPERIMENT, "--regression-slice",
                     "ranker=B", "--regression-after", "0s")
    ctr = ctr_by_variant(lines, World.build(8), {})
    assert ctr["B"]["ctr"] < ctr["A"]["ctr"] - 0.3, ctr
    for variant in ("A", "B"):
        assert abs(ctr[variant]["ctr"] - ctr[variant]["truth"]) < 4 * ctr[variant]["error"], ctr


def test_a_broker_that_cannot_be_reached_is_a_usage_error_naming_it() -> None:
    """``generate --kafka`` and ``judgments import --kafka`` produce through one helper: a
    broker nobody answers at is a clear error (exit 2), not a traceback."""
    with socket.socket() as held:  # a port of this machine that nothing listens on
        held.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{held.getsockname()[1]}"
    with pytest.raises(UsageError, match=f"cannot produce to {address}"):
        produce(address, [("search-events", "k", b"{}")], bootstrap_timeout_ms=300)
