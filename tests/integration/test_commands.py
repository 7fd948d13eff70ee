"""The commands around the product: --version, searchmon broker, log options."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from kafka.admin import KafkaAdminClient

from monitor import __version__
from tests.support.broker import free_port
from tests.support.events import query
from tests.support.wait import wait_for

SEARCHMON = [sys.executable, "-m", "monitor"]


def test_version() -> None:
    done = subprocess.run([*SEARCHMON, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"searchmon {__version__}\n"


def test_replay_logs_json_lines_at_the_level_asked(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(query("e1", 0, "s1", "q1") + b"\nnot json\n")
    done = subprocess.run(
        [*SEARCHMON, "replay", str(events), "--log-format", "json"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert records and records[0]["level"] == "warning"
    assert "events.jsonl:2 (invalid_json)" in records[0]["message"]
    quiet = subprocess.run(
        [*SEARCHMON, "replay", str(events), "--log-level", "error"],
        capture_output=True, text=True, timeout=60,
    )
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_replay_as_a_process_ends_with_its_output_and_log_whole(tmp_path: Path) -> None:
    """``searchmon replay`` ends without the interpreter's teardown: what it wrote (the
    report, every log line) is all there, through a pipe; under a profiler it ends the usual
    way, and the profiler writes its data."""
    events = tmp_path / "events.jsonl"
    lines = [query(f"e{i}", i, f"s{i % 7}", f"q{i}") for i in range(2_000)]
    events.write_bytes(b"\n".join(lines) + b"\nnot json\n" * 150)
    done = subprocess.run([*SEARCHMON, "replay", str(events), "--report", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["online"]["all"]["queries"] == 2_000
    logged = [line for line in done.stderr.splitlines() if "(invalid_json)" in line]
    assert len(logged) == 100, "the first 100 of the reason, every one flushed"
    assert "further invalid_json rejections are counted" in done.stderr.splitlines()[-1]
    profile = tmp_path / "replay.prof"
    profiled = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "monitor", "replay",
         str(events)], capture_output=True, text=True, timeout=120,
    )
    assert profiled.returncode == 0, profiled.stderr
    assert profile.stat().st_size > 0, "the profiler wrote its data at the exit"


def test_the_broker_command_creates_the_topics_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "searchmon.toml"
    config.write_text('[kafka]\nevents_topic = "ev"\njudgments_topic = "ju"\n'
                      'dead_letter_topic = "dl"\n')
    broker = subprocess.Popen(
        [*SEARCHMON, "broker", "--listen", f"127.0.0.1:{port}", "--config", str(config),
         "--partitions", "3"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert broker.stderr is not None
        line = broker.stderr.readline()  # said once the topics exist
        assert f"listening on 127.0.0.1:{port}" in line, line
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
        try:
            described = wait_for(
                lambda: {t["name"]: len(t["partitions"]) for t in admin.describe_topics()},
                "the three topics", 30, until=lambda found: {"ev", "ju", "dl"} <= set(found),
                every=0.2,
            )
        finally:
            admin.close()
        assert (described["ev"], described["ju"], described["dl"]) == (3, 1, 1)
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(timeout=30)
    assert broker.returncode == 0
