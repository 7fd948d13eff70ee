"""Shared fixtures and paths for the test suite."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
