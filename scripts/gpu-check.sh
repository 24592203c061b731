#!/usr/bin/env bash
# The GPU check in one run: builds moesim with the CUDA backend for sm_90 (override: MOESIM_CUDA_ARCH)
# into build-gpu, runs the GPU tests (ctest -L gpu: every CUDA result against the CPU path), prints the CPU and
# CUDA output digests of small-integer grouped GEMMs (equal when the backends agree bit for bit), then the GPU
# benchmarks (permutation GB/s vs a device-to-device copy, grouped GEMM TFLOP/s vs one dense cuBLAS GEMM
# of the same FLOPs, the whole MoE layer vs the same layer under balanced routing and, when python3 can
# import torch with CUDA, vs a PyTorch eager MoE block of the same shape), a quick `moesim calibrate
# --backend cuda` against the datasheet profile MOESIM_GPU_BASE (default h200), times the published
# kernel tables' shapes of that GPU kind through moesim's CUDA layer (rows in the data/validation format),
# and prints a table.
# Needs a CUDA device; exits 3 without one. Sized to finish in under 5 minutes on one modern GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_GPU_BUILD_DIR:-$root/build-gpu}
arch=${MOESIM_CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc)}
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

echo "== build: $build (CMAKE_CUDA_ARCHITECTURES=$arch) =="
cmake -S "$root" -B "$build" -DMOESIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_BUILD_TYPE=Release \
  -DMOESIM_BUILD_TESTS=ON >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 2; }
cmake --build "$build" -j"$jobs" --target moesim moesim_gpu_tests moesim_gpu_bench >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 2; }
echo "built in $(elapsed)"
bench="$build/tests/moesim_gpu_bench"

echo "== device =="
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
# A tiny benchmark doubles as the device probe: exit 3 (with the reason) when no device is usable.
set +e
"$bench" --tokens 64 --experts 8 --top-k 2 --hidden 64 --ffn 64 --dtype fp32 --warmup 0 --iterations 1 >/dev/null
probe=$?
set -e
if [ "$probe" -eq 3 ]; then
  echo "gpu-check: no usable CUDA device; nothing to check" >&2
  exit 3
elif [ "$probe" -ne 0 ]; then
  echo "gpu-check: the probe benchmark failed (exit $probe)" >&2
  exit 1
fi

echo "== GPU tests (ctest -L gpu) =="
status=0
(cd "$build" && ctest -L gpu -j1 --output-on-failure --timeout 300) | tail -25 || status=1
echo "tests done at $(elapsed)"

echo "== output digests on small-integer inputs (CPU OpenBLAS against cuBLAS: must be equal) =="
"$build/tests/moesim_gpu_tests" --gtest_filter='*SmallIntegersEqualOpenblasExactly*' 2>&1 |
  grep '^moesim-digest:' | sed 's/^moesim-digest: //' || status=1

echo "== benchmarks =="
csv="$build/gpu-bench.csv"
: >"$csv"
run_bench() {  # label, then moesim_gpu_bench options
  local label=$1
  shift
  local header=--no-header
  [ -s "$csv" ] || header=
  "$bench" --csv $header --label "$label" "$@" >>"$csv" || status=1
}
# Fine-grained experts (DeepSeek/OLMoE-like) and few large experts (Mixtral-like), bf16 weights.
run_bench "fine E64 k8 H2048 F1024 N4096" --tokens 4096 --experts 64 --top-k 8 --hidden 2048 --ffn 1024 --dtype bf16
run_bench "large E8 k2 H4096 F14336 N2048" --tokens 2048 --experts 8 --top-k 2 --hidden 4096 --ffn 14336 --dtype bf16
echo "benchmarks done at $(elapsed)"

# PyTorch eager MoE block on the same device and shapes (softmax over all experts, top-k, a loop over
# experts gathering their tokens, SwiGLU in bf16, weighted index_add): the usual eager reference.
torch_csv="$build/torch-bench.csv"
: >"$torch_csv"
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  python3 - "$torch_csv" <<'PY' || echo "gpu-check: the PyTorch comparison failed (skipped)" >&2
import sys, torch
out = open(sys.argv[1], "w")
torch.manual_seed(7)
dev = "cuda"
def moe_block(x, logits, w1, w3, w2, k):
    probs = torch.softmax(logits.float(), dim=-1)
    topw, topi = torch.topk(probs, k, dim=-1)
    y = torch.zeros_like(x, dtype=torch.float32)
    for e in range(w1.shape[0]):
        tok, slot = torch.where(topi == e)
        if tok.numel() == 0:
            continue
        xe = x[tok]
        h = torch.nn.functional.silu(xe @ w1[e]) * (xe @ w3[e])
        y.index_add_(0, tok, (h @ w2[e]).float() * topw[tok, slot, None])
    return y
