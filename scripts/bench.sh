#!/usr/bin/env bash
# Benchmarks moesim against its peers in one run and prints a table of ratios (docs/performance.md):
#   1. moesim_bench (tests/bench, Google Benchmark): every phase per shape, each case checked against the
#      serial references first, beside this machine's ceilings timed in the same process (large copy
#      bandwidth, dense sgemm over the same total rows);
#   2. scripts/torch_moe_reference.py on the same shapes and inputs (PyTorch CPU, float32, 2 threads,
#      the faster of OMP_WAIT_POLICY unset and PASSIVE), right after moesim on each shape;
#   3. the thread-pool check: one layer under OMP_WAIT_POLICY unset / PASSIVE / ACTIVE, and with the
#      pthread build of OpenBLAS (LD_PRELOAD) when one is found (--fetch-pthread-blas downloads it).
# Usage: scripts/bench.sh [--quick] [--no-verify] [--no-torch] [--fetch-pthread-blas] [--out DIR]
# Needs: the build dependencies (scripts/setup.sh), libbenchmark-dev; python3-torch and python3-numpy
# (Debian's, for /usr/bin/python3) are installed when missing unless --no-torch.
# A full run takes about 10 minutes on 2 idle cores; --quick about 2 (two layer shapes, fewer repeats).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_BUILD_DIR:-$root/build-bench}
out=""
quick=0
verify=1
torch=1
fetch_pthread=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-verify) verify=0 ;;
    --no-torch) torch=0 ;;
    --fetch-pthread-blas) fetch_pthread=1 ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
