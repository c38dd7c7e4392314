#!/bin/bash
# The shape benchmark on a lent device machine (16 cores; no TensorFlow there). How the sixth
# session ran it (profile/pool-growth.md), for the next session that is lent one:
#  - here: `pip download` the cp312 manylinux wheels of tensorflow-cpu and of what the device
#    image lacks (pydantic, pydantic-core, pydantic-settings, python-dotenv, typing-inspection,
#    annotated-types, starlette, uvicorn, httptools, orjson, google-crc32c, pybase64, protobuf,
#    grpcio, astunparse, gast, google-pasta, termcolor, ml_dtypes) at the versions in .venv;
#    `split -b 58M` the TensorFlow wheel into .dev16/p1..p4 (tfpart0-3) and .dev16/p5 (tfpart4,
#    the other wheels in p5/whl, /tmp/bench-final/models in p5/models, this script); exclude .dev16;
#  - device: calls 1-4 carry .dev16/pK and copy its part to /tmp/parts (a carried folder does
#    not outlive the next call; /tmp on a warm machine does); call 5 carries .dev16/p5 and runs
#    this script. Each call returns in seconds; the machine stays warm 30 s between calls.
#  - Data: 2,000 JPEGs (SCALE=0.4) were generated and run by all three contenders in one 82 s
#    call; 10,000 (--scale 2) took over 170 s to generate there, which spent the first try.
cd "$(dirname "$0")/../.." || exit 1
D=.dev16
t0=$(date +%s)
W=/tmp/tensorflow_cpu-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl
cat /tmp/parts/tfpart0 /tmp/parts/tfpart1 /tmp/parts/tfpart2 /tmp/parts/tfpart3 $D/p5/tfpart4 > $W || exit 1
ls -la $W; sha256sum $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W $D/p5/whl/*.whl 2>&1 | tail -3
export PYTHONPATH=/tmp/site:$PWD/src TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1
echo "install done $(( $(date +%s) - t0 )) s"; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
python3 -c "import numpy, google.protobuf, grpc; print(numpy.__version__, google.protobuf.__version__, grpc.__version__)"
python3 -c "from tfbatch.runtime.tf_import import import_tensorflow; tf=import_tensorflow(); print('tf', tf.__version__)" || exit 1
mkdir -p /tmp/res /tmp/w && cp -r $D/p5/models /tmp/w/models
for s in ${SHAPES:-jpeg-script jpeg-bytes tfrecord jpeg-float recordio-multi csv}; do
  echo "== $s at $(( $(date +%s) - t0 )) s"
  timeout ${PER:-170} python3 -m benchmarks.transform.shapes --shapes $s --scale ${SCALE:-0.4} --repeat 1 --timeout 120 \
     --workdir /tmp/w --out /tmp/res/$s.json --note "16-core device machine (H100 host, CPU only: TensorFlow CPU wheel)" 2>&1 | grep -E "^\[|rror|Trace" | tail -8
  cp /tmp/res/$s.json $OUT/ 2>/dev/null
done
echo "end $(( $(date +%s) - t0 )) s"
