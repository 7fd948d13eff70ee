"""The compiled hot path: the modules every event passes through, compiled by mypyc.

The metadata is in ``pyproject.toml``; this file only adds the extension modules. They are the
same Python source, compiled ahead of time to C (mypyc, from the type annotations that
``mypy --strict`` checks): a replay takes about two thirds of its plain-Python time. One
small extension is written in C: the count of brackets every message is checked for
(``monitor/inputs/_brackets.c``). Without a C compiler, or with ``SEARCHMON_COMPILE=0`` at
install time, the package installs as plain Python and behaves the same, slower
(``searchmon_build_info`` and the daemon's log say which runs).
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from monitor.compiled import C_HELPER, GROUP, MODULES


def extensions() -> list[Extension]:
    if os.environ.get("SEARCHMON_COMPILE", "1") == "0":
        return []
    # the count of brackets every message is checked for (monitor/inputs/brackets.py)
    helper = Extension(C_HELPER, [f"{C_HELPER.replace('.', '/')}.c"], optional=True)
    try:
        from mypyc.build import mypycify
    except ImportError:  # the C helper is used only with the compiled modules: not built
        print("searchmon: mypyc not found: installing plain Python", file=sys.stderr)
        return []
    modules = mypycify(
        [f"{name.replace('.', '/')}.py" for name in MODULES], opt_level="3", debug_level="1",
        group_name=GROUP,
    )
    for module in modules:
        module.optional = True  # a failed compile installs plain Python (with a warning)
    return [*modules, helper]


setup(ext_modules=extensions())
