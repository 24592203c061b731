#!/usr/bin/env bash
# Sets up, builds (Release) and runs the main job on the built-in default experiment: every gating
# strategy side by side, routed, executed on the CPU and costed on one H100 and on 8 (configs/quickstart.yaml),
# each modeled time split into what imbalance, tiles, padding and the all-to-all cost. Then the erosion
# picture: time per token against the batch, routed against balanced, with both knees marked, written
# under MOESIM_DEMO_OUT (default build/demo) and its path printed. Extra arguments go to `moesim compare`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
moesim="${MOESIM_BUILD_DIR:-$root/build}/moesim"
out="${MOESIM_DEMO_OUT:-$root/build/demo}"
mkdir -p "$out"
"$moesim" compare --gating all "$@"
echo
"$moesim" sweep --vary workload.batch=64..16384*2 --format csv --out "$out/erosion.csv"
"$moesim" sweep --vary workload.batch=64..16384*2 | sed -n '/^knee/,$p'
/usr/bin/python3 "$root/scripts/plot.py" "$out/erosion.csv" --out "$out" --prefix erosion --title "moesim demo" >/dev/null
echo "picture: $out/erosion-knee.png (time per token, routed vs balanced, knees marked)"
