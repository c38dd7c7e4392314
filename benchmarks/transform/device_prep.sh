#!/bin/bash
# Here, before a lease: what device_shapes.sh needs on the lent machine, in parts of < 64 MiB
# (what one call carries). Wheels are cp312 manylinux builds (the device's python3 is 3.12) at
# the versions in .venv; TensorFlow's CPU wheel is split across .dev16/p1..pK and .dev16/last
# (its last part), the rest go in .dev16/last/whl, the bench models in .dev16/last/models.
# .dev16 is git-excluded.
#   bash benchmarks/transform/device_prep.sh [WORKDIR-with-models]
cd "$(dirname "$0")/../.." || exit 1
D=.dev16; W=${1:-/tmp/probe/w}
grep -qx '/.dev16/' .git/info/exclude 2>/dev/null || echo '/.dev16/' >> .git/info/exclude
rm -rf $D && mkdir -p $D/last/whl $D/tf || exit 1
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
get $D/last/whl $pkgs || exit 1
# A call carries the tracked tree too (~10 MB by now, ~7 MB in the fourth lease), so a part is
# what is left of 64 MiB beside it, less 2 MiB. grpcio and h5py are not carried: the device
# image has both.
tree=$(git ls-files -z | du -c -b --files0-from=- | tail -1 | cut -f1)
part=$(( 64 * 1024 * 1024 - tree - 2 * 1024 * 1024 ))
(cd $D/tf && split -b $part -d -a 1 *.whl tfpart) || exit 1
parts=($(ls $D/tf/tfpart* | sort))
for k in $(seq 0 $(( ${#parts[@]} - 2 ))); do mkdir -p $D/p$((k + 1)) && mv ${parts[$k]} $D/p$((k + 1))/; done
mv ${parts[-1]} $D/last/
sha256sum $D/tf/*.whl | tee $D/last/tf.sha256
mkdir -p $D/last/models && for m in "$W"/models/*; do [ "$(basename $m)" = cifar ] || cp -r "$m" $D/last/models/; done
[ $(du -s -b $D/last | cut -f1) -le $part ] || { echo "$D/last is over $part bytes"; exit 1; }
echo "tree $tree bytes; parts of $part bytes: ${#parts[@]} calls (p1..p$(( ${#parts[@]} - 1 )), then last)"
rm -rf $D/tf
du -sh $D/p*
