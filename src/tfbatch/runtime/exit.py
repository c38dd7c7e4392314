"""Ending a tfbatch process without the interpreter's teardown of TensorFlow.

Once TensorFlow is imported, Python's own exit spends about a second of CPU (2-vCPU VM)
tearing down its thousands of modules and TensorFlow's C++ state, after every output is
durable and the report written: a sixth of a 5,000-image job's wall time
(benchmarks/transform/profile/exit.md). A Ray driver's teardown (Ray's and gRPC's modules)
is 0.15 s the same way, after the engine's own ``ray.shutdown()``. ``end`` does the part of
the exit anyone can observe -- waits for non-daemon threads, runs the ``atexit`` handlers
(logging's flush, multiprocessing's and Ray's clean-ups), flushes stdout and stderr -- and
then ``os._exit``. Without either module, or with ``TFBATCH_FULL_EXIT=1``, it is a plain
``sys.exit``. Only process entry points call it: the ``tfbatch`` command (``cli.run``) and
a handler worker process whose script imported TensorFlow (``handlers/pool_worker.py``),
whose teardown the job's close would otherwise wait for, one worker after another.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

# Modules whose teardown at exit ``end`` skips.
HEAVY_TEARDOWN = ("tensorflow", "ray")


def end(code: int) -> NoReturn:
    """End this process with ``code`` (see the module's docstring)."""
    if not any(name in sys.modules for name in HEAVY_TEARDOWN) or _full_exit():
        sys.exit(code)
    threading._shutdown()  # type: ignore[attr-defined]  # what Python's exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced streams: nothing to save
            pass
    os._exit(code)


def _full_exit() -> bool:
    from tfbatch.errors import TfbatchError
    from tfbatch.settings import Environment

    try:
        return bool(Environment.read().full_exit)
    except TfbatchError:  # a bad value was already reported when the command read it
        return True
