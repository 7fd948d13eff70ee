"""The status page in a real browser: headless Chromium loads it from a running
``replay --serve`` (the last hour, the data's age, the reloads, the judged trends);
``/queries`` and ``searchmon top --url`` over the same endpoint."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.inputs.generate import Regression, Traffic, World, events
from tests.support.broker import Broker, free_port
from tests.support.daemon import log_of, start_daemon, wait_until_read
from tests.support.events import T0, query
from tests.support.html import elements, table_after
from tests.support.http import fetch, get
from tests.support.wait import wait_for

SEARCHMON = [sys.executable, "-m", "monitor"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``replay --serve`` over 3.2 h of traffic with hourly judged samples and a regression
    of the navigational class between the last two; yields its base URL."""
    tmp = tmp_path_factory.mktemp("served")
    data = tmp / "events.jsonl"
    data.write_bytes(b"\n".join(m for _, _, m in events(World.build(3), Traffic(
        seed=3, duration=3.2 * 3600.0, sessions_per_second=1.0, qrels=True,
        judged_every=3600.0, judged_queries=300,
        regression=Regression("navigational", T0 + 2.5 * 3600.0),
    ))) + b"\n")
    port = free_port()
    config = tmp / "searchmon.toml"
    config.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
    log = tmp / "replay.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [*SEARCHMON, "replay", str(data), "--serve", "--config", str(config),
             "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=err,
        )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert process.poll() is None, log.read_text()
        return fetch(base + "/healthz")[0] == 200

    try:
        wait_for(healthy, "replay --serve answers /healthz", 120, ignoring=(OSError,))
        yield base
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.returncode not in (0, -15):
            print(log.read_text())


def chromium(*arguments: str) -> subprocess.CompletedProcess[str]:
    browser = shutil.which("chromium")
    assert browser is not None, "Debian's chromium is installed by ./dev test"
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", f"--user-data-dir={os.environ.get('TMPDIR', '/tmp')}"
         f"/searchmon-chromium-{os.getpid()}", *arguments],
        capture_output=True, text=True, timeout=120,
    )


def test_chromium_renders_the_status_page_with_the_worsened_and_top_queries(
    served: str, tmp_path: Path
) -> None:
    status, body = fetch(served + "/queries?class=navigational")
    assert status == 200
    report = json.loads(body)
    worsened = [e for e in report["worsened"] if e["source"] == "sample"]
    assert worsened, "the regression worsened judged navigational queries"
    top = next(e for e in report["lists"] if (e["list"], e["window"]) == ("searches", "1h"))
    url = served + "/?class=navigational"
    done = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", url)
    assert done.returncode == 0, done.stderr
    assert "Content Security Policy" not in done.stderr, "the policy lets the page be as it is"
    dom = done.stdout
    assert "<script" not in dom and "searchmon: search quality" in dom
    assert "Queries: navigational" in dom and "REGRESSION" in dom
    assert f"sample {worsened[0]['sample_id']} against {worsened[0]['baseline_id']}" in dom
    assert worsened[0]["rows"][0]["query"] in dom
    assert top["rows"][0]["query"] in dom and "Top searches without a click" in dom
    # A person can look at it: the screenshot stays with the test's files.
    shot = Path(os.environ.get("SEARCHMON_SCREENSHOTS", str(tmp_path))) / "status-page.png"
    done = chromium("--window-size=1280,2200", f"--screenshot={shot}", url)
    assert done.returncode == 0, done.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"status page screenshot: {shot}")


