#!/usr/bin/env bash
# Installs what moesim needs to build and test on Debian (12 or later). Idempotent: installs only
# what is missing and prints it. Works as root; uses sudo otherwise.
set -euo pipefail

packages=(
  cmake g++ make ccache pkg-config
  libyaml-cpp-dev libboost-program-options-dev nlohmann-json3-dev libzip-dev
  libopenblas-openmp-dev libgtest-dev libbenchmark-dev
  libthrust-dev libcub-dev
  clang libclang-rt-dev libomp-dev   # scripts/fuzz.sh: libFuzzer, sanitizer runtimes, OpenMP for clang
  openmpi-bin libopenmpi-dev
  python3 python3-numpy python3-matplotlib
)

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
