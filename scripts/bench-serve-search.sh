#!/usr/bin/env bash
# Route once, cost many (docs/serve.md "Searching layouts"): `moesim serve --search` over DeepSeek-V3 (61 layers) on 8
# to 256 H100s or H200s, with and without 32 redundant experts and two-batch overlap, normal or low-latency
# all-to-all (96 layouts, the ones the config accepts kept), at 9 batches a rank each, timed two ways in one run: one
# search (one routing at the largest layout, scaled to every layout), and one search a layout (each routing its own
# tokens: the baseline). Prints each one's seconds per layout and their ratio.
#
# The prediction, written before the baseline's first run: a layout's batches cost 9 x 4 steps of the step model
# (actual and balanced routing, the cycle's step and the first token's), about 1 ms each at EP 8-32 and more at
# EP 256: some 40 ms a layout, 2.5 s for the 64 layouts kept. Routing 65,536 tokens of 256 logits twice (with the
# EPLB warm-up) takes about 0.5 s. One search a layout pays that routing and the process start each time: about
# 64 x 0.6 = 38 s, some 10 times slower.
#
# Usage: scripts/bench-serve-search.sh   (MOESIM_BUILD_DIR: the tree whose moesim is timed, default build/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MOESIM_BUILD_DIR:-$root/build}/moesim
[ -x "$bin" ] || { echo "bench-serve-search.sh: $bin: build moesim first (scripts/build.sh)" >&2; exit 2; }
cfg="$root/configs/deepseek-v3.yaml"
common=(--search --isl 1024 --osl 1024 --tpot-ms 50 --format csv)
devices=(8 16 32 64 128 256)
replicas=(0 32)
overlaps=(none two_batch)
kernels=(normal low_latency)
gpus=(h100-sxm h200)
once() {
  "$bin" serve "$cfg" "${common[@]}" --vary "placement.devices=$(IFS=,; echo "${devices[*]}")" \
    --vary "placement.replicas=$(IFS=,; echo "${replicas[*]}")" --vary "placement.overlap=$(IFS=,; echo "${overlaps[*]}")" \
    --vary "placement.a2a_kernel=$(IFS=,; echo "${kernels[*]}")" --vary "hardware=$(IFS=,; echo "${gpus[*]}")" >/dev/null
}
# The layouts the search keeps, one search each (a layout the config refuses or the memory cannot hold exits 2).
each() {
  for d in "${devices[@]}"; do for r in "${replicas[@]}"; do for o in "${overlaps[@]}"; do for k in "${kernels[@]}"; do
    for g in "${gpus[@]}"; do
      "$bin" serve "$cfg" "${common[@]}" --vary placement.devices="$d" --vary placement.replicas="$r" \
        --vary placement.overlap="$o" --vary placement.a2a_kernel="$k" --vary hardware="$g" >/dev/null 2>&1 || true
    done
  done; done; done; done
}
layouts=$("$bin" serve "$cfg" --search --isl 1024 --osl 1024 --format json \
  --vary "placement.devices=$(IFS=,; echo "${devices[*]}")" --vary "placement.replicas=$(IFS=,; echo "${replicas[*]}")" \
  --vary "placement.overlap=$(IFS=,; echo "${overlaps[*]}")" --vary "placement.a2a_kernel=$(IFS=,; echo "${kernels[*]}")" \
  --vary "hardware=$(IFS=,; echo "${gpus[*]}")" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["layouts"]))')
seconds() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'; }
# Alternate the two, twice each, and keep each one's faster run.
a1=$(seconds once); b1=$(seconds each); a2=$(seconds once); b2=$(seconds each)
awk -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" -v n="$layouts" 'BEGIN {
  a = a1 < a2 ? a1 : a2; b = b1 < b2 ? b1 : b2
  printf "search of %d layouts x 9 batches, routed once: %.2f s, %.3f s a layout\n", n, a, a / n
  printf "one search a layout (baseline):            %.2f s, %.3f s a layout\n", b, b / n
  printf "routed once is %.1fx faster\n", b / a
}'
