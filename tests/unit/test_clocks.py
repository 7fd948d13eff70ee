"""The daemon's clocks: the wall clock future timestamps are judged against never goes back,
and a pause of the whole process is noticed (it may have cost the group membership)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from monitor.run.daemon import PauseWatch, WallClock


def test_a_step_back_of_the_wall_clock_is_counted_and_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wall = [1_800_000_000.0]
    monkeypatch.setattr(time, "time", lambda: wall[0] + time.monotonic())
    clock = WallClock()
    before = clock.now()
    wall[0] -= 3600.0  # an hour back
    after = clock.now()
    assert after >= before and after - before < 1.0
    assert clock.jumps == 1
    assert clock.now() >= after and clock.jumps == 1, "a step back is counted once"
    wall[0] -= 0.5  # a slew within a second is no step
    clock.now()
    assert clock.jumps == 1
    wall[0] += 7200.0  # forward steps are followed
    assert clock.now() > after + 3000.0


def test_a_process_stopped_and_continued_notices_the_pause() -> None:
    """The pause watch in a real process, stopped with SIGSTOP for longer than a second."""
    script = (
        "import sys, time\n"
        "from monitor.run.daemon import PauseWatch\n"
        "watch = PauseWatch()\n"
        "watch.take()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "print(f'{watch.take():.2f}', flush=True)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGSTOP)
        started = time.monotonic()
        while time.monotonic() - started < 1.5:
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("\n")
        child.stdin.flush()
        assert float(child.stdout.readline()) >= 1.4
    finally:
        child.kill()
        child.wait()


@pytest.mark.serial  # the watch thread must get the processor within 0.5 s
def test_a_busy_thread_is_no_pause() -> None:
    watch = PauseWatch()
    try:
        watch.take()
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            sum(range(1000))  # the main thread busy, the watch keeps ticking
        assert watch.take() < 0.5
    finally:
        watch.close()
