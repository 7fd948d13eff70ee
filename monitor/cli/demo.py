"""``searchmon demo``: the embedded default, end to end on one machine.

A local Kafka-compatible broker, generated traffic streamed in (accelerated) real time with a
ranking bug injected into one class, the daemon consuming it and serving ``/metrics``, and a
live view of what on-call would see. Ctrl-C stops everything it started.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from kafka import KafkaProducer

from monitor.cli.broker import FAST_GROUP, Broker
from monitor.config import Config
from monitor.core.classes import ALL
from monitor.core.export import Export, OfflineFigures, Slice
from monitor.core.online import ratio
from monitor.inputs.generate import Regression, Traffic, World, events, rfc3339
from monitor.offline.spec import parse_measure
from monitor.run.daemon import Daemon

EVENTS, JUDGMENTS, DEAD = "search-events", "search-judgments", "search-dead-letters"


SLICE_REGRESSION = (("platform", "ios"),)
"""The demo's second bug: an iOS release that breaks the results of every class on iOS."""


def run_demo(
    *, listen: str, accelerate: float, regression_class: str | None, regression_after: float,
    duration: float | None, seed: int, prometheus_listen: str | None = None,
    out: TextIO = sys.stdout, slice_regression_after: float | None = 5400.0,
) -> int:
    # Ctrl-C and SIGTERM stop it, also when it was started with SIGINT ignored (as a
    # background job of a script, which inherits that from the shell)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.default_int_handler)
    broker = Broker().start()
    state = Path(tempfile.mkdtemp(prefix="searchmon-demo-"))
    prometheus = _start_prometheus(prometheus_listen, listen, state, out)
    stop = threading.Event()
    threads: list[threading.Thread] = []
    daemon: Daemon | None = None
    try:
        broker.create_topics({EVENTS: 4, JUDGMENTS: 1, DEAD: 1})
        config = Config.model_validate({
            "kafka": {"bootstrap_servers": [broker.address], "dead_letter_topic": DEAD,
                      **FAST_GROUP},
            "http": {"listen": listen},
            "state": {"dir": str(state), "checkpoint_interval": 1.0},
            "input": {"rejection_log_limit": 0},  # counted in the view, not logged over it
            # event time runs ahead of the wall clock, accelerated: not a wrong clock here
            "sessions": {"max_future": 10 * 365 * 86400.0},
            "slices": {"dimensions": ["platform", "locale", "variant"]},
            "query_lists": {"dimensions": ["platform"]},  # /?platform=ios lists iOS's
        })
        daemon = Daemon(config)
        world = World.build(seed)
        start = float(int(time.time()))  # event time begins now and runs ahead, accelerated
        traffic = Traffic(
            seed=seed, start=start, sessions_per_second=1.0, duration=float("inf"),
            judged_every=3600.0, judged_queries=300, qrels=True,
            regression=(Regression(regression_class, start + regression_after)
                        if regression_class else None),
            more_regressions=(
                Regression(None, start + slice_regression_after, attributes=SLICE_REGRESSION),
            ) if slice_regression_after is not None else (),
        )
        threads = [
            threading.Thread(target=daemon.run, name="daemon", daemon=True),
            threading.Thread(
                target=_stream, args=(broker, world, traffic, accelerate, stop),
                name="traffic", daemon=True,
            ),
        ]
        for thread in threads:
            thread.start()
        print(f"searchmon demo: broker {broker.address}, status page http://{listen}/ "
              f"(which queries moved), metrics http://{listen}/metrics, "
              f"event time x{accelerate:g}"
              + (f", {regression_class} results shuffled after "
                 f"{regression_after / 3600:g} h of event time" if regression_class else "")
              + (", every class's results shuffled on platform=ios after "
                 f"{slice_regression_after / 3600:g} h" if slice_regression_after is not None
                 else "")
              + "; Ctrl-C to stop", file=out, flush=True)
        began = time.monotonic()
        previous: dict[str, tuple[float, int]] = {}
        while duration is None or time.monotonic() - began < duration:
            time.sleep(2.0)
            _view(daemon, previous, out)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        if daemon is not None:
            daemon.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(timeout=30)
        broker.stop()
        shutil.rmtree(state, ignore_errors=True)
    return 0


