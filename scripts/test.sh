#!/usr/bin/env bash
# Sets up, builds and runs the whole CPU test suite (GPU tests report themselves skipped without a device).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$@"
cd "${MOESIM_BUILD_DIR:-$root/build}"
ctest --output-on-failure -j1
