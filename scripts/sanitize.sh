#!/usr/bin/env bash
# Builds moesim and its tests with AddressSanitizer and UndefinedBehaviorSanitizer (CUDA off) into
# build-asan/ and runs the CPU test suite under them (ctest -LE gpu). The moesim binary the CLI tests start
# is instrumented too, so a sanitizer report anywhere fails its test. With clang (scripts/setup.sh installs
# it) the tree is also the libFuzzer tree: -DMOESIM_BUILD_FUZZERS=ON builds tests/fuzz's targets with the
# same objects, and `MOESIM_FUZZ_BUILD_DIR=build-asan scripts/fuzz.sh` runs them without a second build
# (.ci/run does); without clang, the default compiler and no fuzzers. Left out, because they repeat code
# paths the suite runs anyway and cost most of its time under the sanitizers: the `determinism` label (the
# same determinism tests again under each OpenBLAS kernel: bytes, not memory), the tests that model every
# published table at once and the one that calibrates this machine afresh (kHeavy below; the per-table
# validate tests run), and the tests whose checks are
# about bytes or documents over code paths the rest runs (kRepeats: the determinism suite, the key-effects
# matrix, the JSON-schema and provenance walks).
# MOESIM_SANITIZE_ALL=1 runs everything. Extra arguments go to cmake's configure step.
#   ASAN_OPTIONS: leaks are checked; allocator_may_return_null=1 makes a huge allocation throw
#     std::bad_alloc as it does without ASan (moesim reports that as exit 3) instead of aborting.
#   UBSAN_OPTIONS: halt_on_error=1, so any undefined behaviour fails the test that hit it.
#   UBSAN suppressions (build-asan/ubsan.supp): Thrust's own idiom, nothing of moesim: thrust::reference
#     converts through a null System* (reference.h convert_to_value_type -> select_system.inl ->
#     execution_policy.h derived_cast), binding a reference to an empty tag object; inlining reports it
#     in any of the three headers. Only the "null" check is suppressed, only in those files.
#   LeakSanitizer runs with no suppressions.
# Usage: scripts/sanitize.sh [CMAKE_ARGS...]; MOESIM_ASAN_BUILD_DIR overrides build-asan/, MOESIM_JOBS the
# build and test parallelism (default: every core), MOESIM_SANITIZE_CXX=g++ the compiler.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_ASAN_BUILD_DIR:-$root/build-asan}

cxx=${MOESIM_SANITIZE_CXX:-$(command -v clang++ >/dev/null 2>&1 && echo clang++ || echo c++)}
extra=()
if [ "$(basename "$cxx")" = clang++ ]; then
  export CC=clang CXX=clang++
  extra=(-DMOESIM_BUILD_FUZZERS=ON)
else
  export CXX="$cxx"
fi
# -O1 -g1: the sanitizers' usual optimisation, line tables for their stack traces (a full -g costs build time
# and gives the reports nothing they use).
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DMOESIM_CUDA=OFF -DMOESIM_SANITIZE=address,undefined "${extra[@]}" \
  "$@" >/dev/null
cmake --build "$build" -j"${MOESIM_JOBS:-$(nproc)}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1}
printf 'null:%s\n' thrust/detail/reference.h thrust/detail/execution_policy.h \
  thrust/system/detail/generic/select_system.inl >"$build/ubsan.supp"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$build/ubsan.supp}
cd "$build"
# Tests whose checks are about bytes or documents and whose code paths the rest of the suite runs: the
# determinism suite (the same runs again at other thread counts), the key-effects matrix (one run, compare
# and sweep per key), the JSON-schema and provenance walks over every command's output.
kRepeats='^(EveryKey/.*|Determinism\..*|JsonSchema\.EveryFieldIsDocumented|Provenance\.EveryCommandRecordsItsInvocation)$'
kHeavy='^(Published\.(SkewPairsMatchTheMeasuredRatios|PowerLawMeanIsStable|ShippedProfilesCarryTheFit|ModelColumnIsTheNumberRunPrints)|PublishedCli\.(CostModelDocQuotesTheCurrentSummary|GateExitsOneAboveTheLimitAndZeroBelow)|PublishedCommCli\.(PublishedScaleCaseAsDocumented|CostModelDocQuotesTheCurrentSummary)|ValidateCli\.AnotherMachinesProfileIsRecalibratedIntoTheUserCache)$'
if [ "${MOESIM_SANITIZE_ALL:-0}" = 1 ]; then
  ctest --output-on-failure -j"${MOESIM_JOBS:-$(nproc)}" -LE gpu
else
  ctest --output-on-failure -j"${MOESIM_JOBS:-$(nproc)}" -LE 'gpu|determinism' -E "$kHeavy|$kRepeats"
fi
