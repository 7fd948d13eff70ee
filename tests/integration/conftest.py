"""The integration tier: real processes. One local Kafka-protocol broker for the tests that
share it, and the end of each daemon's log with every test that fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import Broker
from tests.support.daemon import print_daemon_logs


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """One local Kafka-protocol broker for the whole run (with pytest-xdist, one per worker;
    tests that stop a broker start one of their own). Tests keep out of each other's way by
    topic and group names."""
    running = Broker().start()
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def daemon_logs(tmp_path: Path) -> Iterator[None]:
    """The end of every daemon's log, printed after each test: pytest shows it when the test
    fails."""
    yield
    print_daemon_logs(tmp_path)
