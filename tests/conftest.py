"""Shared fixtures and paths for the test suite."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from monitor.cli.broker import Broker

DATA = Path(__file__).parent / "data"


def load_script(path: Path, name: str) -> ModuleType:
    """A script of the repository (not a package module), imported as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """One local Kafka-protocol broker for the whole run (tests that stop a broker start one
    of their own). Tests keep out of each other's way by topic and group names."""
    running = Broker().start()
    yield running
    running.stop()
