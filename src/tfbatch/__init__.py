"""tfbatch: fast TensorFlow batch inference, serving and training on image data.

``tfbatch.run_transform`` (:mod:`tfbatch.api`), ``tfbatch.Transformer`` and ``tfbatch.Model``
(SageMaker-SDK-shaped, :mod:`tfbatch.sdk`) are loaded on first use, so ``import tfbatch`` (and
with it ``tfbatch --help``) stays cheap: no TensorFlow, no servers.
"""

from __future__ import annotations

from tfbatch.lazy import lazy_names

__version__ = "0.1.0"

_LAZY = {"run_transform": "tfbatch.api", "plan_transform": "tfbatch.api",
         "Transformer": "tfbatch.sdk", "Model": "tfbatch.sdk", "LocalEndpoint": "tfbatch.sdk",
         "TransformJob": "tfbatch.sdk"}
__all__ = ["__version__", *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, _LAZY)
