"""The compiled hot path: which modules mypyc compiles at install time (``setup.py``), and
whether this process runs them compiled.

Compiled and plain Python are the same source and count the same; compiled, a replay takes
about two thirds of its plain-Python time (docs: performance). Plain Python runs when the
install compiled nothing (no C compiler, or ``SEARCHMON_COMPILE=0``), when
``SEARCHMON_PURE_PYTHON=1`` is set (a profiler sees every line then), and in a source tree
where a compiled module's source changed after it was compiled (``pip install -e .``
compiles it again): never stale code.

This module imports nothing of the package: ``setup.py`` reads ``MODULES`` before anything is
installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

MODULES = (
    "monitor.core.admission",
    "monitor.core.classes",
    "monitor.core.heavy",
    "monitor.core.online",
    "monitor.core.pipeline",
    "monitor.core.querylists",
    "monitor.core.slices",
    "monitor.inputs.chain",
    "monitor.inputs.files",
    "monitor.inputs.native",
    "monitor.inputs.records",
    "monitor.inputs.timestamps",
    "monitor.inputs.ubi",
)
"""Compiled together (one extension; their calls to each other are C calls): the modules every
event passes through."""

C_HELPER = "monitor.inputs._brackets"
"""The one extension written in C (``monitor/inputs/_brackets.c``, built with them and used
only with them): the count of brackets every message is checked for
(``monitor/inputs/brackets.py``)."""

GROUP = "monitor_hot"
"""The name of the extension that holds their code (``GROUP__mypyc``); each module of
``MODULES`` is a small extension that loads it."""

PURE_PYTHON = "SEARCHMON_PURE_PYTHON"
"""Set to 1: run plain Python even where the compiled modules are installed."""

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The directory that holds the package (a source tree or ``site-packages``)."""


def running_compiled() -> bool:
    """Whether this process runs the compiled hot path (the modules it imports of
    ``MODULES`` are extensions; ``C_HELPER`` is used only then, where it was built)."""
    spec = importlib.util.find_spec(MODULES[0])
    return spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)


def stale(root: str = ROOT) -> list[str]:
    """In a source tree (``setup.py`` beside the package, under ``root``): the modules whose
    extension must not run. Those of ``MODULES`` whose source is newer than the extension
    that holds their code (edited since ``pip install -e .`` compiled them), ``C_HELPER``
    if its C source is newer than its extension, and any other module with an extension
    beside its source (compiled once, since taken out of ``MODULES``: the code it would load
    is gone)."""
    if not os.path.exists(os.path.join(root, "setup.py")):
        return []
    found = importlib.machinery.PathFinder.find_spec(f"{GROUP}__mypyc", [root])
    if found is None or found.origin is None:
        return []  # nothing compiled here
    built = os.stat(found.origin).st_mtime
    edited = []
    for name in MODULES:
        try:
            if os.stat(os.path.join(root, *name.split(".")) + ".py").st_mtime > built:
                edited.append(name)
        except OSError:
            continue
    helper = os.path.join(root, *C_HELPER.split("."))
    found = importlib.machinery.PathFinder.find_spec(C_HELPER.rpartition(".")[2],
                                                     [os.path.dirname(helper)])
    try:
        if found is not None and found.origin is not None and (
            os.stat(helper + ".c").st_mtime > os.stat(found.origin).st_mtime
        ):
            edited.append(C_HELPER)
    except OSError:
        pass
    for folder, _, files in os.walk(os.path.join(root, "monitor")):
        for file in files:
            suffix = next((s for s in EXTENSIONS if file.endswith(s)), None)
            if suffix is None:
                continue
            base = os.path.join(folder, file[: -len(suffix)])
            name = ".".join(os.path.relpath(base, root).split(os.sep))
            if name not in MODULES and os.path.exists(base + ".py"):
                edited.append(name)
    return edited


EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)


class _Source(importlib.abc.MetaPathFinder):
    """Loads every module of ``MODULES`` (and ``also``) from its source, not its extension:
    all of them or none, since compiled code refers to the compiled classes of the others."""

    def __init__(self, also: list[str]) -> None:
        self.names = {*MODULES, *also}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        source = os.path.join(ROOT, *fullname.split(".")) + ".py"
        return importlib.util.spec_from_file_location(fullname, source)


PLAIN_PYTHON: str | None = None
"""Why the compiled modules are not imported in this process, if ``choose`` decided so;
None: whatever is installed runs."""


def choose() -> None:
    """Called once, as the package is imported: plain Python where asked for or where the
    compiled modules are stale (``PLAIN_PYTHON`` says why)."""
    global PLAIN_PYTHON
    edited = []
    if os.environ.get(PURE_PYTHON, "") not in ("", "0"):
        reason = f"{PURE_PYTHON} is set"
    else:
        edited = stale()
        if not edited:
            return
        reason = (f"the compiled modules are out of date ({', '.join(edited)}): pip "
                  "install -e . compiles them again")
    # the C helper has no Python source to load: plain Python does not import it
    sys.meta_path.insert(0, _Source([name for name in edited if name != C_HELPER]))
    PLAIN_PYTHON = reason
