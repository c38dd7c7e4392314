#!/bin/bash
# Here, before a lease: what device_shapes.sh needs on the lent machine, in parts of < 64 MiB
# (what one call carries). Wheels are cp312 manylinux builds (the device's python3 is 3.12) at
# the versions in .venv; TensorFlow's CPU wheel is split across .dev16/p1..pK and .dev16/last
# (its last part), the rest go in .dev16/last/whl, the bench models in .dev16/last/models.
# .dev16 is git-excluded. Before each call, move aside results copied into the tree since (a
# part leaves 4 MiB beside the tracked tree).
#   [MODELS="tiny float64"] bash benchmarks/transform/device_prep.sh [WORKDIR-with-models]
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
# what is left of 64 MiB beside it, less 4 MiB: results copied back into the tree during a lease
# (a few MB of JSON and profiles, untracked until committed) travel too, and with 2 MiB spare they
# pushed a call over the limit in the forty-first session. grpcio and h5py are not carried: the device
# image has both.
tree=$(git ls-files -z | du -c -b --files0-from=- | tail -1 | cut -f1)
part=$(( 64 * 1024 * 1024 - tree - 4 * 1024 * 1024 ))
# Only the models the image shapes use (MODELS, "tiny float64" unless set): a workdir that ran
# every shape holds ~20 MB more; the bench makes any other model there itself.
mkdir -p $D/last/models && for m in ${MODELS:-tiny float64}; do cp -r "$W/models/$m" $D/last/models/ || exit 1; done
sha256sum $D/tf/*.whl | tee $D/last/tf.sha256
# The wheel's last piece goes with last/ (its wheels and models), sized to fit beside them; the
# rest in parts of $part bytes, one call each. Names sort in the wheel's order (tfpart0, 1, ...).
whl=$(ls $D/tf/*.whl); size=$(stat -c %s "$whl"); extra=$(du -s -b $D/last | cut -f1)
tail=$(( part - extra - 64 * 1024 )); [ $tail -gt $size ] && tail=$size
[ $tail -gt 0 ] || { echo "$D/last alone ($extra bytes) leaves no room in a part of $part bytes"; exit 1; }
(cd $D/tf && head -c $(( size - tail )) "$(basename $whl)" | split -b $part -d -a 1 - tfpart) || exit 1
parts=($(ls $D/tf/tfpart* 2>/dev/null | sort))
for k in $(seq 0 $(( ${#parts[@]} - 1 ))); do mkdir -p $D/p$((k + 1)) && mv ${parts[$k]} $D/p$((k + 1))/; done
tail -c $tail "$whl" > $D/last/tfpart${#parts[@]}
[ $(du -s -b $D/last | cut -f1) -le $part ] || { echo "$D/last is over $part bytes"; exit 1; }
echo "tree $tree bytes; parts of $part bytes: $(( ${#parts[@]} + 1 )) calls (p1..p${#parts[@]}, then last)"
rm -rf $D/tf
du -sh $D/p*
