"""Names a package exports but loads on first use (PEP 562 module ``__getattr__``).

``import tfbatch`` and ``tfbatch --help`` must not pay for TensorFlow, servers or the job
machinery; packages list what they export and where it lives, and this module gives them
the ``__getattr__``/``__dir__`` pair that imports a name's module only when it is asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, table: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose names are ``{name: module that defines it}``."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
