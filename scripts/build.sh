#!/usr/bin/env bash
# Configures and builds moesim into build/ (Release), with warnings as errors in moesim's own sources
# (MOESIM_WERROR=OFF scripts/build.sh builds through them). Extra arguments go to cmake's configure step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOESIM_WERROR="${MOESIM_WERROR:-ON}" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
