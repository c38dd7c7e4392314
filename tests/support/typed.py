"""Compare decoded JSON values with every leaf's type kept: ``1``, ``1.0`` and ``True`` are equal
in Python, and an integer and its nearest float can be too, but a reader that returns one
where another returns the other has read the body differently."""

from __future__ import annotations

from typing import Any


def typed(value: Any) -> Any:
    """``value`` with every leaf tagged by its type: 1 and 1.0, or an int and its nearest float, differ."""
    if isinstance(value, list):
        return [typed(v) for v in value]
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    return type(value).__name__, repr(value)
