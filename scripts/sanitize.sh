#!/usr/bin/env bash
# Builds moesim and its tests with AddressSanitizer and UndefinedBehaviorSanitizer (the default compiler,
# -DMOESIM_SANITIZE=address,undefined, CUDA off) into build-asan/ and runs the CPU test suite under them
# (ctest -LE gpu). The moesim binary the CLI tests start is instrumented too, so a sanitizer report anywhere
# fails its test. Left out, because they repeat code paths the suite runs anyway and cost most of its
# time under the sanitizers: the `determinism` label (the same determinism tests again under each OpenBLAS
# kernel: bytes, not memory) and the tests that model every published table at once (kHeavy below; the
# per-table validate tests run). MOESIM_SANITIZE_ALL=1 runs everything. Extra arguments go to cmake's
# configure step.
#   ASAN_OPTIONS: leaks are checked; allocator_may_return_null=1 makes a huge allocation throw
#     std::bad_alloc as it does without ASan (moesim reports that as exit 3) instead of aborting.
#   UBSAN_OPTIONS: halt_on_error=1, so any undefined behaviour fails the test that hit it.
#   UBSAN suppressions (build-asan/ubsan.supp): Thrust's own idiom, nothing of moesim: thrust::reference
#     converts through a null System* (reference.h convert_to_value_type -> select_system.inl ->
#     execution_policy.h derived_cast), binding a reference to an empty tag object; inlining reports it
#     in any of the three headers. Only the "null" check is suppressed, only in those files.
#   LeakSanitizer runs with no suppressions.
# Usage: scripts/sanitize.sh [CMAKE_ARGS...]; MOESIM_ASAN_BUILD_DIR overrides build-asan/, MOESIM_JOBS the
# build parallelism (default: every core).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_ASAN_BUILD_DIR:-$root/build-asan}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOESIM_CUDA=OFF \
  -DMOESIM_SANITIZE=address,undefined "$@" >/dev/null
cmake --build "$build" -j"${MOESIM_JOBS:-$(nproc)}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1}
printf 'null:%s\n' thrust/detail/reference.h thrust/detail/execution_policy.h \
  thrust/system/detail/generic/select_system.inl >"$build/ubsan.supp"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$build/ubsan.supp}
cd "$build"
kHeavy='^(Published\.(SkewPairsMatchTheMeasuredRatios|PowerLawMeanIsStable|ShippedProfilesCarryTheFit|ModelColumnIsTheNumberRunPrints)|PublishedCli\.(CostModelDocQuotesTheCurrentSummary|GateExitsOneAboveTheLimitAndZeroBelow))$'
if [ "${MOESIM_SANITIZE_ALL:-0}" = 1 ]; then
  ctest --output-on-failure -j1 -LE gpu
else
  ctest --output-on-failure -j1 -LE 'gpu|determinism' -E "$kHeavy"
fi
