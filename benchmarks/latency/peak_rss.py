"""Server peak RSS (VmHWM) before and after REST calls on the 10.5 MB output: what the JSON
answer costs in memory. gRPC calls come first, so the output tensors themselves are already
in the baseline. The server's JSON helper processes (tfs/json_helpers.py) are reported too.

    PYTHONPATH=src:. python -m benchmarks.latency.peak_rss
"""

from __future__ import annotations

import re
from pathlib import Path

import psutil

from benchmarks.latency import bench


def peak_rss_mib(pid: int) -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) // 1024


def main() -> None:
    work = Path("/tmp/lat1/work")
    work.mkdir(parents=True, exist_ok=True)
    model_dir = bench.build_model("detection", work, 10.5)
    jpeg = bench.sample_jpeg(224)
    server = bench.Server(model_dir, work, [], {})
    try:
        grpc_call = bench.grpc_predict(server.grpc_port, jpeg, parse=False)()
        for _ in range(3):
            grpc_call()
        before = peak_rss_mib(server.proc.pid)
        helpers = [p.pid for p in psutil.Process(server.proc.pid).children() if "json_helpers" in " ".join(p.cmdline())]
        helpers_before = [peak_rss_mib(pid) for pid in helpers]
        rest_call = bench.rest_invocations(server.url, jpeg, parse=False)()
        for _ in range(5):
            rest_call()
        after = peak_rss_mib(server.proc.pid)
        print(f"server peak RSS after gRPC calls {before} MiB, after 5 REST calls {after} MiB (+{after - before} MiB)")
        for pid, was in zip(helpers, helpers_before):
            now = peak_rss_mib(pid)
            print(f"JSON helper {pid}: peak RSS {was} MiB before the REST calls, {now} MiB after (+{now - was} MiB)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
