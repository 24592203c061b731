#!/usr/bin/env bash
# Route once, cost many (docs/training.md "Routing in training"): a search over DeepSeek-V3's training layouts on 256
# H100s (61 layers; TP 1-2, PP 4-16, VPP 1-2, EP 8-64, three dispatchers, bf16 and fp8: 288 layouts, 240 of which
# divide) with the model's own router, costed by moesim_bench's train case (tests/bench/train_bench_cases.cpp) two
# ways in one run: one router for the whole search, and a router per layout (the baseline, on 8 layouts). Prints
# each one's seconds per layout and their ratio.
#
# The prediction, written before the first run: routing is the cost. A source rank's segment is 4096 / tp tokens of
# 256 logits (about 40 ms at TP 1 and 20 at TP 2 on this 2-core machine: the synthetic logits, then the group-limited
# top-8); the search needs 4 micro-batches x 64 ranks = 256 segments per segment size, 2 sizes: about 15 s, plus the
# forced-balance reference's random routing (about 1 s) and 240 steps of a few ms: about 17 s in all, 0.07 s a layout.
# A router per layout routes 4 x EP segments for each (EP 30 on average): about 5 s a layout, some 70 times slower.
#
# Usage: scripts/bench-train.sh   (builds moesim_bench in build-bench/, MOESIM_BUILD_DIR for another tree)
# Needs: the build dependencies (scripts/setup.sh) and libbenchmark-dev.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_BUILD_DIR:-$root/build-bench}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOESIM_CUDA=OFF -DMOESIM_BUILD_BENCH=ON \
  -DMOESIM_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target moesim_bench >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$build/moesim_bench" --benchmark_filter='^train/' --benchmark_format=json >"$out"
python3 - "$out" <<'PY'
import json, sys
runs = {b["name"].split("/")[2]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("run_type") == "iteration"}
shared, each = runs["shared_router"], runs["router_per_layout"]
per = lambda b: b["real_time"] / b["layouts"]  # seconds (the cases report in seconds)
print(f"search of {int(shared['layouts'])} layouts, one router: {shared['real_time']:.1f} s, {per(shared):.3f} s a layout, "
      f"{int(shared['segments_routed'])} segments routed")
print(f"a router per layout ({int(each['layouts'])} layouts): {each['real_time']:.1f} s, {per(each):.3f} s a layout, "
      f"{int(each['segments_routed'])} segments routed")
print(f"route once, cost many: {per(each) / per(shared):.1f}x faster a layout")
PY
