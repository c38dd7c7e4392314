#!/bin/bash
# The shape benchmark (and bf16 on MobileNetV2, where the CPU has bf16) on a lent device
# machine: 16 cores, python3 3.12, no TensorFlow there. How it gets there (64 MiB per call):
#  - here: `bash benchmarks/transform/device_prep.sh`, which does what follows: `pip download`
#    the cp312 manylinux wheels of tensorflow-cpu and of what the device image lacks (pydantic,
#    pydantic-core, pydantic-settings, python-dotenv, typing-inspection, annotated-types,
#    starlette, uvicorn, httptools, orjson, google-crc32c, pybase64, protobuf, grpcio,
#    astunparse, gast, google-pasta, termcolor, ml_dtypes, h5py, py-spy; and keras, optree,
#    namex, which the ninth session's lease lacked: without Keras the tf.data script's import
#    was as short as tfbatch's, unlike a real install) at the versions in .venv;
#    split the TensorFlow wheel into .dev16/p1..pK (tfpart0..) and .dev16/last (its last part;
#    the other wheels in last/whl, py-spy's among them; the bench models in last/models: tiny and
#    float64 unless MODELS names others, e.g. MODELS="tiny float64 mobilenet_v2-calibrated" for
#    bf16's calibrated MobileNetV2 of benchmarks.transform.bf16); .dev16 is git-excluded;
#  - device: calls 1..K carry .dev16/pK and copy its part to /tmp/parts (a carried folder does
#    not outlive the next call; /tmp on a warm machine does); the last call carries .dev16/last and runs
#    this script. Each call returns in seconds; the machine stays warm 30 s between calls.
#  - Results: $OUT/log and $OUT/res.tgz (every JSON so far, rewritten after each step, so a
#    run stopped at its limit still returns what finished). Data is made there
#    (benchmarks.transform.shape_data makes JPEGs on every core).
# Locally (a dry run of the steps): SKIP_INSTALL=1 PY=.venv/bin/python OUT=/tmp/o SCALE=0.1 bash $0
# PROCS_AB=1: first, the job with AB_FLAG (--processes 1 unless set, "" for none; "--handler-workers 0"
# runs a script's hooks in each job process) and AB_ENV (VAR=VALUE ... in its environment, e.g.
# SAGEMAKER_TFS_INTRA_OP_PARALLELISM=16) against the default, on 5,000 x SCALE JPEGs (ROUNDS
# rounds, 2 unless set; PROCS_ARCHS the model archives, under models/, to run; NO_DIFF=1 skips
# comparing the outputs: 50,000 files per model at SCALE=10). Earlier outputs are moved aside,
# not deleted: files made soon after many deletions cost more (alternate_trees.py).
# SHAPES="" runs no shape (unset: the list below).
cd "$(dirname "$0")/../.." || exit 1
D=.dev16
PY=${PY:-python3}
t0=$(date +%s)
if [ -z "$SKIP_INSTALL" ]; then
  W=/tmp/tensorflow_cpu-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl
  # the parts in their order (tfpart0, 1, ...): the first ones copied to /tmp/parts, the last carried
  cat $(for f in /tmp/parts/tfpart* $D/last/tfpart*; do echo "$(basename $f) $f"; done | sort | cut -d" " -f2) > $W || exit 1
  sha256sum -c --quiet <(sed "s#  .*#  $W#" $D/last/tf.sha256) || exit 1
  sha256sum $W
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $W $D/last/whl/*.whl 2>&1 | tail -3
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD/src:$PWD TF_CPP_MIN_LOG_LEVEL=2 PYTHONUNBUFFERED=1
echo "install done $(( $(date +%s) - t0 )) s"; nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
flags=$(grep -m1 -o -w -E 'amx_bf16|amx_tile|avx512_bf16|avx512_fp16' /proc/cpuinfo | sort -u | tr '\n' ' '); echo "bf16 flags: $flags"
$PY -c "from tfbatch.runtime.tf_import import import_tensorflow; tf=import_tensorflow(); print('tf', tf.__version__)" || exit 1
WD=${WD:-/tmp/w}; RES=/tmp/res; mkdir -p $RES $WD $OUT && cp -rn $D/last/models $WD/
save() { tar czf $OUT/res.tgz -C $RES . ; }
NOTE="${NOTE:-16-core device machine, CPU only (TensorFlow CPU wheel carried over)}"
if [ -z "$NO_BF16" ] && [ -n "$flags" ]; then
  echo "== bf16 at $(( $(date +%s) - t0 )) s"
  timeout ${PER_BF16:-150} $PY -m benchmarks.transform.bf16 --images ${BF16_IMAGES:-500} --rounds 1 --workdir $WD \
     --out $RES/bf16.json --note "$NOTE; flags: $flags" 2>&1 | grep -E "^\[|speedup|same_top1|rows|max_abs|Error|Trace" | tail -30
  save
fi
if [ -n "$PROCS_AB" ]; then
  # One worker process against the default (one per 4 cores here) on the same JPEGs, alternating:
  # whole job wall time and the job's own records/s (report.json), outputs compared. First, so
  # that a lease that runs out still answers it; makes the 5,000 x SCALE JPEGs it needs.
  echo "== processes A/B at $(( $(date +%s) - t0 )) s"
  J=$($PY -c "from pathlib import Path; from benchmarks.transform import shape_data as d; print(d.jpegs(Path('$WD'), round(5000 * ${SCALE:-1})))")
  for round in $(seq 1 ${ROUNDS:-2}); do
    for arch in ${PROCS_ARCHS:-tiny/model-noscript.tar.gz tiny/model.tar.gz tiny/handler.tar.gz float64/model-noscript.tar.gz}; do
      for P in 1 auto; do
        flag=""; pre=""; [ $P = 1 ] && flag="${AB_FLAG---processes 1}" && pre="$AB_ENV"; o=/tmp/procs-$P
        mkdir -p /tmp/aside && [ -d $o ] && mv $o /tmp/aside/procs-$P-$round-$(date +%s%N)
        s0=$(date +%s.%N)
        timeout ${PER_PROCS:-120} env $pre $PY -m tfbatch transform --model $WD/models/$arch --input $J --content-type application/x-image \
          --output $o --progress off $flag > /dev/null 2>&1
        s1=$(date +%s.%N)
        $PY -c "import json,sys; r=json.load(open('$o/_tfbatch/report.json')); print('procs', '$arch', '$flag $pre'.strip() or 'default', 'round', $round, 'wall %.2f' % ($s1-$s0), 'objects', r['succeeded'], 'processes', r.get('processes'), 'rec/s', r['records_per_second'])" | tee -a $RES/procs.txt
      done
      [ -z "$NO_DIFF" ] && [ -d /tmp/procs-1 ] && diff -rq -x _tfbatch /tmp/procs-1 /tmp/procs-auto > /dev/null && echo "procs $arch outputs agree" | tee -a $RES/procs.txt
    done
    save
  done
fi
for s in ${SHAPES-jpeg-script jpeg-float jpeg-bytes tfrecord jpeg-float-script recordio-multi csv}; do
  echo "== $s at $(( $(date +%s) - t0 )) s"
  timeout ${PER:-100} $PY -m benchmarks.transform.shapes --shapes $s --scale ${SCALE:-1} --table-scale ${SCALE:-1} --repeat 1 \
     --contenders ${CONTENDERS:-abc} --timeout ${PER_CONTENDER:-60} --workdir $WD --out $RES/$s.json --note "$NOTE" 2>&1 \
     | grep -E "^\||rror|Trace" | tail -6
  save
done
if [ -n "$PYSPY" ]; then
  # where the job's time goes on this many cores: every thread (what runs, and idle waits), then
  # only the GIL's holder (how much of the wall time one core's worth of Python is busy).
  # PYSPY_JOBS: "jpeg" (the newest JPEG set, no script) and/or "tfrecord" (the newest TFRecord
  # set, its Example-parsing script); PYSPY_FLAGS: added to each job's command (e.g.
  # "--processes 4"); PYSPY_MODES: "threads gil" unless set.
  SPY=/tmp/site/bin/py-spy; [ -x $SPY ] || SPY=$(dirname $(command -v $PY))/py-spy
  for job in ${PYSPY_JOBS:-jpeg}; do
    if [ $job = tfrecord ]; then
      J=$(ls -d $WD/tfrecord-*/input | sort -t- -k2 -n | tail -1); A=$WD/models/tiny/tfrecord.tar.gz
      args="--content-type application/x-tfexample --split-type TFRecord --batch-strategy SingleRecord --assemble-with Line"
    else
      J=$(ls -d $WD/jpegs-*/input | sort -t- -k2 -n | tail -1); A=$WD/models/tiny/model-noscript.tar.gz
      args="--content-type application/x-image"
    fi
    for mode in ${PYSPY_MODES:-threads gil}; do
      echo "== py-spy $mode, $job on $J ($PYSPY_FLAGS) at $(( $(date +%s) - t0 )) s"; rm -rf /tmp/pyspy-out
      extra="--idle"; [ $mode = gil ] && extra="--gil"
      tag=$mode; [ $job = jpeg ] || tag=$job-$mode
      timeout ${PER_PYSPY:-90} $SPY record --subprocesses --threads $extra -r 100 -f raw -o $RES/pyspy-$tag.txt -- \
        $PY -m tfbatch transform --model $A --input $J $args --output /tmp/pyspy-out $PYSPY_FLAGS 2>&1 | tail -3
      save
    done
  done
fi
echo "end $(( $(date +%s) - t0 )) s"