def _start_prometheus(
    prometheus_listen: str | None, listen: str, state: Path, out: TextIO
) -> subprocess.Popen[bytes] | None:
    """A Prometheus server with the project's rules, when asked for and installed."""
    if prometheus_listen is None:
        return None
    binary = shutil.which("prometheus")
    rules = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "searchmon.rules.yml"
    if binary is None or not rules.exists():
        print("no prometheus binary (or deploy/ rules) found: running without it", file=out)
        return None
    shutil.copy(rules, state / "searchmon.rules.yml")
    (state / "prometheus.yml").write_text(
        "global: {scrape_interval: 2s, evaluation_interval: 2s}\n"
        "rule_files: [searchmon.rules.yml]\n"
        f"scrape_configs: [{{job_name: searchmon, static_configs: [{{targets: ['{listen}']}}]}}]\n"
    )
    process = subprocess.Popen(
        [binary, f"--config.file={state / 'prometheus.yml'}",
         f"--storage.tsdb.path={state / 'prometheus'}", f"--web.listen-address={prometheus_listen}",
         "--rules.alert.resend-delay=2s", "--log.level=error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print(f"prometheus with the searchmon rules: {_alerts_page(prometheus_listen)}", file=out)
    return process


def _alerts_page(listen: str) -> str:
    """The alerts page that loads on the Prometheus installed: ``/alerts`` of its web UI, or
    ``/classic/alerts`` where the package leaves the UI out (Debian's 2.x)."""
    base = f"http://{listen}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for page in ("/alerts", "/classic/alerts"):
            try:
                with urllib.request.urlopen(base + page, timeout=2) as answer:
                    if answer.status == 200 and b"<html" in answer.read(4096).lower():
                        return base + page
            except (OSError, ValueError):
                continue
        time.sleep(0.3)
    return base + "/alerts"


def _stream(broker: Broker, world: World, traffic: Traffic, accelerate: float,
            stop: threading.Event) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.address, linger_ms=20)
    began = time.monotonic()
    try:
        for event_time, key, line in events(world, traffic):
            if stop.is_set():
                return
            delay = (event_time - traffic.start) / accelerate - (time.monotonic() - began)
            if delay > 0 and stop.wait(delay):
                return
            kind = JUDGMENTS if b'"type":"judgment"' in line or b'"type":"qrels"' in line else (
                EVENTS
            )
            producer.send(kind, key=key.encode(), value=line)
    finally:
        producer.close(timeout=5)


def _view(daemon: Daemon, previous: dict[str, tuple[float, int]], out: TextIO) -> None:
    view: Export = daemon.exported
    newest = view.newest
    lines = [
        "",
        f"event time {rfc3339(newest) if newest is not None else '-'}   "
        f"lag {sum(daemon.lag.values())}   "
        f"rejected {sum(view.rejected.values())}   "
        f"broker {'connected' if daemon.connected else 'DISCONNECTED'}",
        f"{'class':<14}{'QPS':>7}{'queries':>9}{'CTR':>7}{'zero-res':>9}{'abandon':>9}"
        f"{'success':>9}{'nDCG@10':>9}  regression",
    ]
    offline = view.offline or OfflineFigures()
    measures = daemon.config.offline.measures
    measure = str(parse_measure(measures[0])) if measures else None
    hour = daemon.coordinator.recent.hour  # the present tense: the last hour of event time
    lines[1] += "   figures: " + (
        f"last hour ({_minutes(hour.end.time - hour.start.time)} of event time)"
        if hour is not None else "since start"
    )

    def counter(slices: list[Slice]) -> Callable[[str], int | None]:
        if hour is None:
            return lambda name: sum(f.count(name) for f in view.slices if f.slice in slices)
        return hour.counts(slices).__getitem__

    of_class: dict[str, list[Slice]] = {}
    for figures in view.slices:
        of_class.setdefault(figures.slice[0], []).append(figures.slice)
    rows = sorted((name, counter(slices)) for name, slices in of_class.items())
    overall = ALL, counter([figures.slice for figures in view.slices])
    for name, count in [*rows, overall]:
        queries = count("queries") or 0
        if name != ALL and not queries:
            continue
        ndcg = next((  # judged samples carry no dimension: one mean per class
            m.mean for m in offline.means
            if m.slice[0] == name and m.source == "sample" and m.window == 1
            and m.measure == measure
        ), None)
        verdicts = [
            v.measure + (f" since {rfc3339(v.since_time)[11:16]} ({v.flagged_samples} samples)"
                         if v.since_time is not None else "")
            for v in offline.verdicts if v.slice[0] == name and v.regression
        ]
        total = sum(f.count("queries") for f in view.slices if name in (ALL, f.slice[0]))
        now = time.monotonic()
        then, before = previous.get(name, (now, total))
        previous[name] = (now, total)
        qps = (total - before) / (now - then) if now > then else 0.0
        lines.append(
            f"{name:<14}{qps:>7.0f}{queries:>9}"
            f"{_pct(ratio('ctr', count)):>7}"
            f"{_pct(ratio('zero_result_rate', count)):>9}"
            f"{_pct(ratio('abandonment_rate', count)):>9}"
            f"{_pct(ratio('session_success_rate', count)):>9}"
            f"{(f'{ndcg:.3f}' if ndcg is not None else '-'):>9}  "
            + ("REGRESSION " + ", ".join(verdicts) if verdicts else "-")
        )
    if "platform" in view.labels:  # the online figures per platform, over every class
        at = view.labels.index("platform")
        lines.append(f"{'platform':<14}{'':>7}{'queries':>9}{'CTR':>7}{'zero-res':>9}"
                     f"{'abandon':>9}{'success':>9}")
        for value in sorted({f.slice[at] for f in view.slices}):
            count = counter([f.slice for f in view.slices if f.slice[at] == value])
            queries = count("queries") or 0
            if queries:
                lines.append(
                    f"{value:<14}{'':>7}{queries:>9}{_pct(ratio('ctr', count)):>7}"
                    f"{_pct(ratio('zero_result_rate', count)):>9}"
                    f"{_pct(ratio('abandonment_rate', count)):>9}"
                    f"{_pct(ratio('session_success_rate', count)):>9}"
                )
    report = daemon.coordinator.queries or {}
    for name in sorted({v.slice[0] for v in offline.verdicts if v.regression} - {ALL}):
        worsened = next((
            e for e in report.get("worsened", [])
            if (e["source"], e["query_class"], e["measure"]) == ("sample", name, measure)
        ), None)
        if worsened is not None:
            moved = ", ".join(f"{r['query']} ({r['before']:.2f} -> {r['after']:.2f})"
                              for r in worsened["rows"][:3])
            lines.append(f"worsened {name} queries ({measure}): {moved}, ... on "
                         f"http://{daemon.config.http.listen}/?class={name}")
    print("\n".join(lines), file=out, flush=True)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
