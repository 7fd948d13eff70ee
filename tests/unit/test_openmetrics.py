"""``replay --report openmetrics [--step]``: the OpenMetrics text of a replay, and its samples
at every step of event time as ``promtool tsdb create-blocks-from openmetrics`` reads them
(families and series never interleaved, timestamps increasing, counters never down, the last
step the closed state: the ``--report json`` figures). The real promtool and Prometheus read
it in tests/integration/test_backfill.py."""

from __future__ import annotations

import io
import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from monitor.cli.main import main
from monitor.cli.replay import Samplers, replay_input, write_openmetrics
from monitor.config import Config
from monitor.core.export import Export, export
from monitor.core.history import History
from monitor.core.online import COUNTERS
from monitor.core.pipeline import RejectionLog
from monitor.inputs.files import sort_time
from monitor.inputs.generate import Traffic, World, messages
from monitor.serve.openmetrics import Steps, exposition
from monitor.serve.report import format_json, report
from tests.support.events import T0, query

STEP = 300.0
COUNTER_TYPES = {"counter", "histogram"}

Labels = tuple[tuple[str, str], ...]
Series = tuple[str, Labels]

LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (\S+))?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


@dataclass(frozen=True)
class Sample:
    family: str
    type: str
    name: str
    labels: Labels
    value: float
    time: float | None

    @property
    def series(self) -> Series:
        """The sample's own series: name and labels."""
        return self.name, self.labels

    @property
    def point(self) -> Labels:
        """The labels of the family's series it is in (a histogram's without ``le``)."""
        return tuple(item for item in self.labels if item[0] != "le")

    def label(self, name: str) -> str | None:
        return dict(self.labels).get(name)


def parse(text: str) -> list[Sample]:
    """The samples of an OpenMetrics text, each with its family; fails on anything else than
    the families' headers, samples and one ``# EOF`` at the end."""
    lines = text.split("\n")
    assert lines[-2:] == ["# EOF", ""], "ends with one # EOF line"
    family, kind, samples = "", "", []
    for line in lines[:-2]:
        if line.startswith("# TYPE "):
            family, kind = line.split()[2:]
            continue
        if line.startswith(("# HELP ", "# UNIT ")):
            continue
        match = LINE.match(line)
        assert match is not None and family, line
        name, labels, value, time = match.groups()
        assert name.startswith(family), f"{name} after the header of {family}"
        pairs = tuple(sorted(LABEL.findall(labels or "")))
        samples.append(Sample(family, kind, name, pairs, float(value),
                              None if time is None else float(time)))
    return samples


