"""Planner + ledger at 10M objects: memory and time of resuming a huge job, with no input files.

The listing is an in-process generator of ``--objects`` keys (what ``list_prefix`` yields,
minus the storage); the ledger is real: journals written in the format and group size a
job writes, then compacted, as a killed-and-resumed job would find them. Each phase runs
in its own child process so its peak RSS is its own:

1. ``write``: the earlier run's ledger, ``--done`` of the objects finished (not measured).
2. ``resume``: load the ledger (one listing, a few files), then the job's one pass over the
   listing (``plan.JobInputs``: instance and done check per key) cut into the chunks the
   local engine sends its workers — the driver's whole share of a resumed job.

    python -m benchmarks.scale.plan_10m --objects 10000000 --done 0.5 --instances 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from functools import partial

from tfbatch.storage import ObjectRef


SHARD = 10_000  # objects per folder


def fake_listing(n: int) -> Iterator[ObjectRef]:
    """Keys in listing order, 1,000 folders of 10,000 objects, sizes like small JPEGs.

    Key ``i`` is ``shard-{i // 10000:05d}/img-{i:09d}.jpg`` with size ``30000 + i % 1000``,
    as before; it is built a folder at a time (the folder's prefix plus one of 10,000 fixed
    tails, each ref one C call) because formatting two numbers per key cost
    more than the planner's own work on it, and a real listing gets its keys from the wire.
    """
    tails = [f"{j:04d}.jpg" for j in range(SHARD)]
    sizes = [30000 + j % 1000 for j in range(SHARD)]  # i % 1000 == j % 1000: SHARD is a multiple of 1000
    make = partial(tuple.__new__, ObjectRef)  # what ObjectRef(uri, key, size) makes, without its Python __new__
    for shard in range(-(-n // SHARD)):
        count = min(SHARD, n - shard * SHARD)
        stem = f"shard-{shard:05d}/img-{shard:05d}"
        keys = [stem + tail for tail in tails[:count]]
        yield from map(make, zip(["s3://bucket/in/" + key for key in keys], keys, sizes[:count]))


def write_ledger(output: str, n: int, done_fraction: float, group: int) -> None:
    from tfbatch.transform.ledger import Ledger

    ledger = Ledger(output, "bench", instance=0, group_size=group, interval_s=3600)
    every = max(1, round(1 / done_fraction)) if done_fraction > 0 else 0
    lines = []
    entries: list[dict] = []
    for i, ref in enumerate(fake_listing(n)):
        if every and i % every == 0:
            entries.append({"k": ref.key, "r": 1, "f": 0, "b": 1001, "w": True})
            if len(entries) == group:
                lines.append(json.dumps({"entries": entries}, separators=(",", ":")) + "\n")
                entries = []
    if entries:
        lines.append(json.dumps({"entries": entries}, separators=(",", ":")) + "\n")
    # The same bytes Ledger.flush appends, group by group, without the per-group syncfs (setup only).
    folder = ledger.folder
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{ledger.run}-j00000.jsonl"), "w") as f:
        f.writelines(lines)
    Ledger(output, "bench").compact()


def resume(output: str, n: int, instances: int) -> dict:
    from tfbatch.transform.ledger import Ledger
    from tfbatch.transform.plan import JobInputs, iter_chunks

    t0, c0 = time.monotonic(), time.process_time()
    ledger = Ledger(output, "bench")
    done = ledger.done_keys()
    len(done)  # the index is sorted on first use; count that here, not in the pass
    t1, c1 = time.monotonic(), time.process_time()
    # The job's one pass over the listing, as the local engine's feeder makes it: every key
    # assigned to its instance and checked against the ledger, and the keys still to run cut
    # into the chunks each worker is sent.
    inputs = JobInputs(fake_listing(n), instances, done)
    todo = [0] * instances
    for i, chunk in iter_chunks(inputs, instances):
        todo[i] += len(chunk)
    t2, c2 = time.monotonic(), time.process_time()
    listing_only = sum(1 for _ in fake_listing(n))  # the listing's own cost, for scale
    t3, c3 = time.monotonic(), time.process_time()
    return {
        "objects": n, "instances": instances, "done": len(done), "done_index_mb": round(done.nbytes() / 2**20, 1),
        "planned": inputs.listed, "planned_done": sum(inputs.skipped), "todo_per_instance": todo,
        "ledger_files": len(os.listdir(ledger.folder)),
        "load_ledger_s": round(t1 - t0, 2), "plan_and_stream_s": round(t2 - t1, 2),
        "total_s": round(t2 - t0, 2),
        "of_which_fake_listing_s": round(t3 - t2, 2) if listing_only == n else None,
        # CPU seconds of this process: on a shared VM, wall time also counts waiting for a core.
        "load_ledger_cpu_s": round(c1 - c0, 2), "plan_and_stream_cpu_s": round(c2 - c1, 2),
        "total_cpu_s": round(c2 - c0, 2), "of_which_fake_listing_cpu_s": round(c3 - c2, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--objects", type=int, default=10_000_000)
    p.add_argument("--done", type=float, default=0.5, help="fraction finished by the earlier run")
    p.add_argument("--instances", type=int, default=4)
    p.add_argument("--group", type=int, default=256)
    p.add_argument("--phase", choices=["all", "write", "resume"], default="all")
    p.add_argument("--output", help="ledger location (default: a temporary folder, removed after)")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args(argv)
    if args.phase == "write":
        write_ledger(args.output, args.objects, args.done, args.group)
        return 0
    if args.phase == "resume":
        print(json.dumps(resume(args.output, args.objects, args.instances)))
        return 0
    output = args.output or tempfile.mkdtemp(prefix="tfbatch-scale-")
    me = [sys.executable, "-m", "benchmarks.scale.plan_10m", "--objects", str(args.objects), "--output", output]
    try:
        t = time.monotonic()
        subprocess.run([*me, "--phase", "write", "--done", str(args.done), "--group", str(args.group)], check=True)
        write_s = time.monotonic() - t
        out = subprocess.run([*me, "--phase", "resume", "--instances", str(args.instances)], check=True,
                             capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        result["setup_write_ledger_s"] = round(write_s, 1)
        result["command"] = "python -m benchmarks.scale.plan_10m " + " ".join(argv if argv is not None else sys.argv[1:])
        result["load_average_1m"] = round(os.getloadavg()[0], 1)  # others' work on a shared machine
        result["targets"] = {"peak_rss_mb": 1024, "total_s": 60}
        result["meets_targets"] = result["peak_rss_mb"] <= 1024 and result["total_s"] <= 60
    finally:
        if not args.output:
            shutil.rmtree(output, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
