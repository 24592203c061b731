#!/usr/bin/env bash
# Sets up, builds and runs the whole CPU test suite (GPU tests report themselves skipped without a device), then
# checks `pip install .` (scripts/pip-check.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$@"
cd "${MOESIM_BUILD_DIR:-$root/build}"
# One OpenMP pool at a time on a shared machine: idle workers sleep instead of spinning.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
ctest --output-on-failure -j"$(nproc)"
# `pip install .` in a fresh virtual environment, the package index cut off, then `import moesim` elsewhere.
"$root/scripts/pip-check.sh"
