#!/usr/bin/env bash
# Sets up, builds (Release) and runs the main job on the built-in default experiment: every gating
# strategy side by side, routed, executed on the CPU and costed on the default hardware profile.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
"${MOESIM_BUILD_DIR:-$root/build}/moesim" compare --gating all "$@"
