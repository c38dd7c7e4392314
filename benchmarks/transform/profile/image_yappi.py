"""Per-record CPU of tfbatch's Python threads by stage, from a yappi profile (CPU clock).

py-spy's thread time counts a thread blocked in a system call or waiting for the GIL as
busy, and its --gil mode charges GIL-free stretches (TensorFlow running) to the last holder;
yappi's per-thread CPU clock has neither problem, at the price of slowing Python code (so
absolute figures are inflated; compare runs of this same tool). TensorFlow's own C++ pools
are not Python threads and are not in these figures. yappi is not a project dependency:

    pip install --target /tmp/yappi yappi
    PYTHONPATH=/tmp/yappi:src python benchmarks/transform/profile/image_yappi.py run OUT.pstat \
        --model M --input DIR --content-type application/x-image --output OUT --max-batch-size 64
    python benchmarks/transform/profile/image_yappi.py table OUT.pstat 5000

The table lists cumulative CPU of each stage's entry function, nested stages indented.
"""
import pstats
import sys
import time


def run(out: str, args: list[str]) -> None:
    import tensorflow  # noqa: F401 - imported before profiling: start-up is not the subject
    import yappi

    from tfbatch.cli import main
    yappi.set_clock_type("cpu")
    yappi.start(builtins=True, profile_threads=True)
    started = time.process_time()
    try:
        main(["transform", *args])
    except SystemExit:
        pass
    yappi.stop()
    print("process cpu", time.process_time() - started)
    yappi.get_func_stats().save(out, type="pstat")


if sys.argv[1] == "run":
    run(sys.argv[2], sys.argv[3:])
    sys.exit(0)
p = pstats.Stats(sys.argv[2]); recs = int(sys.argv[3])
want = [
 ("listing (walk, plan)", "dataflow.py", "Dataflow._chunks"),
 ("read objects", "dataflow.py", "Dataflow._read"),
 ("  thread pool submits", "thread.py", "ThreadPoolExecutor.submit"),
 ("split records, payloads", "dataflow.py", "Dataflow._split"),
 ("predict hop (decode + model + encode)", "predict.py", "ImageBatchPredict.invoke_many"),
 ("  header checks", "images.py", "check_image"),
 ("  image decode (imagedecode)", "imagedecode.py", "ImageDecoder.decode"),
 ("  model call (run_prepared)", "servable.py", "Servable.run_prepared"),
 ("  per-row encode", "predict.py", "<listcomp>"),
 ("  row_bodies (batch encode)", "predict.py", "row_bodies"),
 ("assemble, write, record (pipeline.complete)", "pipeline.py", "ObjectPipeline.complete"),
 ("  atomic write", "io.py", "atomic_write"),
 ("    os.open (create temp)", "io.py", "_create_temp"),
 ("  ledger.record", "ledger.py", "Ledger.record"),
 ("progress + summary (finished)", "instance.py", "finished"),
 ("ledger group commit (syncfs, journal)", "ledger.py", "Ledger.flush"),
]
idx = {}
for (f, l, n), (cc, nc, tt, ct, callers) in p.stats.items():
    idx.setdefault((f.split("/")[-1], n), []).append(ct)
tot = sum(tt for (cc, nc, tt, ct, callers) in p.stats.values())
print(f"| stage | CPU ms/record (yappi) |\n|---|---:|")
for label, f, n in want:
    v = idx.get((f, n))
    if v: print(f"| {label} | {1000*max(v)/recs:.3f} |")
print(f"| **all Python-profiled CPU (incl. start-up)** | {1000*tot/recs:.3f} |")
