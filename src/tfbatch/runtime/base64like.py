"""``base64.b64encode`` and ``base64.b64decode`` for a handler script: the standard library's
results and errors, computed by pybase64 where that gives the same answer.

A script for TF Serving's REST API base64-wraps each image (``{"b64": ...}``) in its
``input_handler`` or ``handler``. The standard library encodes a 23 KB JPEG in ~23 us, holding
the GIL the job's other threads need; pybase64 (SIMD) takes under 1 us, and decodes ~9 times
faster (``benchmarks/transform/profile/script-base64.md``).

Where the two differ, the standard library answers:

* encoding with ``altchars``, or input pybase64 refuses (a ``str``, say): the standard library,
  which gives its own result or raises its own error;
* decoding: pybase64 first in its strict form, which accepts only canonical base64 (the
  alphabet, padding at the end alone). Canonical text has one decoding, which both give. Any
  other text (newlines, characters the standard library discards, data after the padding, a
  ``str`` with non-ASCII characters, ``altchars``) goes to the standard library with the call's
  own arguments, so ``validate`` and the lenient decoding behave as they always have.
"""

from __future__ import annotations

import base64
from typing import Any

try:
    import pybase64 as _fast
except ImportError:  # pragma: no cover - a declared dependency; the standard library then
    _fast = None


def b64encode(s: Any, altchars: Any = None) -> bytes:
    """``base64.b64encode(s, altchars)``."""
    if altchars is None and _fast is not None:
        try:
            return _fast.b64encode(s)
        except Exception:  # noqa: BLE001 - the standard library's answer, or its own error
            pass
    return base64.b64encode(s, altchars)


def b64decode(s: Any, altchars: Any = None, validate: bool = False) -> bytes:
    """``base64.b64decode(s, altchars, validate)``."""
    if altchars is None and _fast is not None:
        try:
            return _fast.b64decode(s, validate=True)
        except Exception:  # noqa: BLE001 - not canonical: the standard library decides
            pass
    return base64.b64decode(s, altchars, validate)


def standard_b64encode(s: Any) -> bytes:
    """``base64.standard_b64encode(s)``."""
    return b64encode(s)


def standard_b64decode(s: Any) -> bytes:
    """``base64.standard_b64decode(s)``."""
    return b64decode(s)


LOOK_ALIKES = {"b64encode": b64encode, "b64decode": b64decode,
               "standard_b64encode": standard_b64encode, "standard_b64decode": standard_b64decode}
