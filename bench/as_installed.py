"""The first step of the benches that time ``searchmon`` as a process of its own.

An installed package has its bytecode compiled (``pip install`` and the image write it). A
source checkout run with ``PYTHONDONTWRITEBYTECODE`` set (as CI machines often set it)
compiles every module whose bytecode is stale at every start instead: 40 ms of a replay's
start-up that no installed ``searchmon`` pays. The benches compile it once, as an install
does, before they time a process.
"""

from __future__ import annotations

import compileall
from pathlib import Path

import monitor


def compile_package() -> None:
    """Write the bytecode of every module of the package (kept where it is current)."""
    compileall.compile_dir(Path(monitor.__file__).parent, quiet=1)
