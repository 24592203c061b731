#!/usr/bin/env bash
# Installs what moesim needs to build and test on Debian (12 or later). Idempotent: installs only
# what is missing and prints it. Works as root; uses sudo otherwise.
#   scripts/setup.sh          everything: the build, the tests, the fuzzers, MPI, the benchmarks
#   scripts/setup.sh --demo   only what scripts/demo.sh needs: the build of the moesim binary and the picture
set -euo pipefail

# scripts/demo.sh: compilers, the libraries moesim links, the Thrust/CUB headers, and plot.py's Python.
demo_packages=(
  cmake g++ make ccache pkg-config
  libyaml-cpp-dev libboost-program-options-dev nlohmann-json3-dev libzip-dev
  libopenblas-openmp-dev
  libthrust-dev libcub-dev
  python3 python3-numpy python3-matplotlib
)
packages=(
  "${demo_packages[@]}"
  libgtest-dev libbenchmark-dev
  clang libclang-rt-dev libomp-dev   # scripts/fuzz.sh: libFuzzer, sanitizer runtimes, OpenMP for clang
  openmpi-bin libopenmpi-dev
  pybind11-dev python3-dev           # the Python module (python/, import moesim)
  python3-venv                       # scripts/pip-check.sh: `pip install .` into a fresh virtual environment
  python3-torch                      # its recorder's test (moesim.torch.record on a torch MoE)
  chromium                           # the HTML report rendered headless in its test (tests/report/report_html_test.cpp)
)
case "${1:-}" in
  --demo) packages=("${demo_packages[@]}") ;;
  "") ;;
  *) echo "setup: expected no argument or --demo, got '$1'" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
