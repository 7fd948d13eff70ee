"""No single message stops the pipeline: invalid UTF-8, deep nesting, huge strings and a step
that fails on one message are each rejected (or, for long texts, read in bounded time), and
the other messages of the batch count exactly as without it. The daemon's per-record path
(``PartitionStates.process``) and ``replay`` are both driven; the real daemon is in
``tests/integration/test_daemon.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.cli.replay import replay
from monitor.config import Config, parse_config
from monitor.core.pipeline import Pipeline, RejectionLog
from monitor.inputs.events import Reason, nested_deeper
from monitor.inputs.files import sort_time
from monitor.run.worker import PartitionStates
from monitor.serve.report import report
from tests.support.adversarial import ADVERSARIAL, deep, deep_objects, good_traffic
from tests.support.events import query, stamp

KEY = ("search-events", 0)


def through_the_daemons_path(lines: list[bytes], tmp: Path) -> tuple[Pipeline, list[str]]:
    """``lines`` as one partition's batch through the state process's logic."""
    states = PartitionStates(
        parse_config(f'[state]\ndir = "{tmp}"\n[input]\nmax_event_bytes = 1048576'), "r1"
    )
    states.assign({KEY})
    letters = states.process([(KEY, list(range(len(lines))), list(lines))], True)
    pipeline = states.units[KEY]
    pipeline.close()
    return pipeline, [reason for _, _, reason, _ in letters]


def replayed(lines: list[bytes], path: Path) -> Pipeline:
    path.write_bytes(b"\n".join(lines) + b"\n")
    pipeline = Pipeline(parse_config("[input]\nmax_event_bytes = 1048576"))
    replay(pipeline, path, RejectionLog(0))
    pipeline.close()
    return pipeline


def online(pipeline: Pipeline) -> dict[str, Any]:
    return dict(report(pipeline)["online"]["news"])


@pytest.mark.parametrize(("name", "bad", "reason"), ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
def test_one_adversarial_message_among_good_ones(
    name: str, bad: bytes, reason: str | None, tmp_path: Path
) -> None:
    good = good_traffic()
    middle = len(good) // 2
    lines = [*good[:middle], bad, *good[middle:]]
    without, _ = through_the_daemons_path(good, tmp_path / "without")
    daemon, letters = through_the_daemons_path(lines, tmp_path / "with")
    file = replayed(lines, tmp_path / "events.jsonl")
    for pipeline in (daemon, file):
        assert pipeline.health.events_read == len(lines)
        rejected = {r.value: n for r, n in pipeline.health.rejected.items() if n}
        assert rejected == ({reason: 1} if reason else {}), (name, rejected)
        assert online(pipeline) == online(without)
    assert letters == ([reason] if reason else [])
    if b"@example.com" in bad:  # read, cut and redacted: no address kept
        lists = daemon.lists
        assert lists is not None
        assert "example.com" not in json.dumps(lists.snapshot(), default=str)


def test_a_step_that_fails_on_one_message_rejects_it_and_the_batch_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A defect (any exception) in a per-message step: that message is rejected as
    ``unprocessable`` (and so dead-lettered), counted once, and the rest of the batch is
    applied, before and after it."""
    from monitor.inputs import native

    decode = native.decode_live  # read by each decoder as it is made: patched before

    def failing(data: bytes) -> Any:
        if b'"boom"' in data:
            raise KeyError("a defect")
        return decode(data)

    monkeypatch.setattr(native, "decode_live", failing)
    good = good_traffic()
    boom = query("boom", 200.0, "s-boom", "q-boom", text="boom")
    lines = [*good[:3], boom, *good[3:]]
    without, _ = through_the_daemons_path(good, tmp_path / "without")
    pipeline, letters = through_the_daemons_path(lines, tmp_path / "with")
    assert letters == ["unprocessable"]
    assert pipeline.health.rejected[Reason.UNPROCESSABLE] == 1
    assert pipeline.health.accepted == without.health.accepted
    assert pipeline.health.events_read == len(lines)
    assert online(pipeline) == online(without)
    file = replayed(lines, tmp_path / "events.jsonl")
    assert file.health.rejected[Reason.UNPROCESSABLE] == 1
    assert online(file) == online(without)


