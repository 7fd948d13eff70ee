"""The quick start's first command, run as the README writes it: traffic for every class, and
the injected regression flagged for its class only."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import time
from typing import Any

import pytest

from monitor.cli.broker import free_port
from tests.support.files import ROOT
from tests.support.http import get, scrape


def readme_command(marker: str) -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    after = lines[lines.index(f"<!-- {marker} -->") + 1:]
    command = next(line for line in after if line and not line.startswith("```"))
    return shlex.split(command)


@pytest.mark.serial  # a fixed-length demo must get to its regression
def test_demo_shows_every_class_and_flags_the_regressed_one() -> None:
    port = free_port()
    command = [*readme_command("quickstart-demo"), "--listen", f"127.0.0.1:{port}",
               "--duration", "120"]
    demo = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    values: dict[str, float] = {}
    worsened: list[dict[str, Any]] = []
    page = ""
    try:
        deadline = time.monotonic() + 110
        while time.monotonic() < deadline:
            values = scrape(port)
            flag = judged(values, "search_judged_regression").get(("navigational", "nDCG@10"))
            lasting = judged(values, "search_judged_regression_samples").get(
                ("navigational", "nDCG@10"), 0.0)
            # the default baseline keeps the regression flagged at the samples after it
            if flag == 1.0 and lasting >= 2:
                # the worsened queries come with the checkpoint that exported the flag
                status, body = get(f"http://127.0.0.1:{port}/queries?class=navigational"
                                   "&list=worsened")
                if status == 200 and json.loads(body)["worsened"]:
                    worsened = json.loads(body)["worsened"]
                    page = get(f"http://127.0.0.1:{port}/?class=navigational")[1]
                    time.sleep(3)  # one more refresh of the live view
                    break
            time.sleep(1)
    finally:
        demo.send_signal(signal.SIGINT)
        output, _ = demo.communicate(timeout=60)
    assert demo.returncode == 0, output
    classes = ("navigational", "informational", "product", "local")
    queries: dict[str, float] = {}
    for name, labels, value in labelled(values):
        if name == "search_queries_total":
            queries[labels["query_class"]] = queries.get(labels["query_class"], 0.0) + value
            assert set(labels) == {"query_class", "platform", "locale", "variant"}
    for klass in classes:
        assert queries[klass] > 0, klass
    flags = judged(values, "search_judged_regression")
    assert flags[("navigational", "nDCG@10")] == 1.0
    for (klass, measure), value in flags.items():
        if klass in classes and klass != "navigational":
            assert value == 0.0, (klass, measure)
    assert "REGRESSION" in output and "samples)" in output
    # the page leads from the regression to the queries that moved
    first = next(e for e in worsened if (e["source"], e["measure"]) == ("sample", "nDCG@10"))
    assert first["rows"] and all(r["after"] < r["before"] for r in first["rows"])
    assert first["rows"][0]["query"] in page and "nDCG@10 worsened: sample" in page
    assert f"status page http://127.0.0.1:{port}/" in output
    assert "worsened navigational queries (nDCG@10)" in output
    # the iOS release: the last view's per-platform rows show ios clicked far less
    ctr = {row[0]: float(row[2].rstrip("%")) for line in output.splitlines()
           if (row := line.split()) and row[0] in ("ios", "android", "web") and len(row) >= 3}
    assert set(ctr) == {"ios", "android", "web"}, output[-2000:]
    assert ctr["ios"] < 0.8 * min(ctr["android"], ctr["web"]), ctr


def labelled(values: dict[str, float]) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a scrape as (name, labels, value)."""
    out = []
    for key, value in values.items():
        name, _, rest = key.partition("{")
        out.append((name, dict(re.findall(r'([a-z_]+)="([^"]*)"', rest)), value))
    return out


def judged(values: dict[str, float], family: str) -> dict[tuple[str, str], float]:
    """A judged family by (class, measure); the judged samples carry no dimension."""
    return {(labels["query_class"], labels["measure"]): value
            for name, labels, value in labelled(values) if name == family}


def test_the_demo_refuses_a_busy_port_in_one_line() -> None:
    """Was: a traceback, then a live view of zeros saying the broker was disconnected."""
    import socket
    import sys

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "monitor", "demo", "--listen", f"127.0.0.1:{port}",
             "--duration", "5"], capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "--listen" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
