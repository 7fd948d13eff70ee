"""`searchmon replay` on the command line goes past every adversarial line (the pipeline and
the daemon's per-record path: tests/unit/test_one_message.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.adversarial import ADVERSARIAL, good_traffic


def test_replay_on_the_command_line_goes_past_every_adversarial_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    good = good_traffic()
    path.write_bytes(b"\n".join([*good, *(a[1] for a in ADVERSARIAL)]) + b"\n")
    config = tmp_path / "c.toml"
    config.write_text("[input]\nmax_event_bytes = 1048576\n")
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", str(path), "--config", str(config),
         "--report", "json"], capture_output=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(done.stdout)
    expected: dict[str, int] = {}
    for _, _, reason in ADVERSARIAL:
        if reason:
            expected[reason] = expected.get(reason, 0) + 1
    assert {k: v for k, v in result["rejected"].items() if v} == expected
    assert b"Traceback" not in done.stderr
