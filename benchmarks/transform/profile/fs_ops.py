"""Per-file cost of the file-system calls a many-small-files job makes, by strategy and thread
count, on whatever machine runs it (no TensorFlow needed).

    python benchmarks/transform/profile/fs_ops.py [--files 20000] [--dir /tmp/fsops] [--out x.json]

Writes: ``plain`` (open O_CREAT|O_TRUNC, write, close: what a hand-written script does),
``tmpfile`` (O_TMPFILE, write, linkat: tfbatch's atomic small write), ``rename`` (named
temporary file, write, close, rename), and tfbatch's own ``_write_small_local``. Reads:
open/read/close (``read_small``). Listing: ``os.scandir`` with and without a stat per entry.
Each at 1, 4 and 16 threads, into one folder, files of 120 bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor

PAYLOAD = b'{"predictions": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.10]]}\n' + b" " * 48
O_TMPFILE = getattr(os, "O_TMPFILE", 0)


def plain(folder, name):
    fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    os.write(fd, PAYLOAD)
    os.close(fd)


_PROC = None


def tmpfile(folder, name):
    global _PROC
    if _PROC is None:
        _PROC = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open(folder, O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666)
    os.write(fd, PAYLOAD)
    os.link(str(fd), os.path.join(folder, name), src_dir_fd=_PROC, follow_symlinks=True)
    os.close(fd)


def rename(folder, name):
    tmp = os.path.join(folder, "." + name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    os.write(fd, PAYLOAD)
    os.close(fd)
    os.replace(tmp, os.path.join(folder, name))


def tfbatch_write(folder, name):
    from tfbatch.storage import io

    io._write_small_local(folder, os.path.join(folder, name), [PAYLOAD])


def read(folder, name):
    fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_CLOEXEC)
    os.read(fd, len(PAYLOAD) + 1)
    os.close(fd)


def timed(fn, folder, names, threads):
    t = time.perf_counter()
    if threads == 1:
        for n in names:
            fn(folder, n)
    else:
        chunk = max(1, len(names) // (threads * 8))
        parts = [names[i:i + chunk] for i in range(0, len(names), chunk)]
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda p: [fn(folder, n) for n in p], parts))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--dir", default="/tmp/fsops")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--out")
    args = ap.parse_args()
    names = [f"img-{i:07d}.jpg.out" for i in range(args.files)]
    rows = []
    info = {"python": sys.version.split()[0], "uname": platform.uname()._asdict(), "cpus": os.cpu_count()}
    try:
        info["fs"] = os.popen(f"df -T {os.path.dirname(args.dir.rstrip('/')) or '/'} | tail -1").read().strip()
    except OSError:
        pass
    print(info, flush=True)
    writers = {"plain": plain, "tmpfile": tmpfile, "rename": rename}
    try:
        import tfbatch.storage.io  # noqa: F401

        writers["tfbatch"] = tfbatch_write
    except Exception as exc:  # noqa: BLE001
        print("no tfbatch:", exc)
    for threads in [int(t) for t in args.threads.split(",")]:
        for kind, fn in writers.items():
            shutil.rmtree(args.dir, ignore_errors=True)
            os.makedirs(args.dir)
            s = timed(fn, args.dir, names, threads)
            rows.append({"op": "write-" + kind, "threads": threads, "us_per_file": 1e6 * s / len(names)})
            print(rows[-1], flush=True)
        s = timed(read, args.dir, names, threads)
        rows.append({"op": "read", "threads": threads, "us_per_file": 1e6 * s / len(names)})
        print(rows[-1], flush=True)
    for stat in (False, True):
        t = time.perf_counter()
        with os.scandir(args.dir) as it:
            for e in it:
                if stat:
                    e.stat()
        rows.append({"op": "scandir" + ("+stat" if stat else ""), "threads": 1,
                     "us_per_file": 1e6 * (time.perf_counter() - t) / len(names)})
        print(rows[-1], flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
