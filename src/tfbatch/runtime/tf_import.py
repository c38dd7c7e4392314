"""Import TensorFlow for inference without the plotting stack Keras drags in.

``import tensorflow`` eagerly imports Keras, and Keras's visualization helpers import
``matplotlib.pyplot`` when it is installed (font tables, text layout, backends): about a
sixth of TensorFlow's import time on the 2-vCPU VM, spent by every batch job before its
first output, for plotting functions inference never calls. Keras guards that import with
``except ImportError`` (its plotting helpers then say matplotlib is missing), so hiding
pyplot for the duration of the import skips it. Afterwards pyplot imports normally for
anyone who asks, user scripts included; only Keras's own ``plot_*`` gallery helpers keep
the missing-matplotlib answer in that process.
"""

from __future__ import annotations

import sys
import threading

_lock = threading.Lock()


def import_tensorflow():
    """``tensorflow``, imported (once) without matplotlib.pyplot when nothing imported it yet."""
    with _lock:
        if "tensorflow" in sys.modules:
            return sys.modules["tensorflow"]
        hide = "matplotlib.pyplot" not in sys.modules
        if hide:
            sys.modules["matplotlib.pyplot"] = None  # makes `import matplotlib.pyplot` raise ImportError
        try:
            import tensorflow
        finally:
            if hide and sys.modules.get("matplotlib.pyplot", 0) is None:
                del sys.modules["matplotlib.pyplot"]
        return tensorflow
