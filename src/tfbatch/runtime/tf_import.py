"""Import TensorFlow for inference without the Keras import it does not need.

``import tensorflow`` ends with an eager ``import keras.src.optimizers`` (so that Keras 2
optimizers registered themselves for SavedModel loading). Importing any ``keras``
submodule runs ``keras/__init__.py``, which imports the whole Keras 3 API and with it
scikit-learn, pandas and matplotlib when they are installed: about half of TensorFlow's
import time on the 2-vCPU VM (benchmarks/transform/startup.md), paid by every batch job
before its first output. Keras 3 registers nothing with TensorFlow's SavedModel registry,
so ``tf.saved_model.load`` does not need it, and TensorFlow guards that import with
``except ImportError``. So while TensorFlow imports, loading ``keras`` raises ImportError;
afterwards it imports normally for anyone who asks (``tf.keras`` is a lazy attribute,
user scripts may ``import keras``). ``matplotlib.pyplot`` is hidden the same way in case
Keras was imported already, and scipy and h5py, which only TensorFlow's legacy Keras copy
imports (``REFUSED``), are refused the same way: they too import normally afterwards.

``TFBATCH_EAGER_KERAS=1`` turns this off (TensorFlow then imports Keras as it always does).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading

from tfbatch.settings import Environment

_lock = threading.Lock()
# Not imported while TensorFlow imports (each only where nothing imported it before). keras:
# above. scipy and h5py: TensorFlow's legacy ``tensorflow.python.keras`` (which its feature
# columns import) imports ``scipy.sparse`` for Keras 1-style training on sparse arrays and
# h5py for legacy .h5 model files, each under ``except ImportError``; neither is used to load
# or run a SavedModel, and together they were a tenth of the import (profile/tf-import.md).
REFUSED = ("keras", "scipy", "h5py")


class _RefuseWhileImporting(importlib.abc.MetaPathFinder):
    """Finds ``keras`` where it is (TensorFlow reads its folder) but refuses to run it."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None:
            spec.loader = _Refuse(fullname)
        return spec


class _Refuse(importlib.abc.Loader):
    def __init__(self, name: str):
        self.name = name

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError(f"{self.name} is not imported while tfbatch imports TensorFlow; it loads on first use")


def import_tensorflow():
    """``tensorflow``, imported (once) without Keras, scipy, h5py and matplotlib.pyplot when
    nothing imported them yet."""
    with _lock:
        if "tensorflow" in sys.modules:
            return sys.modules["tensorflow"]
        hide = "matplotlib.pyplot" not in sys.modules
        if hide:
            sys.modules["matplotlib.pyplot"] = None  # makes `import matplotlib.pyplot` raise ImportError
        finder = None
        refused = tuple(name for name in REFUSED if name not in sys.modules)
        if refused and not Environment.read().eager_keras:
            finder = _RefuseWhileImporting(refused)
            sys.meta_path.insert(0, finder)
        # The cyclic collector paused for the import: TensorFlow's import creates a few hundred
        # thousand long-lived objects, and each collection it triggers walks all of those made
        # so far (more in a Ray actor, whose heap already holds Ray's). In a fresh actor the
        # import took 2.17-2.34 s of CPU with it, 1.79-1.88 s without; in a plain process
        # 1.80-2.05 vs 1.58-1.60 s (benchmarks/ray/actor_tf_import.py; benchmarks/ray/README.md).
        import gc

        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            import tensorflow
        finally:
            if paused:
                gc.enable()
            if finder is not None:
                sys.meta_path.remove(finder)
            if hide and sys.modules.get("matplotlib.pyplot", 0) is None:
                del sys.modules["matplotlib.pyplot"]
        return tensorflow
