"""Kernel CPU per output file for three ways of writing many small files (profile/writes.md).

    BASE=/some/ext4/folder python benchmarks/transform/profile/write_loop.py MODE THREADS dirty|clean

MODE: ``direct`` (open the target, write, close: what a tf.data script does), ``temprename``
(a named temporary file renamed onto the target), ``tmpfile`` (an unnamed ``O_TMPFILE`` file
linked to its name: what tfbatch does now). ``dirty`` first creates and deletes 20,000 files
in BASE, to show what creations soon after mass deletions cost on that filesystem.
"""
import os
import resource
import shutil
import sys
import threading
import time

N = 20000
BASE = os.environ.get("BASE", "/tmp/write-loop")
DATA = b'{"predictions": [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.10]]}'
PROC = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)


def direct(d: str, i: int) -> None:
    fd = os.open(f"{d}/f{i}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    os.write(fd, DATA)
    os.close(fd)


def temprename(d: str, i: int) -> None:
    tmp = f"{d}/.tfb-{i:016x}-abcdefabcdef.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    os.write(fd, DATA)
    os.close(fd)
    os.replace(tmp, f"{d}/f{i}.out")


def tmpfile(d: str, i: int) -> None:
    fd = os.open(d, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666)
    os.write(fd, DATA)
    os.link(str(fd), f"{d}/f{i}.out", src_dir_fd=PROC, follow_symlinks=True)
    os.close(fd)


def main() -> None:
    mode, threads, state = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    fn = {"direct": direct, "temprename": temprename, "tmpfile": tmpfile}[mode]
    if state == "dirty":
        pre = os.path.join(BASE, "pre")
        os.makedirs(pre, exist_ok=True)
        for i in range(N):
            direct(pre, i)
        shutil.rmtree(pre)
    out = os.path.join(BASE, "out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()

    def work(k: int) -> None:
        for i in range(k, N, threads):
            fn(out, i)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    print(f"{mode:10s} threads={threads} {state:5s} wall {wall / N * 1e6:6.1f} us/file  "
          f"user {(r1.ru_utime - r0.ru_utime) / N * 1e6:6.1f}  sys {(r1.ru_stime - r0.ru_stime) / N * 1e6:6.1f} us/file")


if __name__ == "__main__":
    main()
