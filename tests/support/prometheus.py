"""A real Prometheus (Debian's package) for the tests: on a data directory, on a free loopback
port, with no scrape target; its HTTP API; its log in a file to print when a test fails."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.broker import free_port
from tests.support.http import fetch, get
from tests.support.wait import wait_for


def tool(name: str) -> str:
    """The path of an installed Prometheus tool (prometheus, promtool)."""
    path = shutil.which(name)
    assert path is not None, f"{name} is missing: `./dev test` installs Debian's prometheus"
    return path


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1"

    def query(self, expr: str, time: float) -> list[dict[str, Any]]:
        """The result of an instant query at ``time``."""
        return self._get("query", query=expr, time=f"{time:.3f}")

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """The result of a range query: per series, its ``values``."""
        return self._get("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                         step=f"{step:g}")

    def _get(self, endpoint: str, **parameters: str) -> list[dict[str, Any]]:
        status, body = get(f"{self.api}/{endpoint}?{urllib.parse.urlencode(parameters)}", 30)
        assert status == 200, body
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def stop(self) -> None:
        """SIGTERM to its process, then SIGKILL if it has not ended within 30 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def print_log(self) -> None:
        print(f"--- {self.log.name}, last 80 lines:")
        print("\n".join(self.log.read_text(errors="replace").splitlines()[-80:]))


def start_prometheus(tmp: Path, data: Path, retention: str = "3650d") -> Prometheus:
    """Prometheus on the blocks of ``data``, ready (``/-/ready``); its configuration and log
    in ``tmp``."""
    config = tmp / "prometheus.yml"
    config.write_text("global: {}\n")  # no scrape target: only the blocks it is given
    port = free_port()
    log = tmp / "prometheus.log"
    with log.open("ab") as out:  # a file: a pipe nobody reads fills up
        process = subprocess.Popen(
            [tool("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--storage.tsdb.retention.time={retention}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=info"],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp,
        )
    prometheus = Prometheus(process, port, log)

    def ready() -> bool:
        assert process.poll() is None, f"prometheus ended ({process.returncode})"
        try:
            return fetch(f"http://127.0.0.1:{port}/-/ready", timeout=2)[0] == 200
        except OSError:
            return False

    try:
        wait_for(ready, "prometheus ready", 60, every=0.2)
    except BaseException:
        prometheus.stop()
        raise
    return prometheus
