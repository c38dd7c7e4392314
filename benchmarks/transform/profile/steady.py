"""CPU per image by process and thread in a running job's steady state, and how busy the cores are.

Starts a ``tfbatch transform`` command, waits until it has written ``--from`` outputs (start-up
and the first batches are over), then, until ``--to`` outputs exist, reads ``/proc`` for
every process of the job's tree (per thread: utime + stime) and ``/proc/stat`` for the
machine. So the figures cover the steady window only, which py-spy's whole-run counts
cannot separate. With ``--py-spy FILE`` it also records that window (``py-spy record
--pid --subprocesses --threads -f raw``; sampling costs CPU, so take the CPU figures from a
run without it) for ``script_phases``-style phase shares.

    python -m benchmarks.transform.profile.steady --output /tmp/o --from 400 --to 1600 \
        [--py-spy /tmp/win.txt --rate 100] -- python -m tfbatch transform ... --output /tmp/o

Output (JSON on stdout): images/s in the window; CPU ms/image per process (job process,
each handler worker) and its busiest threads; the machine's cores busy (all processes,
so other sessions' load shows as ``other``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def _tree(root: int) -> list[int]:
    todo, seen = [root], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += _children(pid)
    return seen


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _threads(pid: int) -> dict[str, float]:
    """{thread name#tid: CPU seconds (user + system)} of one process."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[f"{name}#{tid}"] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def _machine() -> tuple[float, float]:
    """(busy, total) jiffies over all cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, sum(fields[:8])


def _spy_thread_names(path: str) -> dict[str, str]:
    """{tid: Python thread name} from py-spy's raw output ("thread (TID): NAME" frames)."""
    names: dict[str, str] = {}
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return names
    for tid, name in re.findall(r";thread \((\d+)\): ([^;]+);", text):
        names[tid] = re.sub(r"[_-]?\d+$", "", name)  # script-lane_0 and script-lane_1 are one group
    return names


def _count(folder: Path) -> int:
    try:
        return sum(1 for name in os.listdir(folder) if name.endswith(".out"))
    except OSError:
        return 0


def _snapshot(root: int) -> dict[int, tuple[str, dict[str, float]]]:
    return {pid: (_cmd(pid), _threads(pid)) for pid in _tree(root)}


def _role(cmd: str) -> str:
    if "pool_worker" in cmd:
        return "handler worker"
    if "tfbatch transform" in cmd or "-m tfbatch" in cmd:
        return "job process"
    return "other child"


def measure(args: argparse.Namespace) -> dict:
    folder = Path(args.output)
    proc = subprocess.Popen(args.command, stdout=sys.stderr)  # stdout is this tool's JSON
    try:
        while _count(folder) < args.start:
            if proc.poll() is not None:
                raise SystemExit(f"job ended before {args.start} outputs (exit {proc.returncode})")
            time.sleep(0.02)
        spy = None
        if args.py_spy:
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(proc.pid), "--subprocesses", "--threads",
                                    "-r", str(args.rate), "-f", "raw", "-o", args.py_spy, *(["--gil"] if args.gil else [])],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0, n0, m0, s0 = time.monotonic(), _count(folder), _machine(), _snapshot(proc.pid)
        while _count(folder) < args.end and proc.poll() is None:
            time.sleep(0.02)
        t1, n1, m1, s1 = time.monotonic(), _count(folder), _machine(), _snapshot(proc.pid)
        if spy is not None:
            spy.send_signal(2)  # py-spy writes its file on SIGINT
            spy.wait(60)
    finally:
        proc.wait()
    images, wall = n1 - n0, t1 - t0
    names = _spy_thread_names(args.py_spy) if args.py_spy else {}
    processes = []
    job_cpu = 0.0
    for pid, (cmd, after) in s1.items():
        before = s0.get(pid, (cmd, {}))[1]
        threads = {t: after[t] - before.get(t, 0.0) for t in after}
        cpu = sum(threads.values())
        job_cpu += cpu
        groups: dict[str, float] = defaultdict(float)
        for t, sec in threads.items():
            name, tid = t.split("#")
            groups[names.get(tid, name)] += sec
        processes.append({
            "pid": pid, "role": _role(cmd), "cores_busy": round(cpu / wall, 2),
            "cpu_ms_per_image": round(1000 * cpu / max(images, 1), 3),
            "threads_ms_per_image": {name: round(1000 * sec / max(images, 1), 3)
                                     for name, sec in sorted(groups.items(), key=lambda kv: -kv[1]) if sec > 0},
        })
    cores = os.cpu_count() or 1
    busy = (m1[0] - m0[0]) / TICK
    return {
        "command": " ".join(args.command), "window_outputs": [n0, n1], "images": images,
        "seconds": round(wall, 2), "images_per_s": round(images / wall, 1),
        "job_cpu_ms_per_image": round(1000 * job_cpu / max(images, 1), 3),
        "job_cores_busy": round(job_cpu / wall, 2),
        "machine": {"cores": cores, "cores_busy_all_processes": round(busy / wall, 2),
                    "cores_busy_other_sessions": round(busy / wall - job_cpu / wall, 2),
                    "load_average": os.getloadavg()},
        "processes": sorted(processes, key=lambda p: (p["role"] != "job process", p["pid"])),
        "py_spy": args.py_spy,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="the job's output folder (counts *.out files)")
    parser.add_argument("--from", dest="start", type=int, default=400)
    parser.add_argument("--to", dest="end", type=int, default=1600)
    parser.add_argument("--py-spy", default=None, help="also record the window with py-spy into this file")
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--gil", action="store_true", help="py-spy samples only the thread holding the GIL")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    print(json.dumps(measure(args), indent=1))


if __name__ == "__main__":
    sys.exit(main())
