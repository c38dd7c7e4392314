#!/bin/bash
# Marginal CPU an image of tfbatch (a) and the expert's tf.data script (b) on the jpeg-float job:
# both at two sizes, alternating, each into a fresh output folder (nothing deleted between runs:
# see alternate_trees.py on ext4's recently-deleted inode tax). Prints "contender size wall user sys".
#
#   bash benchmarks/transform/profile/marginal.sh ROUNDS SMALL_DIR LARGE_DIR MODEL_DIR OUT_ROOT
#
# MODEL_DIR holds model-noscript.tar.gz and savedmodel/1 (benchmarks.transform.shapes builds it as
# WORKDIR/models/float64). (CPU(large) - CPU(small)) / (images(large) - images(small)) is the
# steady CPU an image, start-up cancelled out.
set -euo pipefail
rounds=$1 small=$2 large=$3 model=$4 root=$5
cd "$(dirname "$0")/../../.."
mkdir -p "$root"
for r in $(seq 1 "$rounds"); do
  for input in "$small" "$large"; do
    n=$(ls "$input" | wc -l)
    for who in a b; do
      out="$root/$who-$n-$r-$(date +%s%N)"
      if [ "$who" = a ]; then
        cmd=(python -m tfbatch transform --model "$model/model-noscript.tar.gz" --input "$input" --output "$out"
             --content-type application/x-image --progress off)
      else
        cmd=(python -m benchmarks.transform.shape_tfdata --kind files --model-dir "$model/savedmodel/1"
             --input "$input" --float --output "$out")
      fi
      /usr/bin/time -f "$who $n %e %U %S" "${cmd[@]}" 2>&1 | tail -1
    done
  done
done
