"""numpy is imported where it is first used (``monitor/lazy.py``): a replay of events
without judgments never imports it, and what uses it gets numpy itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from monitor.lazy import _Later

REPLAY_AND_REPORT = """
import sys
from monitor.cli.main import main
code = main(["replay", sys.argv[1]])
print(code, "numpy" in sys.modules)
"""


def test_a_replay_of_events_imports_no_numpy(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({
        "type": "query", "event_id": f"e{i}", "timestamp": 1_790_000_000_000 + i * 1000,
        "session_id": f"s{i % 3}", "query_id": f"q{i}", "query_text": "red shoes",
        "result_ids": ["d1", "d2"],
    }) + "\n" for i in range(20)))
    done = subprocess.run([sys.executable, "-c", REPLAY_AND_REPORT, str(events)],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split()[-2:] == ["0", "False"], done.stderr


def test_the_first_attribute_read_imports_the_module_and_keeps_its_names() -> None:
    import numpy

    later = _Later("numpy")
    assert later.zeros(3).tolist() == [0.0, 0.0, 0.0]
    assert vars(later)["zeros"] is numpy.zeros  # read from the module's own names from then on
    assert later.linalg is numpy.linalg
    assert later.float64 is numpy.float64
