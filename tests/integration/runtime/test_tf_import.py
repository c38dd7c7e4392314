"""import_tensorflow: TensorFlow without matplotlib.pyplot, and pyplot still importable after."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


REFUSED_CHECK = """
import importlib.util, sys
from tfbatch.runtime.tf_import import REFUSED, import_tensorflow
before = sys.argv[1:]
for name in before:
    __import__(name)
tf = import_tensorflow()
installed = [n for n in REFUSED if importlib.util.find_spec(n) is not None]
print("installed:", sorted(installed))
print("loaded with tf:", sorted(n for n in installed if n in sys.modules))
from tensorflow.python.keras.engine import training_arrays_v1
print("legacy keras has issparse:", training_arrays_v1.issparse is not None)
for name in installed:
    __import__(name)  # each imports normally once TensorFlow is in
if "scipy" in installed:
    import scipy.sparse
    print("scipy usable after:", scipy.sparse.issparse(scipy.sparse.eye(2)))
"""


def test_scipy_and_h5py_wait_for_first_use_unless_imported_before():
    import importlib.util

    if importlib.util.find_spec("scipy") is None:
        pytest.skip("scipy is not installed here: nothing to refuse")
    run = lambda *before: subprocess.run([sys.executable, "-c", REFUSED_CHECK, *before], capture_output=True,  # noqa: E731
                                         text=True, timeout=300, check=True).stdout
    out = run()
    assert "loaded with tf: []" in out and "legacy keras has issparse: False" in out
    assert "scipy usable after: True" in out
    # Imported before TensorFlow: TensorFlow's own import finds it, as without tfbatch.
    out = run("scipy.sparse")
    assert "loaded with tf: ['scipy']" in out and "legacy keras has issparse: True" in out


GC_CHECK = """
import gc, sys
if sys.argv[1] == "off":
    gc.disable()
from tfbatch.runtime.tf_import import import_tensorflow
import_tensorflow()
print("collector after:", gc.isenabled())
"""


@pytest.mark.parametrize("before", ["on", "off"])
def test_the_collector_paused_for_the_import_is_as_the_caller_left_it(before):
    out = subprocess.run([sys.executable, "-c", GC_CHECK, before], capture_output=True, text=True, timeout=300,
                         check=True).stdout
    assert f"collector after: {before == 'on'}" in out
