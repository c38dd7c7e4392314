"""Real components for tests: tiny models, an S3-API server, a local Ray cluster, and
:class:`LocalModel` for unit-testing a user's inference.py (see also :mod:`tfbatch.pytest_plugin`).

Imported lazily: ``import tfbatch.testing`` loads no TensorFlow.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HandlerResult", "LocalModel"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tfbatch.testing import handlers

        return getattr(handlers, name)
    raise AttributeError(f"module 'tfbatch.testing' has no attribute '{name}'")
