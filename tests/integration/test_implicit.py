"""Labels from clicks through the daemon: generated traffic from a real broker over two
partitions, a click model fitted every hour of event time, and the live queries scored
against its labels exported under source="implicit" and shown on the status page."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

from tests.support.broker import Broker, free_port
from tests.support.daemon import log_of, start_daemon, wait_for_log
from tests.support.http import get, scrape
from tests.support.wait import wait_for

IMPLICIT = '''
[implicit]
enabled = true
interval = "1h"
min_impressions = 5
[query_lists]
min_sessions = 2
'''


def implicit_scores(values: dict[str, float]) -> float:
    """Live queries scored against labels from clicks, over every class (nDCG@10)."""
    return sum(value for name, value in values.items()
               if name.startswith("search_judged_score_count{")
               and 'source="implicit"' in name and 'measure="nDCG@10"' in name
               and 'query_class="all"' not in name)


def test_the_daemon_scores_live_queries_against_labels_from_clicks(
    tmp_path: Path, broker: Broker
) -> None:
    topic = f"implicit-{uuid.uuid4().hex[:8]}"
    broker.create_topics({topic: 2, f"{topic}-judged": 1})
    lines = subprocess.run(
        [sys.executable, "-m", "monitor", "generate", "--duration", "150m", "--seed", "5",
         "--sessions-per-second", "2", "--start", "2026-09-01T00:00:00Z"],
        capture_output=True, check=True, timeout=180,
    ).stdout.splitlines()
    broker.produce(topic, [(None, line) for line in lines])
    kafka = f'events_topic = "{topic}"\njudgments_topic = "{topic}-judged"\n'
    port = free_port()
    daemon = start_daemon(tmp_path, broker, f"g-{uuid.uuid4().hex}", port, kafka,
                          state=IMPLICIT, idle_after="2s")
    try:
        wait_for_log(tmp_path, daemon, "caught up", 120)
        values = wait_for(lambda: scrape(port), "live queries scored under implicit", 90,
                          until=lambda found: implicit_scores(found) >= 100, every=0.5)
        means = [value for name, value in values.items()
                 if name.startswith("search_judged_score_mean{") and 'source="implicit"' in name]
        assert means and all(0.0 <= mean <= 1.0 for mean in means)
        assert "implicit judgments: coec fitted" in log_of(tmp_path)
        status, page = get(f"http://127.0.0.1:{port}/")
        assert status == 200 and "live queries with labels from clicks" in page
    except BaseException:
        print(log_of(tmp_path)[-5000:])
        raise
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
