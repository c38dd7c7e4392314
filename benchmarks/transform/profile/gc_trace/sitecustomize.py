"""Every garbage collection of every Python process that imports ``site`` with this folder on
``PYTHONPATH``: at exit, per process, the collections and their thread CPU by generation and by
second since start.

    PYTHONPATH=benchmarks/transform/profile/gc_trace:src python -m tfbatch transform ...

A process that leaves by ``os._exit`` prints nothing; collections over 20 ms are also printed as
they happen.
"""

import atexit
import collections
import gc
import os
import sys
import time

_T0 = time.perf_counter()
_started = [0.0]
_log = []


def _on_collection(phase, info):
    if phase == "start":
        _started[0] = time.thread_time()
        return
    took = time.thread_time() - _started[0]
    at = time.perf_counter() - _T0
    _log.append((at, info["generation"], took))
    if took > 0.02:
        sys.stderr.write(f"GC pid {os.getpid()} at {at:.2f} s: gen{info['generation']} {took:.3f} s\n")


def _report():
    if not _log:
        return
    by = collections.defaultdict(lambda: [0, 0.0])
    for at, generation, took in _log:
        by[(generation, int(at))][0] += 1
        by[(generation, int(at))][1] += took
    parts = ", ".join(f"gen{g} in second {s}: {n} x {t:.3f} s" for (g, s), (n, t) in sorted(by.items()))
    sys.stderr.write(f"GC pid {os.getpid()} {' '.join(sys.argv)[:60]}: {parts}\n")


gc.callbacks.append(_on_collection)
atexit.register(_report)
