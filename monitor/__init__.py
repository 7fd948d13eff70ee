"""Search-quality monitoring."""

from typing import Any

from monitor import compiled

compiled.choose()  # plain Python where asked for, or where the compiled modules are stale


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
