"""CPU per image of one handler-pool round trip: ``multiprocessing.connection`` vs ``handlers/wire.py``.

The hop the script lane makes, without the hooks: the parent sends ``--batch`` request bodies
(real JPEGs from the bench's dataset), the child answers each with an object array holding
the same bytes (what a decoded ``{"b64": ...}`` image is), the parent receives them and
builds the model's input (one object array). Both processes count their own CPU time
(``time.process_time``), so the figure holds on a loaded machine better than a rate does;
the best of ``--repeat`` rounds is reported.

    python -m benchmarks.transform.profile.wire_bench --images /tmp/w/dataset-2000-0/images
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from tfbatch.handlers import wire


def _child(fd: int, kind: str) -> None:
    sock = socket.socket(fileno=fd)
    conn = Connection(sock.detach()) if kind == "connection" else None
    send = conn.send if conn else (lambda obj: wire.send(sock, obj))
    recv = conn.recv if conn else (lambda: wire.recv(sock))
    cpu0 = None  # from the first message: the interpreter's start-up is not the wire's
    while True:
        try:
            message = recv()
        except EOFError:
            return
        if message is None:
            send(time.process_time() - cpu0)
            return
        if cpu0 is None:
            cpu0 = time.process_time()
        out = []
        for body in message:
            arr = np.empty(1, dtype=object)
            arr[0] = bytes(body)  # the worker's decode makes new bytes; so does this
            out.append(("tensors", {"image_bytes": arr}, "row", 1, "serving_default"))
        send(out)


def run(kind: str, bodies: list[bytes], batch: int, rounds: int) -> dict:
    parent, child = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.transform.profile.wire_bench", "--child",
                             str(child.fileno()), kind], pass_fds=(child.fileno(),))
    child.close()
    conn = Connection(parent.detach()) if kind == "connection" else None
    send = conn.send if conn else (lambda obj: wire.send(parent, obj))
    recv = conn.recv if conn else (lambda: wire.recv(parent))
    cpu0, images = time.process_time(), 0
    for _ in range(rounds):
        for start in range(0, len(bodies), batch):
            chunk = bodies[start:start + batch]
            send([pickle.PickleBuffer(b) for b in chunk] if conn is None else chunk)
            results = recv()
            joined = np.concatenate([r[1]["image_bytes"] for r in results])
            assert joined[0] == chunk[0]
            images += len(chunk)
    parent_cpu = time.process_time() - cpu0
    send(None)
    child_cpu = recv()
    proc.wait()
    return {"parent_ms_per_image": 1000 * parent_cpu / images, "child_ms_per_image": 1000 * child_cpu / images}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", help="a folder of JPEGs")
    parser.add_argument("--count", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="records per hop (the lane's batch / workers)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(int(args.child[0]), args.child[1])
        return
    files = sorted(Path(args.images).iterdir())[:args.count]
    bodies = [f.read_bytes() for f in files]
    out = {"images": len(bodies), "mean_kb": round(sum(map(len, bodies)) / len(bodies) / 1024, 1),
           "batch": args.batch, "load_average_before": os.getloadavg()}
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for kind in ("connection", "wire"):  # interleaved: load drifts equally over both
            r = run(kind, bodies, args.batch, args.rounds)
            b = best.setdefault(kind, r)
            for k in r:
                b[k] = min(b[k], r[k])
    out["best_cpu_ms_per_image"] = {k: {m: round(v, 4) for m, v in r.items()} for k, r in best.items()}
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