def test_nesting_is_measured_outside_strings() -> None:
    assert not nested_deeper(b'{"a": "' + b"[{" * 100 + b'"}', 10)
    assert not nested_deeper(b'{"a": "\\"' + b"[" * 100 + b'"}', 10)
    assert nested_deeper(b'{"a": "\\\\"' + b", " + b"[" * 11 + b"]" * 11 + b"}", 10)
    assert not nested_deeper(b"[" * 10 + b"]" * 10, 10)
    assert nested_deeper(b"[" * 11, 10)  # unterminated: as deep as it opens
    assert sort_time(b"[" * 100_000) == float("-inf")
    assert sort_time(b'{"timestamp": "\xff"}') == float("-inf")


# --- fuzzing ---------------------------------------------------------------------------------

GOOD = query("e0", 0, "s0", "q0")


def corrupted(data: bytes, where: int, junk: bytes) -> bytes:
    where %= len(data) + 1
    return data[:where] + junk + data[where:]


def adversarial_bytes() -> st.SearchStrategy[bytes]:
    junk = st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00",
                            b"\\", b'"', b"\\u", b"\\ud800", b"[", b"{", b"]", b"}", b"\xe2\x82"])
    return st.one_of(
        st.binary(max_size=300),
        st.builds(corrupted, st.just(GOOD), st.integers(0, 10_000), junk),
        st.builds(corrupted, st.sampled_from(good_traffic()[:4]), st.integers(0, 10_000),
                  st.binary(min_size=1, max_size=8)),
        st.integers(1, 5000).map(deep),
        st.integers(1, 5000).map(deep_objects),
        st.integers(1, 3000).map(lambda n: b'{"action_name":"click","q":' + b"[" * n + b"}"),
        st.integers(0, 600_000).map(lambda n: query("big", 50.0, "s", "q", text="x@" * n)),
        st.sampled_from([a[1] for a in ADVERSARIAL[:6]]),
    )


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(adversarial_bytes(), min_size=1, max_size=12), st.integers(0, 59))
def test_fuzzed_batches_never_raise_and_count_every_message_once(
    bad: list[bytes], at: int
) -> None:
    import tempfile

    good = good_traffic()
    bad = [line.replace(b"\n", b" ") for line in bad]  # one message, one line of a file
    lines = [*good[:at % len(good)], *bad, *good[at % len(good):]]
    with tempfile.TemporaryDirectory() as scratch:
        pipeline, letters = through_the_daemons_path(lines, Path(scratch) / "state")
        file = replayed(lines, Path(scratch) / "events.jsonl")
    for one in (pipeline, file):
        health = one.health
        assert health.events_read == len(lines)
        assert report(one)["online"]["news"]["queries"] >= 1
    assert len(letters) == sum(pipeline.health.rejected.values())


def test_a_million_character_text_is_cut_before_it_is_read() -> None:
    pipeline = Pipeline(Config())
    text = "jane.doe@example.com " * 49_000
    assert pipeline.feed(query("e", 0, "s", "q", text=text)) is None
    assert pipeline.lists is not None
    kept = json.dumps(pipeline.lists.snapshot(), default=str)
    assert "jane.doe" not in kept and "<email>" in kept


@pytest.mark.parametrize(("text", "limit", "cut"), [
    ("cheap flights", 20, "cheap flights"),
    ("cheap flights to rome", 13, "cheap flights"),
    ("cheap flights to rome", 14, "cheap flights "),
    ("cheap flights to rome", 10, "cheap"),
    ("mail jane.doe@example.com now", 12, "mail"),
    ("x" * 50, 10, ""),
])
def test_a_long_text_is_cut_at_a_word_boundary(text: str, limit: int, cut: str) -> None:
    from monitor.inputs.native import cut_text

    assert cut_text(text, limit) == cut


