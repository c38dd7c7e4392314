"""Peak RSS of a transform job vs the number of input objects (run by hand, not by pytest).

    .venv/bin/python tests/integration/transform/rss_objects.py 1000 10000

Each count runs in a fresh process: tiny JSON objects through the linear test model.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time
from tfbatch import run_transform
t = time.monotonic()
r = run_transform(model=sys.argv[1], input=sys.argv[2], output=sys.argv[3], content_type="application/json")
print(json.dumps({"objects": r.objects, "ok": r.ok, "seconds": round(time.monotonic() - t, 1),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


def main(counts: list[int]) -> None:
    from tfbatch.testing.models import make_linear_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_linear_model(root / "model" / "1")
        for n in counts:
            inp = root / f"in{n}"
            inp.mkdir()
            for i in range(n):
                (inp / f"{i:06d}.json").write_text(json.dumps([i, 1, 2]))
            out = subprocess.run([sys.executable, "-c", CHILD, str(root / "model"), str(inp), str(root / f"out{n}")],
                                 capture_output=True, text=True, check=True)
            print(n, out.stdout.strip(), flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
