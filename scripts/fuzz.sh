#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cpp; clang with AddressSanitizer and UBSan) into
# build-fuzz/ (MOESIM_FUZZ_BUILD_DIR: another tree, e.g. scripts/sanitize.sh's build-asan) and runs each for SECONDS (default 60), one after another on one core, starting from
# the seed corpus tests/fuzz/corpus/<target>/ plus what earlier runs found (build-fuzz/corpus/<target>/).
# A crash, a sanitizer report, a timeout or a broken invariant leaves its input in build-fuzz/artifacts/
# and makes the script exit 1: copy it to tests/fuzz/regressions/<target>/ (replayed by ctest, suite
# FuzzRegression) once fixed. Needs clang, libclang-rt-dev and libomp-dev (scripts/setup.sh installs them).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   e.g. scripts/fuzz.sh 600 npy csv
# MOESIM_FUZZ_ARGS adds libFuzzer flags, e.g. "-fork=1 -ignore_crashes=1" to keep going after a finding.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[ $# -gt 0 ] && shift
build=${MOESIM_FUZZ_BUILD_DIR:-$root/build-fuzz}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found; install clang libclang-rt-dev libomp-dev (scripts/setup.sh does)" >&2
  exit 2
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/tests/fuzz/*_fuzz.cpp; do
    n=$(basename "$f" .cpp)
    targets+=("${n%_fuzz}")
  done
fi

# A tree already configured for the fuzzers (scripts/sanitize.sh's clang tree) is built as it is: its
# objects serve the sanitizer suite and the fuzzers alike.
if ! grep -q '^MOESIM_BUILD_FUZZERS:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOESIM_CUDA=OFF \
    -DMOESIM_BUILD_TESTS=OFF -DMOESIM_BUILD_FUZZERS=ON -DMOESIM_SANITIZE=address,undefined >/dev/null
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("${t}_fuzz"); done
cmake --build "$build" -j"$(nproc)" --target "${build_targets[@]}"

# One thread: the fuzzers share the machine. UBSan findings stop the run like ASan ones. The UBSan
# suppressions are Thrust's own idiom (see scripts/sanitize.sh): thrust::reference converts through a null
# System*, binding a reference to an empty tag object; nothing of moesim is suppressed.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
printf 'null:%s\n' thrust/detail/reference.h thrust/detail/execution_policy.h \
  thrust/system/detail/generic/select_system.inl >"$build/ubsan.supp"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$build/ubsan.supp}

status=0
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/${t}_fuzz"
  seeds="$root/tests/fuzz/corpus/$t"
  work="$build/corpus/$t"
  log="$build/${t}_fuzz.log"
  mkdir -p "$work" "$seeds"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="$build/artifacts/${t}-")
  [ -f "$root/tests/fuzz/$t.dict" ] && args+=(-dict="$root/tests/fuzz/$t.dict")
  # shellcheck disable=SC2206
  [ -n "${MOESIM_FUZZ_ARGS:-}" ] && args+=(${MOESIM_FUZZ_ARGS})
  rc=0
  "$exe" "${args[@]}" "$work" "$seeds" >"$log" 2>&1 || rc=$?
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  # -fork mode prints "#EXECS: cov: ..." lines instead of final stats.
  [ -z "$execs" ] && execs=$(grep -aoE '^#[0-9]+: cov' "$log" | tail -1 | tr -dc '0-9' || true)
  units=$(ls "$work" | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $t: ${execs:-0} executions in ${seconds}s, $units new corpus inputs, no finding"
  else
    status=1
    echo "fuzz: $t: FINDING (exit $rc) after ${execs:-?} executions; log $log; input:" >&2
    ls -1 "$build"/artifacts/"${t}"-* 2>/dev/null >&2 || true
    grep -a -m1 -E 'ERROR: |runtime error:|moesim fuzz finding|deadly signal|timeout' "$log" >&2 || tail -5 "$log" >&2
  fi
done
exit $status
