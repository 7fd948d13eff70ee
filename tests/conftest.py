"""Shared fixtures and paths for the test suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.broker import Broker

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """One local Kafka-protocol broker for the whole run (tests that stop a broker start one
    of their own). Tests keep out of each other's way by topic and group names."""
    running = Broker().start()
    yield running
    running.stop()
