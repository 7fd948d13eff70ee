"""Search-quality monitoring."""

from typing import Any

from monitor import compiled

PLAIN_PYTHON = compiled.choose()
"""Why the compiled hot path is not imported in this process, if it was chosen so here
(``monitor.compiled``); None: whatever is installed runs."""


def __getattr__(name: str) -> Any:
    """``__version__``, read from the installed distribution when first asked for (reading
    it costs ``importlib.metadata``, 20 ms of a short-lived ``searchmon eval``)."""
    if name != "__version__":
        raise AttributeError(f"module 'monitor' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("searchmon")
    except PackageNotFoundError:  # running from a source tree that is not installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
