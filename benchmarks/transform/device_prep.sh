#!/bin/bash
# Here, before a lease: what device_shapes.sh needs on the lent machine, in parts of < 64 MiB
# (what one call carries). Wheels are cp312 manylinux builds (the device's python3 is 3.12) at
# the versions in .venv; TensorFlow's CPU wheel is split across .dev16/p1..p4 and p5, the rest
# go in .dev16/p5/whl, the bench models in .dev16/p5/models. .dev16 is git-excluded.
#   bash benchmarks/transform/device_prep.sh [WORKDIR-with-models]
cd "$(dirname "$0")/../.." || exit 1
D=.dev16; W=${1:-/tmp/probe/w}
grep -qx '/.dev16/' .git/info/exclude 2>/dev/null || echo '/.dev16/' >> .git/info/exclude
rm -rf $D && mkdir -p $D/p1 $D/p2 $D/p3 $D/p4 $D/p5/whl $D/tf || exit 1
ver() { .venv/bin/pip show "$1" 2>/dev/null | awk '/^Version/{print $2}'; }
get() {  # NAME==VERSION... into $1
  local to=$1; shift
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$to" "$@"
}
get $D/tf "tensorflow-cpu==$(ver tensorflow-cpu)" || exit 1
pkgs=""
for p in pydantic pydantic-core pydantic-settings python-dotenv typing-inspection annotated-types \
         starlette uvicorn httptools orjson google-crc32c pybase64 protobuf astunparse gast \
         google-pasta termcolor ml_dtypes keras optree namex py-spy; do
  pkgs="$pkgs $p==$(ver $p)"
done
get $D/p5/whl $pkgs || exit 1
# 57 MB a part: with the tracked tree (~7 MB) each call stays under 64 MiB, and so does p5
# (the last part, the other wheels and the models). grpcio and h5py are not carried: the
# device image has both, and they took p5 over the limit.
(cd $D/tf && split -b 57000000 -d -a 1 *.whl tfpart) || exit 1
for k in 0 1 2 3; do mv $D/tf/tfpart$k $D/p$((k + 1))/; done
mv $D/tf/tfpart4 $D/p5/ && ls $D/tf/tfpart5 2>/dev/null && { echo "wheel needs a sixth part"; exit 1; }
sha256sum $D/tf/*.whl | tee $D/p5/tf.sha256
mkdir -p $D/p5/models && for m in "$W"/models/*; do [ "$(basename $m)" = cifar ] || cp -r "$m" $D/p5/models/; done
rm -rf $D/tf
du -sh $D/p*
