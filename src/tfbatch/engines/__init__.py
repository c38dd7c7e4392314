"""Where a transform job's instances run: ``local`` (processes here) or ``ray`` (actors on a Ray cluster).

Both implement ``tfbatch.transform.Engine``; each is a value holding its own options.
"""

from __future__ import annotations

from typing import Any

from tfbatch.errors import ConfigError
from tfbatch.transform.engine import Engine

def get_engine(name: str, **options: Any) -> Engine:
    """The engine called ``name``. Options that are None are not given: for ``ray`` they fall
    back to the ``TFBATCH_RAY_*`` environment, then to RayOptions' defaults."""
    given = {k: v for k, v in options.items() if v is not None}
    if name == "local":
        from tfbatch.engines.local import LocalEngine

        if given:
            raise ConfigError(f"engine 'local' takes no options, got {', '.join(sorted(given))}")
        return LocalEngine()
    if name == "ray":
        from tfbatch.engines.ray import RayEngine, RayOptions

        return RayEngine(RayOptions.from_env(**given))
    raise ConfigError(f"unknown engine {name!r}: expected 'local' or 'ray'")
