"""Run ``tfbatch`` in this process and print its wall time and the CPU of this process and of
its children (handler worker processes) at exit: the split of a job's CPU that runs.md quotes.

    python -m benchmarks.transform.profile.cpu_split transform --model M --input I --output O ...

``SWI=<seconds>`` sets ``sys.setswitchinterval`` first (tried in the thirtieth session: no effect).
"""

from __future__ import annotations

import atexit
import os
import resource
import runpy
import sys
import time

_t0 = time.perf_counter()


def _report() -> None:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"wall {time.perf_counter() - _t0:.2f} parent cpu {s.ru_utime + s.ru_stime:.2f} (sys {s.ru_stime:.2f}) "
          f"children cpu {c.ru_utime + c.ru_stime:.2f} (sys {c.ru_stime:.2f})", file=sys.stderr)


if __name__ == "__main__":
    if os.environ.get("SWI"):
        sys.setswitchinterval(float(os.environ["SWI"]))
    atexit.register(_report)
    sys.argv = ["tfbatch", *sys.argv[1:]]
    runpy.run_module("tfbatch", run_name="__main__")
