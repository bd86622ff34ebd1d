#!/usr/bin/env bash
# Installs every Debian package rill's build and tests need. Idempotent: does nothing when all are present,
# so it is cheap to run before every build. Needs root (or sudo) only when something is missing.
set -euo pipefail

# `scripts/setup.sh` installs what building `rill` needs (make demo); `scripts/setup.sh --test` adds what the
# test suite and its tools need (make test), so a user who only serves a model gets no browser or MPI.
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  nlohmann-json3-dev libboost1.81-dev libpcre2-dev libcli11-dev libfmt-dev
  libspdlog-dev libedit-dev
  libgtest-dev python3  # CMake configures the test programs beside rill (it requires GTest and python3)
)
TEST_PACKAGES=(
  libgmock-dev libbenchmark-dev tmux
  python3-jinja2 nodejs npm
  chromium  # headless, for tests/e2e/browser_test.mjs: a real page calling the server through CORS
  gnuplot-nox
  libopenmpi-dev openmpi-bin  # optional in CMake: multi-process launch (mpirun) and the MPI communicator
)
tests=false
case "${1:-}" in
  --test) tests=true ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--test]   (--test: also the test suite's packages)" >&2; exit 2 ;;
esac
if $tests; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node and npm may come from outside Debian (e.g. a nodesource install); accept any working pair.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The tests run `python3` from PATH with jinja2 as their template oracle; a python3 ahead of Debian's (pyenv,
# a venv) needs its own jinja2.
if $tests && ! python3 -c 'import jinja2' 2>/dev/null; then
  echo "setup: $(command -v python3) cannot import jinja2 (the tests need it): pip install jinja2 there," \
       "or put /usr/bin first on PATH" >&2
fi

# The CUDA toolkit is optional: without nvcc rill builds the CPU backend only.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: nvcc found at /usr/local/cuda/bin (add it to PATH, or the build finds it through CUDAToolkit)"
fi
