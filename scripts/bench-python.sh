#!/usr/bin/env bash
# The Python module's overhead (docs/performance.md "The Python module"): the same routing of a
# (65536 x 256) float32 logits matrix, top-8, through `moesim route --logits FILE.npy` (a whole process: start,
# read, route, metrics, report) and through moesim.route() on the array already in memory (the call alone),
# then a whole Python process (start, import, np.load, route); each pair alternated REPEATS times (default 7)
# and the medians' ratios printed. Needs a build with the module (scripts/build.sh; build/python).
# Usage: scripts/bench-python.sh [REPEATS] (MOESIM_BUILD_DIR: another build).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MOESIM_BUILD_DIR:-$root/build}
repeats=${1:-7}
py=/usr/bin/python3
[ -d "$build/python/moesim" ] || { echo "bench-python: no $build/python/moesim: build with pybind11-dev (scripts/build.sh)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
PYTHONPATH="$build/python" "$py" - "$build/moesim" "$work" "$repeats" <<'PY'
import os, statistics, subprocess, sys, time
import numpy as np
import moesim

binary, work, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
path = os.path.join(work, "logits.npy")
x = np.random.default_rng(0).standard_normal((65536, 256), dtype=np.float32)
np.save(path, x)
one = os.path.join(work, "one.py")
with open(one, "w") as f:
    f.write("import numpy as np, moesim\nmoesim.route(np.load(%r), top_k=8)\n" % path)
env = dict(os.environ)

def wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t

cli, call, whole = [], [], []
for _ in range(repeats):
    cli.append(wall([binary, "route", "--logits", path, "--top-k", "8", "--format", "json"]))
    t = time.perf_counter()
    r = moesim.route(x, top_k=8)
    call.append(time.perf_counter() - t)
    whole.append(wall([sys.executable, one]))
# The same numbers both ways (the full comparison is tests/python/test_moesim.py).
out = subprocess.run([binary, "route", "--logits", path, "--top-k", "8", "--format", "json"], check=True,
                     capture_output=True, text=True).stdout
import json
assert json.loads(out)["metrics"] == r.metrics
m = {k: statistics.median(v) for k, v in (("cli", cli), ("call", call), ("whole", whole))}
print(f"route 65536 x 256 float32, top-8, {repeats} alternated repeats, medians:")
print(f"  moesim route --logits (whole process)      {1e3 * m['cli']:8.1f} ms")
print(f"  moesim.route(array) (the call)             {1e3 * m['call']:8.1f} ms   {m['call'] / m['cli']:.2f}x the CLI")
print(f"  python3: import, np.load, moesim.route     {1e3 * m['whole']:8.1f} ms   {m['whole'] / m['cli']:.2f}x the CLI")
PY
