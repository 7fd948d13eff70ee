"""numpy, imported where it is first used rather than where it is named.

Most of what a replay or the daemon's consumer process imports names numpy (the judged
measures, the experiments' statistics, the click models) and never computes with it unless
judgments, experiments or implicit judgments come: importing it took 40 ms of each start,
about 2% of a replay of 380,000 lines. A module writes::

    if TYPE_CHECKING:
        import numpy as np
    else:
        from monitor.lazy import numpy as np

and its type aliases of numpy types under ``TYPE_CHECKING`` (annotations are not evaluated:
``from __future__ import annotations``). The first attribute read imports numpy and copies
its names in, so later reads cost what a module's do.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class _Later(types.ModuleType):
    """A module imported on the first attribute read of it."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # introspection (``__path__``, ``__wrapped__``)
        module = importlib.import_module(self.__name__)
        self.__dict__.update(
            (key, value) for key, value in vars(module).items() if key not in self.__dict__
        )
        value = getattr(module, name)  # (numpy loads some submodules on first access)
        self.__dict__[name] = value
        return value


numpy = _Later("numpy")