def test_chromium_shows_the_last_hour_the_data_age_the_reloads_and_the_trends(
    served: str, tmp_path: Path
) -> None:
    """The navigational class's rankings were shuffled 42 minutes before the end of the input:
    its CTR in the last hour stands well below the hour before, where the total since the
    start has only slid. The page says how old the data is and that it is a replay, reloads
    every 30 s (the default), and draws each verdict's recent sample means."""
    done = chromium("--enable-logging=stderr", "--v=0", "--dump-dom", served + "/")
    assert done.returncode == 0, done.stderr
    assert "Content Security Policy" not in done.stderr, "the policy lets the page be as it is"
    dom = done.stdout
    rows = table_after(dom, "Online: the last hour")
    assert rows[0][:4] == ["class", "period", "queries", "CTR"]
    found = [row[0] for row in rows].index("navigational")
    last, before = rows[found], rows[found + 1]
    assert (last[1], before[:2]) == ("last hour", ["", "hour before"])
    assert float(last[3]) < float(before[3]) - 0.2, (last, before)
    assert re.search(r"Last hour: [-0-9: ]+ to [0-9:]+ UTC \(6[0-5] min\)", dom), dom[:3000]
    assert re.search(r"<span>data [0-9][^<]* old</span>", dom), "a replay's age, not red"
    assert "<span>replay</span>" in dom
    assert {"http-equiv": "refresh", "content": "30"} in elements(dom, "meta")
    lines = elements(dom, "polyline")
    assert lines and all(line["stroke"] and line["points"] for line in lines)
    sparks = [svg for svg in elements(dom, "svg") if svg["class"] == "spark"]
    trends = [line for line in lines if line.get("class") is None]
    assert len(sparks) == len(trends) >= 5 * 5, "every class, every measure"
    assert "#c62828" in {dot["fill"] for dot in elements(dom, "circle")}, "a regression's"
    # each class's precision-recall curve of the latest sample over its baseline's
    curves = [svg for svg in elements(dom, "svg") if svg["class"] == "curve"]
    samples = [line for line in lines if line.get("class") == "sample"]
    baselines = [line for line in lines if line.get("class") == "baseline"]
    assert len(curves) == len(samples) == len(baselines) >= 5, "every class and all"
    assert all(len(str(line["points"]).split()) == 11 for line in samples + baselines)
    assert "#c62828" in {line["stroke"] for line in samples}, "the regression's class in red"
    total = chromium("--dump-dom", served + "/?view=total&refresh=0")
    assert total.returncode == 0, total.stderr
    rows = table_after(total.stdout, "Online: since the state began")
    since_start = next(row for row in rows if row[0] == "navigational")
    assert float(last[3]) < float(since_start[2]) < float(before[3]), "the total slides"
    assert all(meta.get("http-equiv") is None for meta in elements(total.stdout, "meta"))
    shot = Path(os.environ.get("SEARCHMON_SCREENSHOTS", str(tmp_path))) / "status-page-hour.png"
    done = chromium("--window-size=1280,1400", f"--screenshot={shot}", served + "/")
    assert done.returncode == 0, done.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"status page screenshot: {shot}")


def test_queries_filters_and_errors_over_http(served: str) -> None:
    status, body = fetch(served + "/queries?window=24h&list=zero_results")
    assert status == 200
    lists = json.loads(body)["lists"]
    assert lists and {(e["window"], e["list"]) for e in lists} == {("24h", "zero_results")}
    assert fetch(served + "/queries?list=nope")[0] == 400
    assert fetch(served + "/queries?colour=red")[0] == 400
    status, body = fetch(served + "/?class=no-such-class")
    assert status == 200 and b"Queries: navigational" in body, "an unknown class: all shown"


