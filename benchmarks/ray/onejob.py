"""``tfbatch transform`` as one process, plus a timeline of where its start-up went.

``python -m benchmarks.ray.onejob --timeline T.json <tfbatch transform flags>`` parses the
flags with tfbatch's own parser and runs the job as ``tfbatch transform`` does (same spec,
same engine), then writes wall-clock marks to ``T.json``: when this process started, when
its imports were done, when the job started and ended, and, on the Ray engine, the driver's
and every actor's own marks (``RunTimeline.marks`` / ``actor_marks``: connected, actors
submitted, actor process started, model loaded, first key, first result, ...), and ends the
process as ``tfbatch`` does (``runtime.exit.end``).
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    import psutil

    marks = {"process_start": psutil.Process().create_time(), "main": time.time()}
    timeline_out = None
    if "--timeline" in argv:
        at = argv.index("--timeline")
        timeline_out = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    from tfbatch.api import run_transform
    from tfbatch.cli import build_parser
    from tfbatch.engines import get_engine
    from tfbatch.transform.cli import spec_from_args

    args = build_parser().parse_args(["transform", *argv])
    spec = spec_from_args(args)
    if spec.engine == "ray":
        engine = get_engine("ray", address=args.ray_address)
    else:
        engine = get_engine(spec.engine)
    marks["imported"] = time.time()
    report = run_transform(spec, engine=engine)
    marks["job_end"] = time.time()
    out = {"marks": marks, "ok": report.ok, "summary": report.summary(), "batches": report.batches}
    timeline = getattr(engine, "timeline", None)
    if timeline is not None:
        out["driver_marks"] = timeline.marks
        out["actor_marks"] = {str(k): v for k, v in timeline.actor_marks.items()}
        out["calls"] = timeline.calls
    if timeline_out:
        with open(timeline_out, "w") as handle:
            json.dump(out, handle, indent=1, default=str)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    from tfbatch.runtime.exit import end

    end(main(sys.argv[1:]))  # the exit `tfbatch` itself takes (runtime.exit.end)
