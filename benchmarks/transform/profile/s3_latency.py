"""A jpeg-bytes job (600 images) with input and output on a moto S3 server behind a loopback
proxy that adds 20 ms to every request (DELAY_RATE=0: none). Argument: the src folder to run.

    PYTHONPATH=src python benchmarks/transform/profile/s3_latency.py src 600

Needs /tmp/big-jpegs (profile/writes.md) and the shape bench's tiny model in /tmp/bench-final."""
import os, sys, time, subprocess, glob, json
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from tfbatch.testing.fault_proxy import FaultProxy
from tfbatch.testing.s3_server import S3Server
src = sys.argv[1]; n = int(sys.argv[2]) if len(sys.argv) > 2 else 600
files = sorted(glob.glob("/tmp/big-jpegs/*"))[:n]
with S3Server() as server:
    s3 = server.client(); s3.create_bucket(Bucket="bench")
    for f in files:
        s3.put_object(Bucket="bench", Key="in/" + os.path.basename(f), Body=open(f, "rb").read())
    with FaultProxy(server.endpoint_url, delay=float(os.environ.get("DELAY_RATE", "1")), delay_s=0.02) as proxy:
        env = {**os.environ, **server.env(), "AWS_ENDPOINT_URL": proxy.endpoint_url, "PYTHONPATH": src}
        for label in ("run",):
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "tfbatch", "transform", "--model", "/tmp/bench-final/models/tiny/model-noscript.tar.gz",
                                "--input", "s3://bench/in/", "--output", f"s3://bench/out-{time.time_ns()}/", "--content-type", "application/x-image"],
                               env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            print(src, "rc", r.returncode, f"{wall:.1f} s", f"{n / wall:.0f} obj/s", dict(proxy.requests), r.stderr.strip().splitlines()[-2][:120] if r.returncode == 0 else r.stderr[-800:])
