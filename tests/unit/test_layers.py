"""The layers of ``monitor/`` (docs/architecture.md): a module imports only from its own
layer or the layers below it, never upward, at any point of the module (imports inside
functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

MONITOR = Path(__file__).resolve().parents[2] / "monitor"
LAYERS = (
    ("lazy",),
    ("offline",),
    ("config", "logs", "text", "compiled", "__init__", "__version__"),
    ("inputs",),
    ("core",),
    ("state",),
    ("serve",),
    ("run",),
    ("cli", "__main__"),
)
"""Bottom to top: a package (a folder) or a module of ``monitor/``."""


def layer_of(module: str) -> int:
    """The layer of ``monitor.<first>...``."""
    first = module.split(".")[1] if "." in module else "__init__"
    for number, names in enumerate(LAYERS):
        if first in names:
            return number
    raise AssertionError(f"{module}: in no layer of {LAYERS}")


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "monitor":
                found += [f"monitor.{alias.name}" for alias in node.names]
            elif node.module.startswith("monitor."):
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("monitor.")]
    return found


def test_nothing_imports_upward() -> None:
    upward = []
    for path in sorted(MONITOR.rglob("*.py")):
        module = "monitor." + ".".join(path.relative_to(MONITOR).with_suffix("").parts)
        own = layer_of(module)
        for imported in imports(path):
            if layer_of(imported) > own:
                upward.append(f"{module} -> {imported}")
    assert upward == [], "\n".join(upward)


def test_every_module_is_in_a_layer() -> None:
    for path in MONITOR.rglob("*.py"):
        layer_of("monitor." + ".".join(path.relative_to(MONITOR).with_suffix("").parts))
