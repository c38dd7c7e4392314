"""tfbatch: fast TensorFlow batch inference, serving and training on image data."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Names served lazily, so ``import tfbatch`` (and with it ``tfbatch --help``) stays cheap.
_LAZY = {"run_transform": "tfbatch.api", "plan_transform": "tfbatch.api"}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfbatch' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
