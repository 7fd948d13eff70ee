"""Paths of the repository and of the tests' data, and loading a script of the repository."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
DEPLOY = ROOT / "deploy"


def load_script(path: Path, name: str) -> ModuleType:
    """A script of the repository (not a package module), imported as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
