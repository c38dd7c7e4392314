#!/bin/bash
# The job process's own CPU (its threads, not its worker processes), wall time beside it.
#   bash benchmarks/transform/profile/main_cpu.sh TAG MODEL INPUT CONTENT_TYPE [transform flags...]
# Run from the repository root; /proc/PID/stat is polled every 50 ms until the job exits.
set -u
tag=$1; model=$2; input=$3; ct=$4; shift 4
out=${TMPDIR:-/tmp}/main-cpu-$tag; rm -rf "$out"
start=$(date +%s.%N)
.venv/bin/python -m tfbatch transform --model "$model" --input "$input" --output "$out" --content-type "$ct" \
    --progress off "$@" > "$out.log" 2>&1 &
pid=$!
last=""
while kill -0 $pid 2>/dev/null; do s=$(cat /proc/$pid/stat 2>/dev/null) && last="$s"; sleep 0.05; done
wait $pid
end=$(date +%s.%N)
echo "$last" | awk -v t="$tag" -v w="$(echo "$end - $start" | bc)" -v k="$(getconf CLK_TCK)" \
    '{sub(/.*\) /, ""); printf "%s wall %.2f s, job process CPU %.2f s (user %.2f, sys %.2f)\n", t, w, ($12+$13)/k, $12/k, $13/k}'
