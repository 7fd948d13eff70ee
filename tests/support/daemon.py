"""``searchmon run`` as the integration tests start it: its configuration and log in a
directory of the test, and the ways to wait on what it exports and logs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.broker import FAST_GROUP, Broker
from tests.support.http import scrape
from tests.support.wait import wait_for

EVENTS, DEAD = "search-events", "search-dead-letters"


def start_daemon(
    tmp: Path, broker: Broker, group: str, port: int, kafka: str = "", state: str = "",
    fast_group: bool = True, options: tuple[str, ...] = (), state_dir: Path | None = None,
    idle_after: str = "0s", dead_letters: str = DEAD,
) -> subprocess.Popen[str]:
    """``searchmon run`` with its configuration and state in ``tmp``; ``kafka`` and ``state``
    are more lines for those sections; ``fast_group``: the short group timings of the local
    broker (else the defaults); ``idle_after``: ``[sessions] idle_after`` (off by default
    here: the tests compare with pipelines that were fed the same records, not closed);
    ``dead_letters``: the dead-letter topic (a test that shares the broker with others and
    creates no topics of theirs names its own)."""
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "searchmon.toml"
    timings = FAST_GROUP if fast_group else {}
    config.write_text(
        f'[kafka]\nbootstrap_servers = ["{broker.address}"]\ngroup_id = "{group}"\n'
        f'dead_letter_topic = "{dead_letters}"\n{kafka}'
        + "".join(f"{k} = {v}\n" for k, v in timings.items())
        + f'[sessions]\nidle_after = "{idle_after}"\n'
        + f'[http]\nlisten = "127.0.0.1:{port}"\n'
        f'[state]\ndir = "{state_dir or tmp / "state"}"\ncheckpoint_interval = "500ms"\n{state}'
    )
    with (tmp / "daemon.log").open("a") as log:  # a file: a pipe nobody reads fills up
        return subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "--config", str(config), *options],
            stdout=subprocess.DEVNULL, stderr=log, text=True,
        )


def log_of(tmp: Path) -> str:
    """What the daemons started in ``tmp`` wrote to stderr."""
    return (tmp / "daemon.log").read_text()


def print_daemon_logs(tmp: Path) -> None:
    """The end of the log of every daemon started under ``tmp`` (pytest shows what a test
    printed when it fails)."""
    for log in sorted(tmp.rglob("daemon.log")):
        print(f"--- {log.relative_to(tmp)}, last 80 lines:")
        print("\n".join(log.read_text().splitlines()[-80:]))


def wait_until_read(port: int, total: int, seconds: float = 120) -> dict[str, float]:
    """The scrape of the daemon on ``port`` in which it has read ``total`` events."""
    values: dict[str, float] = {}

    def read() -> float | None:
        values.clear()
        values.update(scrape(port))
        return values.get("searchmon_events_read_total")

    wait_for(read, f"{total} events read", seconds, until=lambda n: n == total, every=0.3)
    return values


def wait_for_log(tmp: Path, daemon: subprocess.Popen[str], text: str, seconds: float) -> None:
    """Until ``text`` is in the log of the daemons of ``tmp``; fails at once if ``daemon``
    ends."""
    def logged() -> bool:
        assert daemon.poll() is None, f"the daemon ended ({daemon.returncode})"
        return text in log_of(tmp)

    wait_for(logged, f"{text!r} in the log", seconds)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the daemon's worker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
