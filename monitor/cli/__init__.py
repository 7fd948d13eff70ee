"""The commands: ``searchmon run``, ``replay``, ``eval``, ``generate``, ``demo``, ``top``,
``broker`` and ``check-config`` (``main``), each a thin shell over the layers below."""

from monitor.cli.main import main

__all__ = ["main"]