def replayed(path: Path, step: float = STEP) -> tuple[str, str, dict[str, Any]]:
    """``replay --report openmetrics --step``'s text, ``--report openmetrics``'s and the
    JSON report of the events of ``path`` (as ``searchmon replay`` makes them)."""
    steps = Steps(step)
    pipeline = replay_input(Config(), [path], [], RejectionLog(0), steps)
    steps.observe(export(pipeline))
    pipeline.close()
    stepped, closed = io.StringIO(), io.StringIO()
    write_openmetrics(export(pipeline), steps, stepped)
    write_openmetrics(export(pipeline), None, closed)
    return stepped.getvalue(), closed.getvalue(), json.loads(format_json(report(pipeline)))


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An hour and a half of generated traffic, judged samples among the events."""
    path = tmp_path_factory.mktemp("traffic") / "events.jsonl"
    stream = messages(World.build(5), Traffic(
        seed=5, duration=5400.0, sessions_per_second=0.5, judged_every=1800.0,
        judged_queries=50,
    ))
    path.write_bytes(b"".join(m.line + b"\n" for m in stream))
    return path


@pytest.fixture(scope="module")
def outputs(traffic: Path) -> tuple[str, str, dict[str, Any]]:
    return replayed(traffic)


def test_families_and_their_series_are_contiguous_and_end_with_one_eof(
    outputs: tuple[str, str, dict[str, Any]],
) -> None:
    samples = parse(outputs[0])
    families: list[str] = []
    series: list[tuple[str, Labels]] = []
    for sample in samples:
        if not families or families[-1] != sample.family:
            assert sample.family not in families, f"{sample.family} comes back"
            families.append(sample.family)
        key = (sample.family, sample.point)
        if not series or series[-1] != key:
            assert key not in series, f"{key} comes back"
            series.append(key)
    assert outputs[0].count("# TYPE ") == len(set(re.findall(r"^# TYPE (\S+)", outputs[0],
                                                             flags=re.MULTILINE)))
    assert "search_queries" in families and "searchmon_open_sessions" in families


def test_every_sample_has_a_step_boundary_and_each_series_goes_forward_in_time(
    outputs: tuple[str, str, dict[str, Any]],
) -> None:
    samples = parse(outputs[0])
    times: dict[Series, list[float]] = defaultdict(list)
    for sample in samples:
        assert sample.time is not None and sample.time % STEP == 0, sample
        times[sample.series].append(sample.time)
    for key, stamps in times.items():
        assert stamps == sorted(set(stamps)), f"{key}: timestamps not increasing"
    every = sorted({t for stamps in times.values() for t in stamps})
    assert every == [every[0] + i * STEP for i in range(len(every))], "no step left out"
    # 90 minutes of traffic: 18 or 19 steps, and one past its end for the closed state
    assert 19 <= len(every) <= 21
    counters = [s for s in times if s[0] == "search_queries_total"]
    assert counters and all(times[s] == every for s in counters), "counters at every step"


def test_counters_never_go_down(outputs: tuple[str, str, dict[str, Any]]) -> None:
    last: dict[Series, float] = {}
    seen = 0
    for sample in parse(outputs[0]):
        if sample.type not in COUNTER_TYPES:
            continue
        before = last.get(sample.series, 0.0)
        assert sample.value >= before, f"{sample.name}{dict(sample.labels)} down at {sample.time}"
        last[sample.series] = sample.value
        seen += 1
    assert seen > 1000


def test_the_last_step_is_the_closed_state_of_report_openmetrics_and_json(
    outputs: tuple[str, str, dict[str, Any]],
) -> None:
    stepped, closed, figures = outputs
    last: dict[Series, Sample] = {}
    for sample in parse(stepped):
        last[sample.series] = sample
    end = max(s.time for s in last.values() if s.time is not None)
    final = {key: s.value for key, s in last.items() if s.time == end}
    untimed = parse(closed)
    assert all(s.time is None for s in untimed)
    assert {s.series: s.value for s in untimed} == final
    online = figures["online"]
    assert isinstance(online, dict)
    for family in COUNTERS:
        by_class: dict[str, float] = defaultdict(float)
        for sample in untimed:
            if sample.name == f"{family.name}_total":
                by_class[sample.label("query_class") or ""] += sample.value
        assert by_class == {k: v[family.attribute] for k, v in online.items() if k != "all"}
        assert sum(by_class.values()) == online["all"][family.attribute]
    assert online["all"]["queries"] > 1000
    rejected = {s.label("reason"): s.value for s in untimed
                if s.name == "searchmon_events_rejected_total" and s.value}
    assert rejected == figures["rejected"] and rejected


def test_gauges_are_the_state_at_each_step_and_the_closed_state_at_the_last(
    outputs: tuple[str, str, dict[str, Any]],
) -> None:
    samples = parse(outputs[0])
    open_sessions = [s for s in samples if s.name == "searchmon_open_sessions"]
    assert open_sessions[0].value == 0, "before any event"
    assert max(s.value for s in open_sessions) > 0 and open_sessions[-1].value == 0
    newest = [s for s in samples if s.name == "searchmon_last_event_timestamp_seconds"]
    for sample in newest[:-1]:  # it reached the step, and not the next one
        assert sample.time is not None and sample.time <= sample.value < sample.time + STEP
    assert newest[-1].time is not None and newest[-1].value < newest[-1].time


def hand_checked(tmp_path: Path) -> Path:
    """200 queries of travel in the first 20 s (the replay reads 192 lines ahead before it
    admits the first), then one at +70 s, one at +75 s, one of news at +200 s: with steps
    of 60 s (T0 is 20 s past a minute), the first step B is 20 s before T0."""
    lines = [query(f"f{i}", i * 0.1, f"f{i}", f"fq{i}") for i in range(200)]
    lines += [
        query("e1", 70, "s1", "q1"),
        query("e2", 75, "s1", "q2", text="cheap flight"),
        query("e3", 200, "s2", "q3", klass="news"),
    ]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


B = math.floor(T0 / 60) * 60


@pytest.mark.parametrize(("name", "labels", "expected"), [
    # B: before any event; B+60: as the event at +70 s reached it; B+120 and B+180: the event
    # at +200 s passed both; B+240: the closed state
    ("search_queries_total", {"query_class": "travel"}, [0, 201, 202, 202, 202]),
    # first seen at B+120: 0 before, as a counter that existed from the start
    ("search_queries_total", {"query_class": "news"}, [0, 0, 1, 1, 1]),
    ("search_queries_total", {"query_class": "other"}, [0, 0, 0, 0, 0]),
    ("search_reformulated_queries_total", {"query_class": "travel"}, [0, 0, 1, 1, 1]),
    # sessions count when they close: at the end
    ("search_sessions_total", {"query_class": "travel"}, [0, 0, 0, 0, 201]),
    ("search_sessions_total", {"query_class": "news"}, [0, 0, 0, 0, 1]),
    # a gauge as it was: open once the watermark (newest - allowed lateness) passed their
    # events, closed at the end
    ("searchmon_open_sessions", {}, [0, 0, 201, 201, 0]),
    # absent before any event
    ("searchmon_last_event_timestamp_seconds", {}, [None, T0 + 70, T0 + 200, T0 + 200,
                                                    T0 + 200]),
])
def test_steps_of_a_hand_checked_replay(
    tmp_path: Path, name: str, labels: dict[str, str], expected: list[float | None],
) -> None:
    stepped, _, _ = replayed(hand_checked(tmp_path), step=60.0)
    values: dict[float, float] = {}
    for sample in parse(stepped):
        if sample.name == name and all(sample.label(k) == v for k, v in labels.items()):
            assert sample.time is not None
            values[sample.time] = values.get(sample.time, 0.0) + sample.value
    assert [values.get(B + i * 60.0) for i in range(5)] == expected
    assert max(values) == B + 240.0


@pytest.mark.slow
def test_a_replay_that_starts_over_sorted_forgets_the_steps_of_the_first_attempt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """The later half of the events before the earlier one: the replay streams the later
    half, finds the earlier one behind and starts again on every line sorted by event time;
    its steps are those of the lines in order."""
    stream = messages(World.build(2), Traffic(
        seed=2, duration=3600.0, sessions_per_second=0.5, malformed_rate=0.0,
        duplicate_rate=0.0,
    ))
    lines = sorted((m.line for m in stream), key=sort_time)
    middle = sort_time(lines[len(lines) // 2])
    ordered, swapped = tmp_path / "ordered.jsonl", tmp_path / "swapped.jsonl"
    ordered.write_bytes(b"".join(line + b"\n" for line in lines))
    swapped.write_bytes(b"".join(line + b"\n" for line in [
        *(line for line in lines if sort_time(line) >= middle),
        *(line for line in lines if sort_time(line) < middle),
    ]))
    caplog.set_level("INFO")
    expected = replayed(ordered)[0]
    assert "not in event time order" not in caplog.text
    assert replayed(swapped)[0] == expected
    assert "not in event time order" in caplog.text


@pytest.mark.slow
def test_the_history_of_replay_serve_and_the_steps_sample_together(traffic: Path) -> None:
    alone = Steps(STEP)
    replay_input(Config(), [traffic], [], RejectionLog(0), alone)
    history, steps = History(), Steps(STEP)
    replay_input(Config(), [traffic], [], RejectionLog(0), Samplers((history, steps)))
    first, second = io.StringIO(), io.StringIO()
    alone.write(first)
    steps.write(second)
    assert first.getvalue() == second.getvalue() and steps.count > 10
    assert len(history) >= 10


def test_without_an_event_there_is_no_time_to_put_samples_at() -> None:
    steps = Steps(STEP)
    steps.observe(Export())
    steps.finish(Export())
    out = io.StringIO()
    steps.write(out)
    assert out.getvalue() == "# EOF\n" and steps.first is None


def test_without_steps_the_text_is_the_exposition_of_metrics() -> None:
    text = exposition(Export(accepted=3))
    assert text.endswith("\n# EOF\n") and "# TYPE search_queries counter\n" in text
    assert "\nsearchmon_events_read_total 3.0\n" in text


@pytest.mark.parametrize(("argv", "message"), [
    (["--step", "5m"], "--step: only with --report openmetrics"),
    (["--report", "json", "--step", "1h"], "--step: only with --report openmetrics"),
])
def test_a_step_without_openmetrics_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str,
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(query("e1", 0, "s1", "q1") + b"\n")
    assert main(["replay", str(events), *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("step", ["0", "500ms", "-5m", "soon"])
def test_a_step_is_a_duration_of_a_second_or_more(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], step: str,
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["replay", str(tmp_path / "x.jsonl"), "--report", "openmetrics", "--step", step])
    assert exit.value.code == 2
    assert "--step" in capsys.readouterr().err


def test_a_replay_run_by_a_caller_leaves_nothing_held_for_the_process_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Run as the process, a replay leaves its closed tables to be freed with the process;
    run by a caller (as here), it returns with none of them held."""
    from monitor.cli.common import HELD_TO_THE_END

    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join(query(f"e{i}", i, f"s{i}", f"q{i}") + b"\n" for i in range(50)))
    assert main(["replay", str(events)]) == 0
    assert "all" in capsys.readouterr().out
    assert HELD_TO_THE_END == []
    pipeline = replay_input(Config(), [events], [], RejectionLog(0))
    pipeline.close()
    sessions = pipeline.sessions
    assert not sessions.open and not sessions.seen and not sessions.ended
    assert report(pipeline)["online"]["all"]["sessions"] == 50
