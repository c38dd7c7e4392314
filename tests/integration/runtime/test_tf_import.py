"""import_tensorflow: TensorFlow without matplotlib.pyplot, and pyplot still importable after."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
from tfbatch.runtime.tf_import import import_tensorflow
tf = import_tensorflow()
assert tf.constant(2).numpy() == 2
print("pyplot after tf:", "matplotlib.pyplot" in sys.modules)
import importlib.util
if importlib.util.find_spec("matplotlib") is not None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    print("pyplot importable:", plt.figure is not None)
"""


def test_tensorflow_imports_without_pyplot_and_pyplot_still_imports_later():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300, check=True)
    assert "pyplot after tf: False" in out.stdout
    if "pyplot importable" in out.stdout:
        assert "pyplot importable: True" in out.stdout