def test_top_prints_the_lists_of_a_running_endpoint_and_of_a_report(
    served: str, tmp_path: Path
) -> None:
    expected = json.loads(fetch(served + "/queries?class=all&window=1h&list=searches")[1])
    first = expected["lists"][0]["rows"][0]
    done = subprocess.run(
        [*SEARCHMON, "top", "--url", served, "--class", "all", "--window", "1h", "--list",
         "searches", "--rows", "3"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("top searches · all · last 1h")
    assert first["query"] in done.stdout and str(first["count"]) in done.stdout
    assert len([line for line in done.stdout.splitlines() if line.startswith("  ")]) == 4
    missing = subprocess.run([*SEARCHMON, "top", "--url", f"http://127.0.0.1:{free_port()}"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "searchmon: http://127.0.0.1" in missing.stderr
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"queries": expected}))
    offline = subprocess.run([*SEARCHMON, "top", "--report", str(report), "--rows", "3"],
                             capture_output=True, text=True, timeout=60)
    assert offline.returncode == 0 and offline.stdout == done.stdout


def test_top_merges_the_lists_of_several_replicas(served: str) -> None:
    """Given twice, the same endpoint stands for two replicas that counted the same traffic:
    every exact count (error 0) doubles, and the worsened queries come once."""
    single = json.loads(fetch(served + "/queries?class=all&window=1h&list=searches")[1])
    exact = [r for r in single["lists"][0]["rows"] if r["error"] == 0][:3]
    assert exact
    done = subprocess.run(
        [*SEARCHMON, "top", "--url", served, "--url", served, "--class", "all", "--window",
         "1h", "--list", "searches", "--rows", "20"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = {line.split("  ")[1].strip(): line for line in done.stdout.splitlines()
             if line.startswith("  ") and "  " in line[2:]}
    for row in exact:
        assert str(2 * row["count"]) in lines[row["query"]], (row, lines.get(row["query"]))
    state = json.loads(fetch(served + "/queries/state")[1])
    assert state["capacity"] == 1000 and state["windows"]
    assert all("sessions" not in part for window in state["windows"]
               for tally in window["tallies"] for part in tally.values()
               if isinstance(part, dict)), "no session ids leave the process"


def test_sample_picks_queries_for_judges_from_a_running_daemons_lists(served: str) -> None:
    """``sample --url``: the most searched of the lists (each class whole, the longest
    window), each with its class and searches as the lists count them; no served list (the
    lists keep counts); a floor above the daemon's, or logs and a URL at once, refused."""
    lists = json.loads(fetch(served + "/queries?window=24h&list=searches")[1])["lists"]
    counts = {(row["query"], entry["query_class"]): row["count"] for entry in lists
              if entry["query_class"] != "all" for row in entry["rows"]}
    done = subprocess.run(
        [*SEARCHMON, "sample", "--url", served, "-n", "8", "--method", "top", "--format",
         "json"], capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    picked = json.loads(done.stdout)
    assert len(picked) == 8 and all(row["results"] == [] for row in picked)
    assert [row["searches"] for row in picked] == sorted(counts.values(), reverse=True)[:8]
    assert all(counts[(row["query"], row["query_class"])] == row["searches"] for row in picked)
    assert "no results" in done.stderr
    by_class = subprocess.run(
        [*SEARCHMON, "sample", "--url", served, "-n", "10", "--by", "class", "--format",
         "json"], capture_output=True, text=True, timeout=60,
    )
    assert by_class.returncode == 0, by_class.stderr
    assert len({row["query_class"] for row in json.loads(by_class.stdout)}) >= 4
    for argv in (["--min-sessions", "50"], ["--window", "2h"], ["some.jsonl"]):
        refused = subprocess.run([*SEARCHMON, "sample", "--url", served, *argv],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "searchmon" in refused.stderr, argv
    in_seconds = subprocess.run([*SEARCHMON, "sample", "--url", served, "--window", "3600",
                                 "-n", "3"], capture_output=True, text=True, timeout=60)
    assert in_seconds.returncode == 0, in_seconds.stderr  # as `top --window 3600` reads it


def test_top_refuses_a_malformed_replica_state(tmp_path: Path) -> None:
    """A replica answering a state whose parts do not fit (here: a count below its error)
    is refused with a message, not a traceback."""

    def summary(keys: list[str], counts: list[int], errors: list[int]) -> dict[str, Any]:
        return {"keys": keys, "counts": counts, "errors": errors, "unseen": 0}

    broken = {
        "enabled": True, "capacity": 10, "min_sessions": 1, "top": 5, "min_searches": 1,
        "newest": 1.0, "worsened": [],
        "windows": [{"window": 3600.0, "start": 0.0, "end": 1.0, "classes": ["all"],
                     "tallies": [{"searches": summary(["a"], [1], [5]),
                                  "zero": summary([], [], []),
                                  "outcomes": summary([], [], []), "clicked": []}]}],
    }

    with answering(lambda _: (200, json.dumps(broken).encode())) as url:
        done = subprocess.run([*SEARCHMON, "top", "--url", url, "--url", url],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "cannot merge the replicas' query lists" in done.stderr
    assert "Traceback" not in done.stderr


@contextlib.contextmanager
def answering(answer: Callable[[str], tuple[int, bytes]]) -> Iterator[str]:
    """A local HTTP server whose GETs ``answer`` (path -> status, body); yields its URL."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


HOSTILE = ["a\x1b]0;title\x07b", "\x1b[2Jclear", "x\x9by", "cr\rlf", "bidi\u202eevil"]
"""Texts a terminal would obey: retitle the window, clear it, a C1 CSI, a carriage return,
a right-to-left override."""


def raw_controls(text: str) -> list[str]:
    """Characters of ``text`` a terminal would act on (but the table's own newlines)."""
    import unicodedata

    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]


def test_top_shows_control_characters_of_every_text_escaped(tmp_path: Path) -> None:
    """Query texts and class names through the pipeline (``replay``), a worsened entry's
    texts by hand: ``searchmon top`` prints each control character as an escape."""
    data = tmp_path / "events.jsonl"
    data.write_bytes(b"\n".join(
        query(f"e{n}-{s}", 10.0 * n + s, f"s{s}", f"q{n}-{s}", text=text, klass=f"c{text}")
        for n, text in enumerate(HOSTILE) for s in range(3)
    ) + b"\n")
    config = tmp_path / "searchmon.toml"
    config.write_text("[query_lists]\nmin_sessions = 1\nmin_searches = 1\n")
    replayed = subprocess.run(
        [*SEARCHMON, "replay", str(data), "--config", str(config), "--report", "json"],
        capture_output=True, timeout=120,
    )
    assert replayed.returncode == 0, replayed.stderr
    document = json.loads(replayed.stdout)
    texts = {row["query"] for entry in document["queries"]["lists"] for row in entry["rows"]}
    assert any("\x1b" in t for t in texts) and any("\x9b" in t for t in texts), texts
    document["queries"]["worsened"] = [{
        "source": "sample", "window": None, "sample_id": "s\x1b]0;owned\x07",
        "baseline_id": "b\x1b[?1049h", "query_class": "c\x1b[2J", "measure": "nDCG\x9b@10",
        "rows": [{"query": text, "before": 0.9, "after": 0.1, "delta": -0.8}
                 for text in HOSTILE],
    }]
    report = tmp_path / "report.json"
    report.write_text(json.dumps(document))
    done = subprocess.run([*SEARCHMON, "top", "--report", str(report), "--rows", "20"],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    shown = done.stdout.decode()
    assert raw_controls(shown) == [], shown
    for escaped in (r"a\x1b]0;title\x07b", r"\x1b[2Jclear", r"x\x9by", r"cr\rlf",
                    r"bidi\u202eevil", r"s\x1b]0;owned\x07", r"b\x1b[?1049h", r"nDCG\x9b@10"):
        assert escaped in shown, escaped
    assert "worsened · c\\x1b[2J" in shown and "· ccr\\rlf · last 1h" in shown  # classes


def test_top_escapes_what_an_endpoint_answers(tmp_path: Path) -> None:
    """A server answering ``/queries`` with such texts, and an error whose body is one:
    neither reaches the terminal raw."""

    lists = {"enabled": True, "min_sessions": 1, "capacity": 10, "worsened": [], "lists": [{
        "list": "searches", "window": "1h\x1b[2J", "query_class": "all\u202e",
        "from": "2026\x07", "to": "x\x9b", "rows": [
            {"query": text, "count": "9\x1b[31m", "error": 0} for text in HOSTILE
        ],
    }]}

    def answer(path: str) -> tuple[int, bytes]:
        if path == "/queries":
            return 200, json.dumps(lists).encode()
        return 500, b"gone\x1b]0;title\x07\x1b[2J"

    with answering(answer) as url:
        listed = subprocess.run([*SEARCHMON, "top", "--url", url],
                                capture_output=True, timeout=60)
        failed = subprocess.run([*SEARCHMON, "top", "--url", url, "--url", url],
                                capture_output=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert raw_controls(listed.stdout.decode()) == [], listed.stdout
    assert r"a\x1b]0;title\x07b" in listed.stdout.decode()
    assert r"9\x1b[31m" in listed.stdout.decode()
    assert failed.returncode == 2
    assert raw_controls(failed.stderr.decode()) == [], failed.stderr
    assert r"500 gone\x1b]0;title\x07\x1b[2J" in failed.stderr.decode()


def test_the_daemons_page_shows_the_broker_and_keeps_its_last_hour_through_a_restart(
    tmp_path: Path, broker: Broker
) -> None:
    """``searchmon run`` over 2.5 hours of traffic, sent a quarter of an hour of event time
    at a time (the daemon samples its history at checkpoints: a backlog read in one goes
    into one sample): the page gives the last hour beside the hour before, the broker
    connected, and data older than a few minutes in red (the traffic is stamped in the past).
    Restarted, the daemon shows the same hours once it has its partitions back (the newest
    event time is theirs): the history came back with its ledger."""
    topics = {"page-events": 2, "page-judgments": 1, "page-dead-letters": 1}
    broker.create_topics(topics)
    stream = list(events(World.build(9), Traffic(seed=9, duration=2.5 * 3600.0,
                                                 sessions_per_second=0.3)))
    kafka = 'events_topic = "page-events"\njudgments_topic = "page-judgments"\n'
    group, port = f"g-{uuid.uuid4().hex}", free_port()
    daemon = start_daemon(tmp_path, broker, group, port, kafka, dead_letters="page-dead-letters")
    try:
        sent = 0
        for quarter in range(10):
            end = T0 + (quarter + 1) * 900.0 if quarter < 9 else float("inf")
            part = [(key, line) for time, key, line in stream
                    if T0 + quarter * 900.0 <= time < end]
            broker.produce("page-events", ((key.encode(), line) for key, line in part))
            sent += len(part)
            wait_until_read(port, sent)
        assert sent == len(stream)
        page = wait_for(lambda: get(f"http://127.0.0.1:{port}/")[1], "the hour before shown",
                        60, until=lambda text: "hour before" in text)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert daemon.returncode == 0, log_of(tmp_path)
    assert "<span class=ok>broker connected</span>" in page
    assert re.search(r"<span class=bad>data [0-9][^<]* old</span>", page), "stale: red"
    assert "<meta http-equiv=refresh content=30>" in page
    hours = re.search(r"Last hour: [^<]*", page)
    assert hours is not None and "against the hour before" in hours[0], hours
    rows = table_after(page, "Online: the last hour")
    assert rows[1][:2] == ["all", "last hour"] and rows[2][1] == "hour before"
    assert int(rows[1][2].replace(",", "")) > 0

    daemon = start_daemon(tmp_path, broker, group, port, kafka, dead_letters="page-dead-letters")
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/readyz")[0] == 200,
                 "the partitions restored", 60, ignoring=(OSError,))
        again = get(f"http://127.0.0.1:{port}/")[1]
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert daemon.returncode == 0, log_of(tmp_path)
    assert hours[0] in again, "the same hours, from the history the ledger kept"
    assert table_after(again, "Online: the last hour")[1:3] == rows[1:3]
