"""The daemon's own checks, without a broker: when /livez says the loop is not alive."""

from __future__ import annotations

import time
from pathlib import Path

from monitor.config import Config


def test_livez_fails_when_the_loop_stalls_or_makes_no_progress_while_behind(
    tmp_path: Path,
) -> None:
    from monitor.run.daemon import NO_PROGRESS, STALLED, Daemon

    daemon = Daemon(Config.model_validate({"state": {"dir": str(tmp_path)}}))
    assert daemon._not_alive() is None
    daemon.lag[("search-events", 0)] = 0
    daemon.progressed -= 10 * NO_PROGRESS
    assert daemon._not_alive() is None, "nothing to read is no lack of progress"
    daemon.lag[("search-events", 0)] = 5
    assert "5 messages behind and none processed" in (daemon._not_alive() or "")
    daemon.progressed = time.monotonic()
    daemon.turned -= STALLED + 1
    assert "has not turned" in (daemon._not_alive() or "")
