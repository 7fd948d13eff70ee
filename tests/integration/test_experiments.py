"""An experiment through the daemon: generated traffic with a true CTR effect from a real
broker, its figures on /metrics equal to a replay of the same messages, and the status page's
experiments section."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from monitor.config import Config
from monitor.core.experiments import analyse
from monitor.core.export import combine, export
from monitor.core.pipeline import Pipeline
from tests.support.broker import Broker, free_port
from tests.support.daemon import start_daemon, wait_for_log
from tests.support.http import get, scrape
from tests.support.wait import wait_for

EXPERIMENT = ('[[experiments]]\nid = "ranker-x"\nattribute = "ranker"\ncontrol = "A"\n'
              'split = {A = 0.5, B = 0.5}\n')


def units_of(values: dict[str, float]) -> dict[str, float]:
    return {m[1]: v for k, v in values.items()
            if (m := re.match(r'search_experiment_units\{.*variant="([^"]+)"', k))}


def test_the_daemon_compares_the_variants_of_generated_traffic(
    tmp_path: Path, broker: Broker
) -> None:
    topic = f"exp-{uuid.uuid4().hex[:8]}"
    broker.create_topics({topic: 2, f"{topic}-judged": 1})
    lines = subprocess.run(
        [sys.executable, "-m", "monitor", "generate", "--duration", "20m", "--seed", "3",
         "--sessions-per-second", "4", "--experiment", "ranker-x:ranker:A=0.5,B=0.5",
         "--effect", "B:ctr=+0.1", "--start", "2026-09-01T00:00:00Z"],
        capture_output=True, check=True, timeout=120,
    ).stdout.splitlines()
    keyed = [(re.search(rb'"user_id": ?"([^"]+)"', line), line) for line in lines]
    broker.produce(topic, [(m[1] if m else None, line) for m, line in keyed])
    # the same messages replayed apart, one pipeline per user's partition is not needed:
    # units and sums add up over partitions when each user's events are in one
    config = Config.model_validate({"experiments": [{
        "id": "ranker-x", "attribute": "ranker", "control": "A",
        "split": {"A": 0.5, "B": 0.5}}]})
    replayed = Pipeline(config)
    for line in lines:
        replayed.feed(line)
    replayed.close()
    want = analyse(combine([(export(replayed), 1)]).experiments[0])
    kafka = f'events_topic = "{topic}"\njudgments_topic = "{topic}-judged"\n'
    port = free_port()
    daemon = start_daemon(tmp_path, broker, f"g-{uuid.uuid4().hex}", port, kafka,
                          state=EXPERIMENT.replace("[[", "\n[[", 1), idle_after="2s")
    try:
        wait_for_log(tmp_path, daemon, "caught up", 120)
        expected = {name: float(v["units"]) for name, v in want["variants"].items()}
        wait_for(lambda: units_of(scrape(port)), "every unit counted", 90,
                 until=lambda found: found == expected, every=0.5)
        values = wait_for(lambda: scrape(port), "every session closed", 90, until=lambda v: v.get(
            'search_experiment_value{experiment="ranker-x",metric="ctr",variant="B"}'
        ) == want["variants"]["B"]["ctr"], every=0.5)
        verdict = values['search_experiment_verdict{experiment="ranker-x",metric="ctr",'
                         'variant="B"}']
        assert verdict == 1.0, "a CTR lift of 0.1 is detected as better"
        assert values['search_experiment_sample_ratio_mismatch{experiment="ranker-x"}'] == 0.0
        status, page = get(f"http://127.0.0.1:{port}/")
        assert status == 200 and "<h2>Experiments</h2>" in page and "ranker-x" in page
        assert "better" in page
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
