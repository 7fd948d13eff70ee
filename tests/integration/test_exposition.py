"""`searchmon replay --serve` over HTTP from a gzip file, and replay of a missing file."""

from __future__ import annotations

import gzip
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.broker import free_port
from tests.support.files import DATA
from tests.support.http import get
from tests.support.wait import wait_for


def test_replay_serve_over_http_from_a_gzip_file(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl.gz"
    with gzip.open(events, "wb") as packed, (DATA / "replay_small.jsonl").open("rb") as src:
        shutil.copyfileobj(src, packed)
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "replay", str(events), "--config", str(config),
         "--report", "json", "--serve"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        status, body = wait_for(lambda: get(f"http://127.0.0.1:{port}/metrics"),
                                "the server comes up", 30, ignoring=(OSError,))
        assert status == 200
        assert 'search_queries_total{query_class="travel"} 2.0' in body
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
        assert get(f"http://127.0.0.1:{port}/readyz")[0] == 200
        assert get(f"http://127.0.0.1:{port}/nothing")[0] == 404
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    result = json.loads(out)
    assert result["online"]["all"]["queries"] == 4
    assert result["online"]["travel"]["session_success_rate"] == 1.0
    assert result["rejected"] == {"duplicate": 1, "invalid_json": 1, "schema": 1}
    assert f"{events}:10" in err


def test_replay_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "replay", str(tmp_path / "absent.jsonl")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "cannot read" in done.stderr
    assert "Traceback" not in done.stderr
