"""CPU a record of splitting one object held in memory, as the dataflow hands it to the splitter.

    python -m benchmarks.transform.profile.split_cost DIR [--split-type TFRecord] [--rounds 5]

Splits the first file of DIR (a ``BytesIO`` over its bytes, as ``Dataflow._split`` does),
best of ``--rounds``. ``PYTHONPATH=/path/to/other/src`` measures another tree.
"""

from __future__ import annotations

import argparse
import io
import os
import time

from tfbatch.records.framing import iter_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--split-type", default="TFRecord")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    name = sorted(os.listdir(args.dir))[0]
    with open(os.path.join(args.dir, name), "rb") as f:
        data = f.read()
    best, records = float("inf"), 0
    for _ in range(args.rounds):
        started = time.process_time()
        records = sum(1 for _ in iter_records(io.BytesIO(data), args.split_type))
        best = min(best, time.process_time() - started)
    print(f"{name}: {len(data) / 2**20:.0f} MB, {records} records, {best / max(records, 1) * 1e6:.1f} us a record (CPU)")


if __name__ == "__main__":
    main()
