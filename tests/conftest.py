"""The tiers are folders: each test is marked with the tier it is in (unit, integration or
deploy), so that ``-m`` can select across them. The bare ``pytest`` run (the testpaths: the
unit tier) leaves out the tests marked slow, which take seconds each; naming a path, as
``./dev test`` does, runs them too, and so does ``-m``."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "integration", "deploy")
HERE = Path(__file__).parent


def default_run(config: pytest.Config) -> bool:
    """Run without paths (the testpaths) and without ``-m``."""
    return config.args_source is pytest.Config.ArgsSource.TESTPATHS and not config.option.markexpr


def pytest_report_header(config: pytest.Config) -> str | None:
    if default_run(config):
        return "the default run leaves out the tests marked slow (pytest tests/unit runs them)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(HERE).parts[0]
        if tier in TIERS:
            item.add_marker(tier)
    if default_run(config):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
