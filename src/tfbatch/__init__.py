"""tfbatch: fast TensorFlow batch inference, serving and training on image data.

``tfbatch.run_transform`` (:mod:`tfbatch.api`), ``tfbatch.Transformer`` and ``tfbatch.Model``
(SageMaker-SDK-shaped, :mod:`tfbatch.sdk`) are loaded on first use, so ``import tfbatch`` (and
with it ``tfbatch --help``) stays cheap: no TensorFlow, no servers.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {"run_transform": "tfbatch.api", "plan_transform": "tfbatch.api",
         "Transformer": "tfbatch.sdk", "Model": "tfbatch.sdk", "LocalEndpoint": "tfbatch.sdk",
         "TransformJob": "tfbatch.sdk"}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfbatch' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