out=${out:-$build/results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

# ---- build ---------------------------------------------------------------------------------------
if ! { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOESIM_BUILD_BENCH=ON -DMOESIM_BUILD_TESTS=OFF \
         -DMOESIM_CUDA=${MOESIM_CUDA:-OFF} && cmake --build "$build" -j"$(nproc)" --target moesim_bench; } \
       >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log" >&2
  echo "bench.sh: building moesim_bench failed (log: $out/build.log)" >&2
  exit 1
fi
bench="$build/moesim_bench"

# ---- PyTorch (Debian's python3-torch is built for the system python) ---------------------------
py=/usr/bin/python3
if [ $torch -eq 1 ] && ! "$py" -c "import torch, numpy" 2>/dev/null; then
  echo "bench.sh: installing python3-torch python3-numpy (PyTorch reference)"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends \
    python3-torch python3-numpy >/dev/null
fi

# ---- pthread OpenBLAS for the thread-pool check (optional) ---------------------------------------
cache="$build/.cache"
pthread_blas=""
for cand in /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 \
            "$cache/openblas-pthread/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"; do
  [ -f "$cand" ] && pthread_blas=$cand && break
done
if [ -z "$pthread_blas" ] && [ $fetch_pthread -eq 1 ]; then
  mkdir -p "$cache"
  (cd "$cache" && apt-get download libopenblas0-pthread >/dev/null 2>&1 &&
   dpkg -x libopenblas0-pthread_*.deb openblas-pthread) || echo "bench.sh: could not fetch libopenblas0-pthread" >&2
  cand="$cache/openblas-pthread/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"
  [ -f "$cand" ] && pthread_blas=$cand
fi

# ---- runs ----------------------------------------------------------------------------------------
# Two rounds: OMP_WAIT_POLICY unset, then PASSIVE, for moesim and PyTorch alike; each case reports its
# best over both (a machine shared with other work can slow either side several-fold at random, and
# the passive policy helps both when the cores are busy). Within a round moesim and PyTorch run back to
# back on each shape, so the ratios compare runs minutes apart at most.
if [ $quick -eq 1 ]; then
  reps=(--repetitions=2 --heavy-repetitions=1 --min-time=0.1)
  torch_reps=(--repeats 2 --heavy-repeats 1)
  layers=(N512_d1024_f2816_E8_k2 N4096_d1024_f2816_E8_k2)
  dispatches=(N16384_d4096_E64_k2)
  pool_layer=N512_d1024_f2816_E8_k2
else
  reps=(--repetitions=3 --heavy-repetitions=2 --min-time=0.2)
  torch_reps=(--repeats 3 --heavy-repeats 2)
  layers=(N512_d1024_f2816_E8_k2 N4096_d1024_f2816_E8_k2 N4096_d2048_f1408_E64_k6 N16384_d1024_f512_E64_k8)
  dispatches=(N16384_d4096_E64_k2 N65536_d1024_E256_k8)
  pool_layer=N4096_d1024_f2816_E8_k2
fi
verify_flag=()
[ $verify -eq 0 ] && verify_flag=(--no-verify)
moesim_json() {  # name filter [env assignments...]: one moesim_bench process -> $out/moesim-NAME.json
  local name=$1 filter=$2
  shift 2
  env "$@" "$bench" --benchmark_filter="$filter" "${reps[@]}" "${verify_flag[@]}" \
    --benchmark_format=json --benchmark_out="$out/moesim-$name.json" >"$out/moesim-$name.log" 2>&1 ||
    { echo "bench.sh: moesim_bench failed on $name (see $out/moesim-$name.log)" >&2; exit 1; }
}
torch_json() {  # filter [env assignments...]: the PyTorch reference, appended to $out/torch.jsonl
  [ $torch -eq 1 ] || return 0
  local filter=$1
  shift
  env "$@" "$py" "$root/scripts/torch_moe_reference.py" --filter "$filter" "${torch_reps[@]}" \
    --json "$out/torch.jsonl" 2>>"$out/torch.log" ||
    { echo "bench.sh: the PyTorch reference failed on $filter (see $out/torch.log)" >&2; exit 1; }
}

start=$(date +%s)
if [ $torch -eq 1 ]; then
  echo "bench.sh: agreement check (moesim's layer against the PyTorch layer, same weights)"
  mkdir -p "$out/check"
  "$bench" --export-check="$out/check" && "$py" "$root/scripts/torch_moe_reference.py" --check "$out/check" |
    tee "$out/check.json"
fi
for round in 1 2; do
  if [ $round -eq 1 ]; then policy=(-u OMP_WAIT_POLICY); else policy=(OMP_WAIT_POLICY=PASSIVE); fi
  for s in "${layers[@]}"; do
    echo "bench.sh: round $round: layer $s"
    moesim_json "r$round-layer-$s" "^layer/$s/" "${policy[@]}"
    torch_json "layer/$s/" "${policy[@]}"
  done
  for s in "${dispatches[@]}"; do
    echo "bench.sh: round $round: dispatch $s"
    moesim_json "r$round-dispatch-$s" "^dispatch/$s/" "${policy[@]}"
    torch_json "dispatch/$s/" "${policy[@]}"
  done
  echo "bench.sh: round $round: router, small experts, cost model"
  moesim_json "r$round-other" "^(router|small_experts|cost_model)/" "${policy[@]}"
  torch_json "router/" "${policy[@]}"
done
echo "bench.sh: thread pools (OMP_WAIT_POLICY, OpenBLAS build)"
pool_filter="^(layer/$pool_layer/(layer|ceiling_copy)|small_experts/.*grouped_swiglu)"
moesim_json "pool-openmp-blas-wait-unset" "$pool_filter" -u OMP_WAIT_POLICY
moesim_json "pool-openmp-blas-wait-PASSIVE" "$pool_filter" OMP_WAIT_POLICY=PASSIVE
moesim_json "pool-openmp-blas-wait-ACTIVE" "$pool_filter" OMP_WAIT_POLICY=ACTIVE
if [ -n "$pthread_blas" ]; then
  moesim_json "pool-pthread-blas-wait-unset" "$pool_filter" -u OMP_WAIT_POLICY LD_PRELOAD="$pthread_blas"
  moesim_json "pool-pthread-blas-wait-PASSIVE" "$pool_filter" OMP_WAIT_POLICY=PASSIVE LD_PRELOAD="$pthread_blas"
else
  echo "bench.sh: no pthread OpenBLAS found (--fetch-pthread-blas downloads it): OpenMP build only"
fi
echo "bench.sh: done in $(( $(date +%s) - start )) s; results in $out"

# ---- the table -----------------------------------------------------------------------------------
"$py" - "$out" <<'PY' | tee "$out/table.md"
import glob, json, os, re, sys

out = sys.argv[1]

def load_runs(path):
    """{case: [runs]} (every repetition) and the file's context, from one moesim_bench JSON file."""
    runs = {}
    d = json.load(open(path))
    for b in d.get("benchmarks", []):
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        name = re.sub(r"/(min_time|iterations|repeats|real_time|process_time).*", "", b["run_name"])
        runs.setdefault(name, []).append(b)
    return runs, d.get("context", {})

def summarise(runs):
    """{case: {"min": run, "median": run, "runs": n}} over all runs of each case."""
    rows = {}
    for name, rs in runs.items():
        rs = sorted(rs, key=lambda b: b["real_time"])
        rows[name] = {"min": rs[0], "median": rs[len(rs) // 2], "runs": len(rs)}
    return rows

all_runs, loads = {}, []
for path in sorted(glob.glob(os.path.join(out, "moesim-r*.json"))):
    runs, ctx = load_runs(path)
    for name, rs in runs.items():
        all_runs.setdefault(name, []).extend(rs)
    loads.append(ctx.get("load_avg", [0])[0])
moesim = summarise(all_runs)

torch = {}
if os.path.exists(os.path.join(out, "torch.jsonl")):
    for line in open(os.path.join(out, "torch.jsonl")):
        r = json.loads(line)
        if r["case"] not in torch or r["min_s"] < torch[r["case"]]["min_s"]:
            torch[r["case"]] = r

UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}

def wall_ms(run):
    return run["real_time"] * UNIT_MS[run.get("time_unit", "ms")]

def ms(name):  # (min, median) wall milliseconds of a moesim case, or None
    a = moesim.get(name)
    return (wall_ms(a["min"]), wall_ms(a["median"])) if a else None

def cpu_ms(name):  # median process CPU milliseconds (all threads) of a moesim case
    runs = sorted(all_runs.get(name, []), key=lambda b: b["cpu_time"])
    return runs[len(runs) // 2]["cpu_time"] * UNIT_MS[runs[0].get("time_unit", "ms")] if runs else None

def counter(name, key):
    a = moesim.get(name)
    return a["median"].get(key) if a else None

def fmt(x, digits=1):
    return "-" if x is None else ("%.*f" % (digits, x))

targets = []  # (target, value, met)
def target(text, value, ok):
    targets.append((text, value, "met" if ok else "MISSED"))

print("## moesim against PyTorch and this machine's ceilings\n")
print("Wall milliseconds, minimum over the repetitions (median in brackets); speedup = PyTorch / moesim;")
print("cpu = the same ratio in median process CPU time (all threads), which the machine's load barely moves;")
print("limit = GEMM FLOPs at the dense sgemm rate + dispatch bytes at the copy bandwidth, both measured")
print("in the same process. Best of two rounds (OMP_WAIT_POLICY unset, PASSIVE) for both sides. One-minute")
print("load average when each moesim process started: %s (2 cores).\n" % ", ".join("%.1f" % l for l in loads))
print("| case | phase | moesim ms | PyTorch ms | speedup | ceiling | of ceiling |")
print("|---|---|---|---|---|---|---|")
def shape_key(prefix):  # numeric order of the shape label's numbers
    return [int(x) for x in re.findall(r"\d+", prefix)]

for prefix in sorted({n.rsplit("/", 1)[0] for n in moesim if n.startswith("layer/")}, key=shape_key):
    label = prefix.split("/", 1)[1]
    copy = ms(prefix + "/ceiling_copy")
    copy_bps = counter(prefix + "/ceiling_copy", "bytes") / (copy[0] / 1e3) if copy else None
    sg = ms(prefix + "/ceiling_sgemm")
    flops = counter(prefix + "/ceiling_sgemm", "flops")
    sgemm_fps = flops / (sg[0] / 1e3) if sg else None
    t = lambda phase: torch.get("%s/%s" % (prefix, phase))
    # gating
    g = ms(prefix + "/gating")
    tg = t("gating")
    print("| %s | gating | %s (%s) | %s | %s | | |" % (label, fmt(g[0], 2), fmt(g[1], 2), fmt(tg and tg["min_s"] * 1e3, 2),
                                                 fmt(tg and tg["min_s"] * 1e3 / g[0], 2)))
    # dispatch = permutation + gather + combine
    parts = [ms(prefix + "/" + p) for p in ("permutation", "gather", "combine")]
    d_min = sum(p[0] for p in parts)
    d_bytes = counter(prefix + "/layer", "dispatch_bytes")
    d_frac = (d_bytes / (d_min / 1e3)) / copy_bps if copy_bps else None
    td = t("dispatch")
    print("| %s | dispatch (permute + gather + combine) | %s | %s | %s | copy %.1f GB/s | %s %% |" % (
        label, fmt(d_min, 2), fmt(td and td["min_s"] * 1e3, 2), fmt(td and td["min_s"] * 1e3 / d_min, 2),
        copy_bps / 1e9, fmt(d_frac and 100 * d_frac, 0)))
    # grouped GEMM
    gg, gb, dense = ms(prefix + "/grouped_gemm"), ms(prefix + "/grouped_gemm_balanced"), ms(prefix + "/dense_swiglu")
    print("| %s | grouped GEMM (SwiGLU) | %s (%s) | | | dense sgemm %.0f GFLOP/s | %s %% (cpu %s %%) |" % (
        label, fmt(gg[0]), fmt(gg[1]), sgemm_fps / 1e9, fmt(100 * (flops / (gg[0] / 1e3)) / sgemm_fps, 0),
        fmt(100 * cpu_ms(prefix + "/ceiling_sgemm") / cpu_ms(prefix + "/grouped_gemm"), 0)))
    print("| %s | grouped GEMM, balanced routing | %s | | | one dense SwiGLU %s ms | %s %% (cpu %s %%) |" % (
        label, fmt(gb[0]), fmt(dense[0]), fmt(100 * dense[0] / gb[0], 0),
        fmt(100 * cpu_ms(prefix + "/dense_swiglu") / cpu_ms(prefix + "/grouped_gemm_balanced"), 0)))
    # full layer
    ly = ms(prefix + "/layer")
    tl = t("layer")
    limit = counter(prefix + "/layer", "flops") / sgemm_fps * 1e3 + d_bytes / copy_bps * 1e3
    speed = tl["min_s"] * 1e3 / ly[0] if tl else None
    print("| %s | full layer | %s (%s) | %s | %s | limit %s ms | %s x limit (cpu %s x sgemm) |" % (
        label, fmt(ly[0]), fmt(ly[1]), fmt(tl and tl["min_s"] * 1e3), fmt(speed, 2), fmt(limit), fmt(ly[0] / limit, 2),
        fmt(cpu_ms(prefix + "/layer") / cpu_ms(prefix + "/ceiling_sgemm"), 2)))
    if speed is not None:
        need = 1.3 if label.startswith("N16384_d1024_f512_E64_k8") else 1.0
        target("full layer %s: >= %.1fx PyTorch" % (label, need), "%.2fx" % speed, speed >= need)
    target("full layer %s: <= 1.2x machine limit" % label, "%.2fx" % (ly[0] / limit), ly[0] / limit <= 1.2)
    if label.startswith("N4096"):
        target("grouped GEMM %s balanced: >= 85%% of one dense GEMM" % label, "%.0f %%" % (100 * dense[0] / gb[0]),
               dense[0] / gb[0] >= 0.85)
    if td:
        target("dispatch %s: >= 2x PyTorch" % label, "%.2fx" % (td["min_s"] * 1e3 / d_min), td["min_s"] * 1e3 / d_min >= 2)
    if d_frac is not None:
        target("dispatch %s: >= 60%% of copy bandwidth" % label, "%.0f %%" % (100 * d_frac), d_frac >= 0.6)

for prefix in sorted({n.rsplit("/", 1)[0] for n in moesim if n.startswith("dispatch/")}, key=shape_key):
    label = prefix.split("/", 1)[1]
    copy = ms(prefix + "/ceiling_copy")
    copy_bps = counter(prefix + "/ceiling_copy", "bytes") / (copy[0] / 1e3)
    d = ms(prefix + "/dispatch")
    frac = counter(prefix + "/dispatch", "bytes") / (d[0] / 1e3) / copy_bps
    td = torch.get(prefix + "/dispatch")
    speed = td["min_s"] * 1e3 / d[0] if td else None
    print("| %s | dispatch only | %s (%s) | %s | %s | copy %.1f GB/s | %.0f %% |" % (
        label, fmt(d[0]), fmt(d[1]), fmt(td and td["min_s"] * 1e3), fmt(speed, 2), copy_bps / 1e9, 100 * frac))
    if speed is not None:
        target("dispatch %s: >= 2x PyTorch" % label, "%.2fx" % speed, speed >= 2)
    target("dispatch %s: >= 60%% of copy bandwidth" % label, "%.0f %%" % (100 * frac), frac >= 0.6)

for name in sorted(n for n in moesim if n.startswith("router/") and not n.endswith("ceiling_read")):
    r = ms(name)
    read = ms(name.rsplit("/", 1)[0] + "/ceiling_read")
    tr = torch.get(name.rsplit("/", 1)[0] + "/softmax_topk")
    speed = tr["min_s"] * 1e3 / r[0] if tr else None
    print("| %s | router %s | %s (%s) | %s | %s | read logits %s ms | %s x read |" % (
        name.split("/")[1], name.split("/")[2], fmt(r[0], 2), fmt(r[1], 2), fmt(tr and tr["min_s"] * 1e3, 2),
        fmt(speed, 2), fmt(read[0], 2), fmt(r[0] / read[0], 2)))
    shape = name.split("/")[1]
    # The targets are the large router's (docs/performance.md "Targets"); the 64-expert one fits the cache,
    # where a call's fixed costs (its outputs, the parallel region) weigh more: it is reported, not targeted.
    if name.endswith("softmax_topk") and shape == "N65536_E256_k8":
        if speed is not None:
            target("router %s: >= 10x PyTorch" % shape, "%.2fx" % speed, speed >= 10)
        target("router %s: at most 2 reads of the logits" % shape, "%.2f reads" % (r[0] / read[0]), r[0] / read[0] <= 2)

small = {n: ms(n) for n in moesim if n.startswith("small_experts/")}
for kind in ("grouped_swiglu", "one_sgemm_8rows"):
    one = [v for n, v in small.items() if kind in n and n.endswith("threads:1")]
    many = [(n, v) for n, v in small.items() if kind in n and not n.endswith("threads:1")]
    if one and many:
        n, v = many[0]
        print("| small experts | %s, %s vs 1 thread | %s vs %s | | %.2fx | | |" % (
            kind, n.rsplit("/", 1)[1], fmt(v[0], 2), fmt(one[0][0], 2), one[0][0] / v[0]))
        if kind == "grouped_swiglu":
            target("small experts (8 rows): more threads not slower", "%.2fx" % (one[0][0] / v[0]), v[0] <= one[0][0] * 1.05)
for name in sorted(n for n in moesim if n.startswith("cost_model/")):
    rate = counter(name, "evaluations_per_second")
    print("| cost model | %s | %s us | | | | %.2g evaluations/s |" % (name.split("/", 1)[1], fmt(ms(name)[0] * 1e3, 2), rate))
    if name.endswith("single"):
        target("cost model: >= 1e6 evaluations/s (%s)" % name.split("/", 1)[1], "%.2g/s" % rate, rate >= 1e6)

pool = {}
for path in sorted(glob.glob(os.path.join(out, "moesim-pool-*.json"))):
    pool[os.path.basename(path)[len("moesim-pool-"):-5]] = summarise(load_runs(path)[0])
if pool:
    print("\n## Thread pools: one layer and the small experts under each OpenMP wait policy and OpenBLAS build\n")
    print("Minimum wall ms (median); in brackets after the layer, its time over the copy ceiling timed in")
    print("the same process, which cancels most of the machine's load swings between the settings.\n")
    names = sorted({n for rows in pool.values() for n in rows if not n.endswith("ceiling_copy")})
    print("| setting | " + " | ".join(n.split("/", 1)[1] for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for setting, rows in pool.items():
        copy = [wall_ms(rows[n]["min"]) for n in rows if n.endswith("ceiling_copy")]
        cells = []
        for n in names:
            if n not in rows:
                cells.append("-")
                continue
            cell = "%s (%s)" % (fmt(wall_ms(rows[n]["min"]), 1), fmt(wall_ms(rows[n]["median"]), 1))
            if n.startswith("layer/") and copy:
                cell += " [%.1f x copy]" % (wall_ms(rows[n]["min"]) / copy[0])
            cells.append(cell)
        print("| %s | %s |" % (setting, " | ".join(cells)))

if torch:
    print("\n## PyTorch settings used (the faster per case)\n")
    for case in sorted(torch):
        r = torch[case]
        print("- %s: %.1f ms min, %.1f ms median, %d threads, OMP_WAIT_POLICY %s" % (
            case, r["min_s"] * 1e3, r["median_s"] * 1e3, r["threads"], r["wait_policy"]))

print("\n## Targets\n")
print("| target | measured | |")
print("|---|---|---|")
for t in targets:
    print("| %s | %s | %s |" % t)
PY
