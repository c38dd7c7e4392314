"""NumPy's OpenBLAS threads in tfbatch's processes. Imports nothing: it is read before NumPy is.
"""

from __future__ import annotations

# Variables OpenBLAS (NumPy's BLAS) reads for its thread count, in its order.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread(env) -> dict[str, str]:
    """The entries that start NumPy's OpenBLAS with no thread of its own in a process of this
    environment, or none where ``env`` already says how many it gets.

    OpenBLAS starts a thread per further core when NumPy is imported, and each spins on its core
    for a while before it sleeps: ~0.1 s of CPU a process on the 2-core VM (``python -c "import
    numpy, time; time.sleep(1)"``: 0.15-0.19 s of user CPU, 0.06 s with one thread), taken at
    the job's start, while TensorFlow's import and the model's load want the cores. tfbatch
    calls no BLAS routine; a script's matrix product in a handler worker process runs on that
    process's one core (its job runs one such process per core)."""
    if any(name in env for name in BLAS_THREAD_VARS):
        return {}
    return {"OPENBLAS_NUM_THREADS": "1"}
