#!/usr/bin/env bash
# Whole-process `moesim compare` against a baseline binary in the same run (docs/performance.md "The router"):
#   1. compare --gating all on a DeepSeek-V3-sized synthetic batch (configs/experiments/deepseek-v3-batch.yaml
#      at 65536 tokens: 256 experts, top-8, every gating strategy), --no-execute;
#   2. compare on a seeded 176 MB Megatron-LM router trace (552 steps x 26 layers x 512 tokens, top-8 of 64,
#      capacity factor 1.25: replayed, as a trace without logits is; --gating all needs logits and exits 2);
# each pair alternated REPEATS times (default 3), the medians and baseline / this build printed; the JSON
# reports of both binaries must agree but for provenance (checked once per case).
# Usage: scripts/bench-compare.sh --baseline PATH/TO/old/moesim [--moesim PATH] [--repeats N]
# A baseline: git worktree add /tmp/old <commit> && cmake -S /tmp/old -B /tmp/old-build -DMOESIM_CUDA=OFF
#   -DMOESIM_BUILD_TESTS=OFF && cmake --build /tmp/old-build --target moesim
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
moesim=$root/build/moesim
baseline=""
repeats=3
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) baseline=$2; shift ;;
    --moesim) moesim=$2; shift ;;
    --repeats) repeats=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "bench-compare.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$baseline" ] || { echo "bench-compare.sh: --baseline PATH/TO/moesim is required" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/router_trace_rank0.jsonl" <<'PY'
import random, sys
rng = random.Random(20261205)
with open(sys.argv[1], "w") as f:
    for step in range(552):
        for layer in range(26):
            rows = ",".join("[" + ",".join(str(e) for e in rng.sample(range(64), 8)) + "]" for _ in range(512))
            f.write('{"step": %d, "stage": "pre_dispatch", "block": "decoder", "layer": %d, "rank": 0, '
                    '"num_tokens": 512, "topk": 8, "top_indices": [%s]}\n' % (step, layer, rows))
PY
trace_mb=$(du -m "$work/router_trace_rank0.jsonl" | cut -f1)
python3 - "$moesim" "$baseline" "$repeats" "$root" "$work" "$trace_mb" <<'PY'
import json, statistics, subprocess, sys, time
new, old, repeats, root, work, trace_mb = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
cases = [
    ("compare --gating all, DeepSeek-V3 batch of 65536 tokens",
     ["compare", root + "/configs/experiments/deepseek-v3-batch.yaml", "--gating", "all", "--no-execute",
      "--set", "workload.batch=65536", "--format", "json"]),
    (f"compare, Megatron-LM router trace ({trace_mb} MB, replayed)",
     ["compare", root + "/configs/mixtral-8x7b.yaml", "--no-execute", "--set", "workload.source=trace",
      "--set", "workload.path=" + work + "/router_trace_rank0.jsonl", "--set", "model.experts=64",
      "--set", "model.top_k=8", "--set", "router.capacity_factor=1.25", "--format", "json"]),
]
def run(binary, args):
    t = time.perf_counter()
    p = subprocess.run([binary, *args], check=True, capture_output=True, text=True)
    return time.perf_counter() - t, p.stdout
print("| case | baseline s | this build s | baseline / this build |")
print("|---|---:|---:|---:|")
for label, args in cases:
    times = {new: [], old: []}
    reports = {}
    for _ in range(repeats):
        for b in (old, new):
            t, out = run(b, args)
            times[b].append(t)
            reports[b] = out
    a, b = (json.loads(reports[x]) for x in (old, new))
    for r in (a, b):
        r.pop("provenance", None)
    same = "" if a == b else " (REPORTS DIFFER)"
    mo, mn = statistics.median(times[old]), statistics.median(times[new])
    print(f"| {label}{same} | {mo:.2f} | {mn:.2f} | {mo / mn:.2f}x |")
PY
