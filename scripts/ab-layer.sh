#!/usr/bin/env bash
# Times the executed layer of two moesim binaries on the README's four shapes, alternating A and B pair
# by pair in one run, and prints each pair's B/A ratio of measured.layer_s (the median of --repeats) and
# the median ratio per shape: > 1 means B is slower. Usage: scripts/ab-layer.sh OLD_MOESIM NEW_MOESIM [PAIRS]
# (default 5 pairs). The environment (OPENBLAS_CORETYPE, OMP_NUM_THREADS) applies to both.
set -euo pipefail
a=$1
b=$2
pairs=${3:-5}
shapes=("512 1024 2816 8 2" "4096 1024 2816 8 2" "4096 2048 1408 64 6" "16384 1024 512 64 8")
layer_s() {  # binary N d f E k
  "$1" run --format json --repeats 5 --set workload.batch="$2" --set execute.hidden="$3" --set execute.ffn="$4" \
    --set model.experts="$5" --set model.top_k="$6" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["strategies"][0]["measured"]["layer_s"])'
}
for s in "${shapes[@]}"; do
  read -r n d f e k <<<"$s"
  ratios=()
  for ((p = 0; p < pairs; p++)); do
    ta=$(layer_s "$a" $n $d $f $e $k)
    tb=$(layer_s "$b" $n $d $f $e $k)
    ratios+=("$(python3 -c "print(f'{$tb / $ta:.3f}')")")
  done
  med=$(printf '%s\n' "${ratios[@]}" | sort -n |
        awk '{v[NR] = $1} END {printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  echo "shape (N=$n, d=$d, f=$f, E=$e, k=$k): B/A per pair ${ratios[*]}; median $med"
done
