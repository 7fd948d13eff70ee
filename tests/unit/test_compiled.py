"""The compiled hot path (monitor/compiled.py): the install runs it, and it counts exactly what
plain Python counts, on an input with every timestamp form, UBI records, duplicates and
malformed lines (each process with its own build: compiled, then SEARCHMON_PURE_PYTHON=1)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from monitor import compiled
from monitor.inputs.generate import Traffic, World, events
from tests.support.ubi import EVENTS, QUERIES

ROOT = Path(__file__).resolve().parents[2]

REPORT = """
import json, sys
from pathlib import Path
from monitor import compiled
from monitor.cli.replay import replay_files
from monitor.config import Config
from monitor.core.pipeline import RejectionLog
from monitor.serve.report import report
pipeline = replay_files(Config(), [Path(p) for p in sys.argv[1:]], [], RejectionLog(0))
print(json.dumps({"compiled": compiled.running_compiled(), "report": report(pipeline)},
                 sort_keys=True, default=str))
"""


def test_the_install_runs_the_compiled_hot_path() -> None:
    edited = compiled.stale()
    if edited:
        pytest.skip(f"edited since compiled (./dev compiles again): {', '.join(edited)}")
    if os.environ.get(compiled.PURE_PYTHON, "") not in ("", "0"):
        pytest.skip(f"{compiled.PURE_PYTHON} is set")
    assert compiled.running_compiled(), (
        "the hot path did not compile at install: is there a C compiler? (pip install -e . "
        "prints why)"
    )


def test_a_source_tree_never_runs_an_extension_older_than_its_source(tmp_path: Path) -> None:
    """In a source tree, a compiled module edited since the build, and an extension left
    beside a module no longer compiled, are stale: the package then runs as plain Python.
    An installed package (no setup.py beside it) is never judged by its files' times."""
    (tmp_path / "monitor" / "core").mkdir(parents=True)
    suffix = EXTENSION_SUFFIXES[0]
    lib = tmp_path / f"{compiled.GROUP}__mypyc{suffix}"
    sources = {name: tmp_path / (name.replace(".", "/") + ".py") for name in compiled.MODULES}
    for source in sources.values():
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
        os.utime(source, (1_000, 1_000))
    lib.write_bytes(b"")
    os.utime(lib, (2_000, 2_000))
    assert compiled.stale(str(tmp_path)) == [], "no setup.py: an installed package"
    (tmp_path / "setup.py").write_text("")
    assert compiled.stale(str(tmp_path)) == []
    edited = compiled.MODULES[1]
    os.utime(sources[edited], (3_000, 3_000))
    assert compiled.stale(str(tmp_path)) == [edited]
    left = tmp_path / "monitor" / "core" / "gone.py"
    left.write_text("")
    (tmp_path / "monitor" / "core" / f"gone{suffix}").write_bytes(b"")
    assert compiled.stale(str(tmp_path)) == [edited, "monitor.core.gone"]
    lib.unlink()
    assert compiled.stale(str(tmp_path)) == [], "nothing compiled: nothing stale"


def mixed(path: Path) -> None:
    """Generated traffic rewritten as logs mix it: epoch milliseconds, offsets, ``Z`` without
    a fraction, duplicated and malformed lines; then UBI records (`_bulk` as exported)."""
    world = World.build(seed=5)
    stream = events(world, Traffic(seed=5, sessions_per_second=40.0, duration=1e9))
    lines = []
    for number, (_, _, line) in enumerate(itertools.islice(stream, 6000)):
        try:
            event = json.loads(line)
        except ValueError:  # the generator's own malformed lines
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("timestamp"), str):
            lines.append(line)
            continue
        stamp = event["timestamp"]
        if number % 4 == 1:
            event["timestamp"] = round(_seconds(stamp) * 1000)
        elif number % 5 == 2:
            event["timestamp"] = stamp.replace("Z", "+00:00")
        elif number % 10 == 3:
            event["timestamp"] = stamp[:19] + "Z"
        lines.append(json.dumps(event).encode())
        if number % 97 == 0:
            lines.append(lines[-1])  # a duplicate
        if number % 211 == 0:
            lines.append(lines[-1][:-7])  # cut short: malformed
    path.write_bytes(b"\n".join(lines) + b"\n")
    ubi = []
    for index, document in [("ubi_queries", q) for q in QUERIES] + [
        ("ubi_events", e) for e in EVENTS
    ]:
        ubi.append(json.dumps({"index": {"_index": index}}))
        ubi.append(json.dumps(document))
    (path.parent / "ubi.ndjson").write_text("\n".join(ubi) + "\n")


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def test_compiled_and_plain_python_count_the_same(tmp_path: Path) -> None:
    mixed(tmp_path / "events.jsonl")
    files = [str(tmp_path / "events.jsonl"), str(tmp_path / "ubi.ndjson")]
    results = []
    for plain in ("0", "1"):
        env = {**os.environ, compiled.PURE_PYTHON: plain}
        done = subprocess.run([sys.executable, "-c", REPORT, *files], capture_output=True,
                              text=True, timeout=120, cwd=ROOT, env=env)
        assert done.returncode == 0, done.stderr
        results.append(json.loads(done.stdout))
    built, plain_python = results
    assert plain_python["compiled"] is False
    assert built["compiled"] is compiled.running_compiled()
    report = built["report"]
    assert sum(report["rejected"].values()) > 0 and report["online"]["all"]["queries"] > 1000
    assert report == plain_python["report"]
