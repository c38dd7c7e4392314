"""CPU a record of splitting one object and forming its payloads, with the records kept.

    python -m benchmarks.transform.profile.record_copies FILE TFRecord|RecordIO|Line [SingleRecord|MultiRecord]

Reads FILE afresh each round (as the dataflow reads an object) and keeps every payload until
the round ends (as the dataflow keeps an object's payloads until its outputs are written), so
each record's copies land in memory the process has not touched: the page faults a job pays.
``split_cost.py`` reuses one buffer and drops records as it goes, so it sees none of them.
Median of 5 rounds (a round may reuse memory an earlier one freed, and skip the faults). ``PYTHONPATH=/path/to/other/src`` measures another tree.
"""

from __future__ import annotations

import io
import resource
import sys
import time

from tfbatch.records.framing import iter_records
from tfbatch.records.payloads import form_payloads


def main() -> None:
    path, kind = sys.argv[1], sys.argv[2]
    strategy = sys.argv[3] if len(sys.argv) > 3 else "SingleRecord"
    rounds = []
    for _ in range(5):
        with open(path, "rb") as f:
            data = f.read()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.process_time()
        payloads = list(form_payloads(iter_records(io.BytesIO(data), kind, source=path), strategy, 1 << 20))
        spent = time.process_time() - started
        n = sum(len(p.records) for p in payloads)
        rounds.append((spent, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before))
        del payloads, data
    spent, faults = sorted(rounds)[len(rounds) // 2]
    print(f"{kind} {strategy}: {n} records, {spent / n * 1e6:.2f} us a record (CPU), {faults / n:.1f} page faults "
          f"a record (median of {len(rounds)}; all: {', '.join(f'{s / n * 1e6:.1f}' for s, _ in rounds)})")


if __name__ == "__main__":
    main()
