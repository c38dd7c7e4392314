"""Slow-client load (issue 12): do 200 clients dribbling their headers hurt 64 normal ones?

A real ``tfbatch serve`` on loopback with a small model. First the normal clients alone (each
of ``--normal`` threads sends ``--per-client`` requests on its own keep-alive session), then
the same with ``--slow`` extra connections that send a request's headers one byte every
``--byte-interval`` seconds and never finish. Reports the normal clients' P50/P99 in both
runs, their ratio (goal: P99 within 2x), errors, and how many slow connections the server
closed (its ``--header-timeout``). Ratios are within one run on one machine: compare them,
not the milliseconds, across machines.

    PYTHONPATH=$PWD/src python -m benchmarks.latency.slow_clients --out benchmarks/latency
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.latency.bench import Server

X = {"instances": [[1.0, 2.0, 3.0]]}


def _normal_latencies(url: str, clients: int, per_client: int) -> tuple[list[float], int]:
    import requests

    errors = 0
    lock = threading.Lock()

    def client() -> list[float]:
        nonlocal errors
        out = []
        with requests.Session() as session:
            for _ in range(per_client):
                t = time.perf_counter()
                r = session.post(f"{url}/invocations", json=X, timeout=120)
                out.append(time.perf_counter() - t)
                if r.status_code != 200:
                    with lock:
                        errors += 1
        return out

    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda _: client(), range(clients)))
    return [x for r in results for x in r], errors


class SlowClients:
    """``n`` connections, one driver thread sending each of them one header byte per interval."""

    REQUEST = b"POST /invocations HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100_000

    def __init__(self, port: int, n: int, interval: float):
        self.socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        for s in self.socks:
            s.setblocking(False)
        self.interval = interval
        self.closed_by_server = 0
        self.stop = threading.Event()
        self.all_closed = threading.Event()
        self.thread = threading.Thread(target=self._drive, daemon=True)
        self.thread.start()

    def _drive(self) -> None:
        i = 0
        live = list(self.socks)
        while live and not self.stop.is_set():
            still = []
            for s in live:
                try:
                    if s.recv(1) == b"":
                        self.closed_by_server += 1
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed_by_server += 1
                    continue
                try:
                    s.send(self.REQUEST[i % len(self.REQUEST): i % len(self.REQUEST) + 1])
                    still.append(s)
                except OSError:
                    self.closed_by_server += 1
            live = still
            i += 1
            self.stop.wait(self.interval)
        if not live:
            self.all_closed.set()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def _model(workdir: Path) -> Path:
    from tfbatch.testing import models

    root = workdir / "linear"
    models.make_linear_model(root / "1")
    return root


def _summary(latencies: list[float]) -> dict[str, float]:
    ms = np.array(latencies) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "n": len(ms)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--slow", type=int, default=200)
    p.add_argument("--normal", type=int, default=64)
    p.add_argument("--per-client", type=int, default=20)
    p.add_argument("--byte-interval", type=float, default=0.5)
    p.add_argument("--header-timeout", type=float, default=5.0)
    p.add_argument("--out", help="folder for slow_clients.json")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server = Server(_model(workdir), workdir, ["--header-timeout", str(args.header_timeout)], {})
        try:
            _normal_latencies(server.url, args.normal, 3)  # warm-up: connections, threads, the model
            alone, errors_alone = _normal_latencies(server.url, args.normal, args.per_client)
            port = int(server.url.rsplit(":", 1)[1])
            slow = SlowClients(port, args.slow, args.byte_interval)
            loaded, errors_loaded = _normal_latencies(server.url, args.normal, args.per_client)
            # The server must close every dribbling connection on its own (header timeout).
            slow.all_closed.wait(args.header_timeout + 30)
            slow.close()
            alive = server.proc.poll() is None
        finally:
            server.stop()
    result = {
        "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs",
        "slow_clients": args.slow, "normal_clients": args.normal, "per_client": args.per_client,
        "unloaded": _summary(alone), "with_slow_clients": _summary(loaded),
        "errors": errors_alone + errors_loaded, "slow_closed_by_server": slow.closed_by_server,
        "server_alive": alive,
    }
    result["p99_ratio"] = result["with_slow_clients"]["p99_ms"] / result["unloaded"]["p99_ms"]
    result["p50_ratio"] = result["with_slow_clients"]["p50_ms"] / result["unloaded"]["p50_ms"]
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out, "slow_clients.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0 if alive and result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
