"""Queries picked for judging (monitor.offline.sampling) and ``searchmon sample``."""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from monitor.cli.common import EXIT_OK, EXIT_USAGE
from monitor.cli.main import main
from monitor.offline.sampling import Candidate, allocation, pick_pps, pick_top, sample

START = 1_790_000_000_000


def test_top_picks_the_most_searched() -> None:
    candidates = [Candidate("a", 5, ()), Candidate("b", 9, ()), Candidate("c", 5, ())]
    assert [c.query for c in pick_top(candidates, 2, random.Random(1))] == ["b", "a"]


def test_pps_picks_in_proportion_to_searches() -> None:
    candidates = [Candidate("heavy", 90, ()), Candidate("light", 10, ())]
    rng = random.Random(2)
    first = Counter(pick_pps(candidates, 1, rng)[0].query for _ in range(20_000))
    assert first["heavy"] / 20_000 == pytest.approx(0.9, abs=0.01)
    assert {c.query for c in pick_pps(candidates, 5, rng)} == {"heavy", "light"}


@pytest.mark.parametrize(("sizes", "available", "count", "expected"), [
    ({("a",): 60, ("b",): 30, ("c",): 10}, {("a",): 9, ("b",): 9, ("c",): 9}, 10,
     {("a",): 6, ("b",): 3, ("c",): 1}),
    # every stratum gets one while there are picks for each; then in proportion
    ({("a",): 98, ("b",): 1, ("c",): 1}, {("a",): 9, ("b",): 9, ("c",): 9}, 5,
     {("a",): 3, ("b",): 1, ("c",): 1}),
    # a stratum cannot take more than it has: the rest goes to the others
    ({("a",): 90, ("b",): 10}, {("a",): 2, ("b",): 9}, 6, {("a",): 2, ("b",): 4}),
    # fewer picks than strata: in proportion, by largest remainder
    ({("a",): 50, ("b",): 30, ("c",): 20}, {("a",): 9, ("b",): 9, ("c",): 9}, 2,
     {("a",): 1, ("b",): 1, ("c",): 0}),
    # more picks than candidates: all of them
    ({("a",): 5}, {("a",): 3}, 10, {("a",): 3}),
])
def test_allocation(sizes: dict[tuple[str, ...], int], available: dict[tuple[str, ...], int],
                    count: int, expected: dict[tuple[str, ...], int]) -> None:
    assert allocation(sizes, count, available) == expected


def test_a_stratified_sample_draws_within_each_stratum() -> None:
    candidates = [Candidate(f"{s}{n}", n + 1, (s,)) for s in "xy" for n in range(20)]
    picked = sample(candidates, 6, "random", random.Random(3))
    assert Counter(c.stratum for c in picked) == {("x",): 3, ("y",): 3}
    assert len({c.query for c in picked}) == 6


def events(path: Path) -> Path:
    lines: list[dict[str, Any]] = []
    number = 0
    for text, sessions, platform in (("tent", 6, "ios"), ("tent", 5, "web"),
                                     ("stove", 5, "ios"), ("rare", 2, "ios")):
        for session in range(sessions):
            number += 1
            lines.append({
                "type": "query", "event_id": f"e{number}", "timestamp": START + number * 1000,
                "session_id": f"{text}-{platform}-{session}", "query_id": f"q{number}",
                "query_text": text, "result_ids": [f"{text}-{number}", "x"],
                "query_class": "product", "attributes": {"platform": platform},
            })
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_sample_writes_each_picked_querys_latest_served_list(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = events(tmp_path / "e.jsonl")
    assert main(["sample", str(source), "--method", "top", "-n", "2"]) == EXIT_OK
    out, err = capsys.readouterr()
    rows = list(csv.reader(io.StringIO(out)))
    assert rows == [
        ["query", "query_class", "searches", "rank", "doc_id"],
        ["tent", "product", "11", "1", "tent-11"], ["tent", "product", "11", "2", "x"],
        ["stove", "product", "5", "1", "stove-16"], ["stove", "product", "5", "2", "x"],
    ]
    assert "1 under the k-anonymity floor" in err  # rare: two sessions


def test_sample_of_search_logs_refuses_a_window(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--window`` picks one of a daemon's lists (``--url``); logs are sampled whole, and a
    window given with them is refused rather than ignored."""
    source = events(tmp_path / "e.jsonl")
    assert main(["sample", str(source), "--window", "1h"]) == EXIT_USAGE
    assert "--window: only with --url" in capsys.readouterr().err


def test_sample_by_a_slice_dimension(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = events(tmp_path / "e.jsonl")
    assert main(["sample", str(source), "--method", "top", "-n", "3", "--by", "platform",
                 "--format", "json"]) == EXIT_OK
    picked = json.loads(capsys.readouterr().out)
    assert [(p["query"], p["platform"], p["searches"], p["results"][0]) for p in picked] == [
        ("tent", "ios", 6, "tent-6"), ("stove", "ios", 5, "stove-16"),
        ("tent", "web", 5, "tent-11")]


def test_sample_reads_ubi_and_counts_a_reformulation_under_one_id_as_a_search(
        capsys: pytest.CaptureFixture[str]) -> None:
    chorus = Path(__file__).parents[1] / "data" / "ubi-real" / "chorus-ubi-subset.ndjson.gz"
    assert main(["sample", str(chorus), "--min-sessions", "1", "-n", "1000", "--format",
                 "json"]) == EXIT_OK
    out, err = capsys.readouterr()
    picked = json.loads(out)
    assert len(picked) == 45  # every query of the sample, none with zero searches
    assert all(p["searches"] >= 1 for p in picked)
    assert "0 under the k-anonymity floor" in err
