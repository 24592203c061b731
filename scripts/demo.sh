#!/usr/bin/env bash
# Sets up, builds and runs the main job on the built-in default experiment: every gating strategy side by
# side, routed, executed on the CPU and costed on one H100 and on 8 (configs/quickstart.yaml), each modeled
# time split into what imbalance, tiles, padding and the all-to-all cost. Then the erosion picture: time per
# token against the batch, routed against balanced, with both knees marked, written under MOESIM_DEMO_OUT
# (default build-demo/demo) and its path printed. Extra arguments go to `moesim compare`.
#
# Only what the demo runs is installed and built: scripts/setup.sh --demo, then the moesim binary alone
# (no tests) in its own folder, build-demo/ (MOESIM_DEMO_BUILD_DIR), so that a later scripts/test.sh in
# build/ still configures and builds everything. The CUDA backend is built when a GPU is present
# (nvidia-smi -L lists one) or when asked: MOESIM_CUDA=ON scripts/demo.sh (OFF never builds it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" --demo
build=${MOESIM_DEMO_BUILD_DIR:-$root/build-demo}
cuda=${MOESIM_CUDA:-}
if [ -z "$cuda" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then cuda=ON; else cuda=OFF; fi
fi
[ "$cuda" != OFF ] && [ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOESIM_BUILD_TESTS=OFF -DMOESIM_CUDA="$cuda" >/dev/null
cmake --build "$build" -j"$(nproc)" --target moesim
moesim="$build/moesim"
out="${MOESIM_DEMO_OUT:-$build/demo}"
mkdir -p "$out"
"$moesim" compare --gating all "$@"
echo
"$moesim" sweep --vary workload.batch=64..16384*2 --format csv --out "$out/erosion.csv"
"$moesim" sweep --vary workload.batch=64..16384*2 | sed -n '/^knee/,$p'
/usr/bin/python3 "$root/scripts/plot.py" "$out/erosion.csv" --out "$out" --prefix erosion --title "moesim demo" >/dev/null
echo "picture: $out/erosion-knee.png (time per token, routed vs balanced, knees marked)"