for label, n, e, k, hd, f in [("fine E64 k8 H2048 F1024 N4096", 4096, 64, 8, 2048, 1024),
                              ("large E8 k2 H4096 F14336 N2048", 2048, 8, 2, 4096, 14336)]:
    dt = torch.bfloat16
    x = torch.randn(n, hd, device=dev, dtype=dt)
    logits = torch.randn(n, e, device=dev)
    w1 = torch.randn(e, hd, f, device=dev, dtype=dt) / hd ** 0.5
    w3 = torch.randn(e, hd, f, device=dev, dtype=dt) / hd ** 0.5
    w2 = torch.randn(e, f, hd, device=dev, dtype=dt) / f ** 0.5
    for _ in range(3):
        moe_block(x, logits, w1, w3, w2, k)
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); moe_block(x, logits, w1, w3, w2, k); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    out.write(f"{label},{times[len(times) // 2]:.4f}\n")
    del w1, w3, w2
    torch.cuda.empty_cache()
PY
else
  echo "(python3 with CUDA torch not found: PyTorch comparison skipped)"
fi

# The published kernel tables of this GPU kind (data/validation, gpu == MOESIM_GPU_BASE), timed here through
# moesim's own CUDA MoE layer at the same shapes and batches under uniform routing (skew 0, as the
# benchmarks' random logits), written in the validation format so measured points join the published
# ones: moesim validate --published "$build/measured-validation.csv". fp8 tables are skipped (the CUDA
# experts run fp32/tf32/bf16/fp16).
measured="$build/measured-validation.csv"
echo "== published shapes of ${MOESIM_GPU_BASE:-h200} timed on this device: $measured =="
python3 - "$root/data/validation" "${MOESIM_GPU_BASE:-h200}" "$bench" "$measured" <<'PY' || status=1
import csv, datetime, glob, os, subprocess, sys
folder, gpu, bench, out = sys.argv[1:5]
header = ("gpu,dtype,experts,n,k,top_k,tp,batch,measured_us,source,date,tool,kernel_config,routing,notes,scope").split(",")
try:
    device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                            text=True).stdout.strip().splitlines()[:1] or ["unknown device"]
except OSError:
    device = ["unknown device"]
rows, failed = [], 0
for path in sorted(glob.glob(os.path.join(folder, "*.csv"))):
    for r in csv.DictReader(open(path, newline="")):
        if r["gpu"] != gpu or r["dtype"] not in ("bf16", "fp16") or r["scope"] != "layer":
            continue
        args = [bench, "--csv", "--tokens", r["batch"], "--experts", r["experts"], "--top-k", r["top_k"],
                "--hidden", r["k"], "--ffn", r["n"], "--dtype", r["dtype"], "--skew", "0", "--warmup", "2",
                "--iterations", "10"]
        p = subprocess.run(args, capture_output=True, text=True)
        layer = [x for x in csv.DictReader(p.stdout.splitlines()) if x["case"].startswith("MoE layer")]
        if p.returncode != 0 or not layer:
            failed += 1
            print(f"gpu-check: {os.path.basename(path)} batch {r['batch']}: the benchmark failed", file=sys.stderr)
            continue
        us = float(layer[0]["median_ms"]) * 1000
        rows.append([gpu, r["dtype"], r["experts"], r["n"], r["k"], r["top_k"], r["tp"], r["batch"], f"{us:.2f}",
                     "moesim scripts/gpu-check.sh", datetime.date.today().isoformat(),
                     "moesim_gpu_bench MoE layer (route + dispatch + cuBLAS SwiGLU + combine), median of 10",
                     "moesim CUDA backend", "synthetic logits, skew 0 (uniform)",
                     f"{device[0]}; the shape of {os.path.basename(path)}", "layer"])
        print(f"  {os.path.basename(path)} batch {r['batch']}: {us:.1f} us (published {r['measured_us']} us)")
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(header)
    w.writerows(rows)
print(f"{len(rows)} points written to {out}" + (f"; {failed} failed" if failed else ""))
sys.exit(1 if failed else 0)
PY
[ -n "${OUT:-}" ] && [ -s "$measured" ] && cp "$measured" "$OUT/" || true

echo "== calibration: moesim calibrate --backend cuda --base ${MOESIM_GPU_BASE:-h200} --quick =="
"$build/moesim" calibrate --backend cuda --base "${MOESIM_GPU_BASE:-h200}" --quick --out "$build/gpu-measured.yaml" ||
  status=1
grep -E '^#|^(efficiency_|launch_overhead)' "$build/gpu-measured.yaml" 2>/dev/null | head -20 || true

echo
echo "== results (median of timed runs; x = baseline ms / moesim ms, > 1 means moesim is faster) =="
awk -F, -v torch="$torch_csv" '
  BEGIN { while ((getline line < torch) > 0) { split(line, p, ","); tms[p[1]] = p[2] } }
  NR == 1 { next }
  {
    check = $11; gsub(/"/, "", check); sub(/ \(.*/, "", check)
    printf "%-31s %-56s %9.3f ms %11.4g %-9s | %-28s %9.3f ms %6.2fx | %s\n", $1, $2, $3, $5, $6, $7, $8, $10, check
    if ($2 ~ /^MoE layer/ && ($1 in tms)) {
      printf "%-31s %-56s %9.3f ms %11.4g %-9s | %-28s %9.3f ms %6.2fx | %s\n", $1, "  same layer vs PyTorch eager MoE block (bf16)", $3, $5,
             $6, "torch eager", tms[$1], tms[$1] / $3, "-"
    }
  }' "$csv"
echo
echo "gpu-check finished in $(elapsed); CSV: $csv"
exit $status
