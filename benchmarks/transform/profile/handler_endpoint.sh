#!/bin/bash
# usage: handler_endpoint.sh SRC MODEL IMAGES -> p50/p90 ms of 300 sequential /invocations (image
# bodies) to `tfbatch serve MODEL`, run from SRC (a tfbatch src folder: compare two checkouts).
# MODEL: an artifact whose code/inference.py is a single handler (e.g. the shapes bench's
# models/tiny/handler.tar.gz); IMAGES: a folder of JPEGs (e.g. jpegs-500-0/input).
SRC=$1 MODEL=$2 IMAGES=$3 READY=$(mktemp -u)
cd "$(dirname "$0")/../../.."
rm -f $READY
PYTHONPATH=$SRC .venv/bin/python -m tfbatch serve "$MODEL" --port 0 --grpc-port 0 --ready-file $READY >/dev/null 2>&1 &
pid=$!
for i in $(seq 120); do [ -s $READY ] && break; sleep 0.5; done
READY=$READY IMAGES=$IMAGES .venv/bin/python - <<'Q'
import json, time, glob, statistics, requests
import os
info = json.load(open(os.environ["READY"]))
port = info.get("port") or info.get("http_port")
url = f"http://127.0.0.1:{port}/invocations"
files = sorted(glob.glob(os.environ["IMAGES"] + "/*"))[:300]
bodies = [open(f, "rb").read() for f in files]
s = requests.Session()
for b in bodies[:20]:
    s.post(url, data=b, headers={"Content-Type": "application/x-image"})
lat = []
for b in bodies:
    t = time.perf_counter(); r = s.post(url, data=b, headers={"Content-Type": "application/x-image"}); lat.append(time.perf_counter() - t)
    assert r.status_code == 200, r.text
lat.sort()
print(f"p50 {1000*lat[len(lat)//2]:.2f} ms  p90 {1000*lat[int(len(lat)*0.9)]:.2f} ms  n={len(lat)}")
Q
kill $pid; wait $pid 2>/dev/null
