"""In-process TensorFlow SavedModel execution with TF Serving's semantics.

TensorFlow is imported lazily (on first model load), and so are this package's names: a
module that needs one of its light parts (``tfbatch.runtime.jsonenc`` in a handler worker
process) does not pay for the model server and its settings (pydantic) on import.
"""

from __future__ import annotations

from tfbatch.lazy import lazy_names

_LAZY = {"ModelServer": "tfbatch.runtime.model_server", "Servable": "tfbatch.runtime.servable",
         "RuntimeSettings": "tfbatch.runtime.settings", "SignatureInfo": "tfbatch.runtime.signature",
         "TensorInfo": "tfbatch.runtime.signature", "configure_threads": "tfbatch.runtime.threads"}
__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
