#!/usr/bin/env bash
# Refits the kernel model's figures to every published table and ships them (scripts/fit-profiles.py):
# the GPU profiles in configs/hardware/, the pooled fit in src/cost/hardware_profile.hpp and the table in
# docs/cost-model.md "Fitted profiles". Builds moesim, fits, rebuilds with the new figures, then writes the
# doc's errors from the rebuilt binary (the model column is the shipped profiles').
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_BUILD_DIR:-$root/build}
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)" --target moesim >/dev/null
python3 "$root/scripts/fit-profiles.py" "$build/moesim"
cmake --build "$build" -j"$(nproc)" --target moesim >/dev/null
python3 "$root/scripts/fit-profiles.py" "$build/moesim" --doc-only