@pytest.mark.parametrize("repeated", [["d1", "d1", "d2"], ["d2", "d1", "d2", "d1"]])
def test_a_live_list_that_repeats_a_result_is_scored_with_its_first_place(
    repeated: list[str], tmp_path: Path
) -> None:
    """A live result list naming a document twice, its text joined with stored qrels, both
    alone and in a full scoring batch: scored as the list with each result at its first
    place, and the other queries of its batch scored too."""
    from monitor.cli.replay import replay_files
    from monitor.core.export import export

    def scores(results: list[str]) -> dict[tuple[str, str], tuple[tuple[int, ...], float]]:
        qrels = {"type": "qrels", "timestamp": 0, "query_text": "red shoes",
                 "labels": {"d1": 1, "d2": 2, "d3": 0}}
        lines = [json.dumps(qrels).encode()]
        for n in range(1100):
            lines.append(query(f"q{n}", 1 + n / 100, f"s{n}", f"q{n}", text="red shoes",
                               result_ids=results if n in (5, 1023) else ["d2", "d3"]))
        path = tmp_path / "events.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        log = RejectionLog(0)
        pipeline = replay_files(Config(), [path], [], log)
        return {(s.measure, s.source): (s.histogram.counts, s.histogram.sum)
                for s in export(pipeline).scores if s.slice[0] == "all"}

    found = scores(repeated)
    assert found == scores(list(dict.fromkeys(repeated)))
    live = [counts for (_, source), (counts, _) in found.items() if source == "live"]
    assert live and all(sum(counts) == 1100 for counts in live)


def test_no_label_value_grows_with_what_one_message_says() -> None:
    """A declared class, a rater-agreement statistic and an interleaved ranker's name come
    from the messages: a long or unknown one never becomes a label value, and the messages
    still count."""
    from monitor.core.export import export

    pipeline = Pipeline(Config())
    long = "x" * 100_000
    assert pipeline.feed(query("q1", 0, "s1", "q1", klass=long)) is None
    assert pipeline.feed(query("q2", 1, "s2", "q2", klass="y" * 100)) is None
    teams = [long, "b"] * 5
    assert pipeline.feed(query("q3", 2, "s3", "q3", result_teams=teams)) is None
    judgment = {"type": "judgment", "sample_id": "s", "timestamp": stamp(3), "query_id": "j",
                "query_text": "t", "ranking": ["a"], "labels": {"a": 1},
                "agreement": {**{f"k{n}": 0.5 for n in range(1000)}, "raters": 3}}
    assert pipeline.feed(json.dumps(judgment).encode()) is None
    record = {"user_query": "deep", "query_id": "u1", "client_id": "c",
              "timestamp": stamp(4), "query": '{"size":0,"q":' + "[" * 100_000}
    assert pipeline.feed(json.dumps(record).encode()) is None
    pipeline.close()
    figures = export(pipeline)
    assert {part.slice[0] for part in figures.slices} == {"other", "travel", "y" * 100}
    assert sum(part.count("queries") for part in figures.slices) == 4
    assert figures.interleaving == ()
    assert pipeline.judged.agreement == ("s", {"raters": 3.0})
    assert not any(pipeline.health.rejected.values())


def test_the_replay_table_shows_control_characters_of_a_class_escaped() -> None:
    from monitor.serve.report import format_table

    pipeline = Pipeline(Config())
    assert pipeline.feed(query("q1", 0, "s1", "q1", klass="cls\x1b[2J\nx")) is None
    pipeline.close()
    table = format_table(report(pipeline, lists=False))
    assert "\x1b" not in table and "cls\\x1b[2J\\nx" in table
