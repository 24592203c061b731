#!/usr/bin/env bash
# Peak memory and wall time of `moesim run` on a routing trace (docs/performance.md, "Trace replay memory"):
# generates a seeded synthetic trace of 186,680 rows (JSON Lines, one line per token and layer, Mixtral
# top-2 of 8 experts, 32 layers, one decode token per step: about 24 MB; --experts and --top-k change the
# router, e.g. DeepSeek-V3's 256 and 8), runs `moesim run --format json`
# on it under /usr/bin/time -v with this tree's build and, when given, a baseline build in the same run,
# and prints peak RSS / trace size, wall time, report size, moesim's own memory estimate / the measured peak
# (at least 1: --memory-limit must bound the real peak), and the ratios baseline / this build.
# Usage: scripts/bench-trace-memory.sh [--baseline PATH/TO/moesim] [--moesim PATH/TO/moesim] [--rows N]
#        [--experts E] [--top-k K] [--records] [--out DIR]
# Needs: python3, bc, /usr/bin/time (Debian package `time`). A baseline build of commit f488571:
#   git archive f488571 | (mkdir -p /tmp/mem-base && tar -x -C /tmp/mem-base) and build it as usual.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
moesim=${MOESIM_BIN:-$root/build/moesim}
baseline=""
rows=186680
experts=8
top_k=2
records=""
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) baseline=$2; shift ;;
    --moesim) moesim=$2; shift ;;
    --rows) rows=$2; shift ;;
    --experts) experts=$2; shift ;;
    --top-k) top_k=$2; shift ;;
    --records) records="--records" ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "bench-trace-memory.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -x /usr/bin/time ] || { echo "bench-trace-memory.sh: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
out=${out:-$(mktemp -d /tmp/moesim-trace-mem.XXXXXX)}
mkdir -p "$out"
trace="$out/trace.jsonl"

python3 - "$trace" "$rows" "$experts" "$top_k" <<'PY'
import random, sys
path, rows, experts, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(18)
layers = 32
# A skewed router: each layer prefers a few experts, as recorded Mixtral traces do.
prefs = [[rng.random() ** 2 + 0.05 for _ in range(experts)] for _ in range(layers)]
with open(path, "w") as f:
    n = 0
    step = 0
    while n < rows:
        for layer in range(layers):
            if n >= rows:
                break
            w = prefs[layer]
            chosen = []
            while len(chosen) < k:
                a = rng.choices(range(experts), weights=w)[0]
                if a not in chosen:
                    chosen.append(a)
            p = [0.5 + 0.5 * rng.random() for _ in chosen]
            total = sum(p)
            f.write('{"step": %d, "layer": %d, "token": 0, "token_id": %d, "phase": "decode", '
                    '"experts": [%s], "weights": [%s]}\n'
                    % (step, layer, rng.randrange(32000), ", ".join(str(a) for a in chosen),
                       ", ".join("%.9g" % (x / total) for x in p)))
            n += 1
        step += 1
PY

config="$out/trace.yaml"
cat > "$config" <<YAML
name: trace-memory
model: {hidden: 4096, ffn: 14336, experts: $experts, top_k: $top_k, layers: 32, heads: 32, kv_heads: 8, head_dim: 128, dtype: bf16}
workload: {source: trace, path: $trace}
hardware: h100-sxm
YAML

trace_bytes=$(stat -c %s "$trace")
printf 'trace: %s rows, top-%s of %s experts, %.1f MB (%s)\n' "$rows" "$top_k" "$experts" "$(echo "$trace_bytes / 1000000" | bc -l)" "$trace"

# moesim's own estimate for the run (estimate_run_bytes, what --memory-limit compares), in MiB, read from
# its refusal under a 1-byte limit; "-" for a build that does not refuse (the baseline's estimate ignored
# the records and the report).
estimate_mib() {
  local bin=$1 extra=$2
  "$bin" run "$config" --no-execute --format json $extra --memory-limit 1B 2>&1 >/dev/null |
    sed -n 's/.*needs about \([0-9.e+]*\) MiB.*/\1/p' | head -1 || true
}

# Runs one build; prints "label peak_kb wall_s report_bytes".
measure() {
  local label=$1 bin=$2 extra=$3
  local log="$out/$label.time" report="$out/$label.json"
  if ! /usr/bin/time -v "$bin" run "$config" --no-execute --format json $extra --out "$report" 2>"$log" >/dev/null; then
    tail -3 "$log" >&2
    echo "bench-trace-memory.sh: $label failed (log: $log)" >&2
    exit 1
  fi
  local peak_kb wall
  peak_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$log")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$log" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
  echo "$label $peak_kb $wall $(stat -c %s "$report")"
}

results=()
if [ -n "$baseline" ]; then results+=("$(measure baseline "$baseline" "$records")"); fi
results+=("$(measure moesim "$moesim" "$records")")

printf '%-9s %12s %14s %9s %11s %18s\n' build "peak RSS MB" "peak / trace" "wall s" "report MB" "estimate / peak"
for r in "${results[@]}"; do
  read -r label kb wall rep <<<"$r"
  if [ "$label" = baseline ]; then est=$(estimate_mib "$baseline" "$records"); else est=$(estimate_mib "$moesim" "$records"); fi
  ratio="-"
  [ -n "$est" ] && ratio=$(awk -v e="$est" -v k="$kb" 'BEGIN { printf "%.2f", e * 1048576 / (k * 1024) }')
  printf '%-9s %12.1f %14.2f %9.2f %11.1f %18s\n' "$label" "$(echo "$kb * 1024 / 1000000" | bc -l)" \
    "$(echo "$kb * 1024 / $trace_bytes" | bc -l)" "$wall" "$(echo "$rep / 1000000" | bc -l)" "$ratio"
done
if [ ${#results[@]} -eq 2 ]; then
  read -r _ bkb bwall brep <<<"${results[0]}"
  read -r _ kb wall rep <<<"${results[1]}"
  printf 'ratios baseline / moesim: peak RSS %.1fx, wall %.1fx, report %.1fx\n' \
    "$(echo "$bkb / $kb" | bc -l)" "$(echo "$bwall / $wall" | bc -l)" "$(echo "$brep / $rep" | bc -l)"
fi
echo "files: $out"
