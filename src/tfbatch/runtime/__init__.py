"""In-process TensorFlow SavedModel execution with TF Serving's semantics.

TensorFlow is imported lazily (on first model load), so importing this package is cheap.
"""

from tfbatch.runtime.model_server import ModelServer
from tfbatch.runtime.servable import Servable
from tfbatch.runtime.settings import RuntimeSettings
from tfbatch.runtime.signature import SignatureInfo, TensorInfo
from tfbatch.runtime.threads import configure_threads

__all__ = [
    "RuntimeSettings",
    "configure_threads",
    "TensorInfo",
    "SignatureInfo",
    "Servable",
    "ModelServer",
]
