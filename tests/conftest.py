"""The tiers are folders: each test is marked with the tier it is in (unit, integration or
deploy), so that ``-m`` can select across them."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "integration", "deploy")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(HERE).parts[0]
        if tier in TIERS:
            item.add_marker(tier)
