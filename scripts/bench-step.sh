#!/usr/bin/env bash
# Route once, cost many (docs/serving.md "Searching layouts"): a search over DeepSeek-V3's serving step (61 layers) on
# 8-256 H100s or H200s, with and without two-batch overlap, normal or low-latency all-to-all (48 points), timed two
# ways in one run: `moesim step --vary` (one routing at the largest point, scaled to every point), and one `moesim
# step` per point (each routing its own tokens: the baseline). Prints each one's seconds per point and their ratio.
#
# The prediction, written before the first run: routing is the cost. The largest point routes 256 x 128 = 32,768
# tokens of 256 logits twice (about 0.7 s on this 2-core machine); each point then costs its layer on 2 draws and the
# balanced counterfactual (some 10-50 ms at EP 256): about 0.7 + 48 x 0.03 = 2.2 s, 0.05 s a point. One run a point
# routes each point's own tokens (8 x 128 to 256 x 128; about 0.25 s on average with the process start): about 14 s,
# 0.3 s a point, some 6 times slower.
#
# Usage: scripts/bench-step.sh   (MOESIM_BUILD_DIR: the tree whose moesim is timed, default build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MOESIM_BUILD_DIR:-$root/build}/moesim
[ -x "$bin" ] || { echo "bench-step.sh: $bin: build moesim first (scripts/build.sh)" >&2; exit 2; }
cfg="$root/configs/deepseek-v3.yaml"
common=(--requests-per-gpu 128 --kv-len 2000 --format csv)
devices=(8 16 32 64 128 256)
overlaps=(none two_batch)
kernels=(normal low_latency)
gpus=(h100-sxm h200)
points=$(( ${#devices[@]} * ${#overlaps[@]} * ${#kernels[@]} * ${#gpus[@]} ))
once() {
  "$bin" step "$cfg" "${common[@]}" --vary "placement.devices=$(IFS=,; echo "${devices[*]}")" \
    --vary "placement.overlap=$(IFS=,; echo "${overlaps[*]}")" --vary "placement.a2a_kernel=$(IFS=,; echo "${kernels[*]}")" \
    --vary "hardware=$(IFS=,; echo "${gpus[*]}")" >/dev/null
}
each() {
  for d in "${devices[@]}"; do for o in "${overlaps[@]}"; do for k in "${kernels[@]}"; do for g in "${gpus[@]}"; do
    "$bin" step "$cfg" "${common[@]}" --set placement.devices="$d" --set placement.overlap="$o" \
      --set placement.a2a_kernel="$k" --set hardware="$g" >/dev/null
  done; done; done; done
}
seconds() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'; }
# Alternate the two, twice each, and keep each one's faster run.
a1=$(seconds once); b1=$(seconds each); a2=$(seconds once); b2=$(seconds each)
awk -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" -v n="$points" 'BEGIN {
  a = a1 < a2 ? a1 : a2; b = b1 < b2 ? b1 : b2
  printf "search of %d points, routed once: %.2f s, %.3f s a point\n", n, a, a / n
  printf "one run a point (baseline):      %.2f s, %.3f s a point\n", b, b / n
  printf "routed once is %.1fx faster\n", b / a
}'
