#!/usr/bin/env bash
# `pip install .` as a Python user does it, checked: a fresh virtual environment (Debian's python3 with its
# system packages, where NumPy and nothing else of moesim's comes from), `pip install` of this clone with
# network access cut off (PIP_NO_INDEX: every requirement must already be there), then `import moesim` from
# another folder, and one call against the CLI's answer. Uses the build backend in python/backend (the
# standard library only) and a build tree of its own (build-pip/, or MOESIM_PIP_BUILD_DIR; ccache serves
# what the main build compiled). Needs python3-venv (scripts/setup.sh). Run by scripts/test.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${MOESIM_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv" || {
  echo "pip-check: cannot make a virtual environment with $python (apt-get install python3-venv)" >&2; exit 1; }
# The compile flags of scripts/build.sh, so that ccache serves what the main build compiled.
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 MOESIM_PIP_CMAKE_ARGS="${MOESIM_PIP_CMAKE_ARGS:--DMOESIM_WERROR=${MOESIM_WERROR:-ON}}" \
  "$work/venv/bin/pip" install --quiet "$root"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import os, sys
import moesim
where = os.path.dirname(moesim.__file__)
assert "site-packages" in where, f"moesim imported from {where}, not the environment's site-packages"
profile = moesim.hardware("h100-sxm")
assert profile["critical_batch"]["bf16"] > 0, profile
print(f"pip-check: moesim {moesim.__version__} from {where} ({sys.executable}); h100-sxm bf16 critical batch "
      f"{profile['critical_batch']['bf16']:.0f}")
PY
