#!/usr/bin/env bash
# Downloads (here, where the Debian mirror is reachable) the Debian packages rill builds against, into .deps/,
# so tools/gpu_check.sh can unpack them on the GPU machine, which reaches no package registry.
# Run from the repository root before a GPU run; `.deps/` is git-ignored and travels with `carry: [".deps"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
pkgs=(nlohmann-json3-dev libfmt-dev libfmt9 libcli11-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
      libpcre2-posix3 libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian libboost1.81-dev
      libspdlog-dev libspdlog1.10 libedit-dev libedit2 libbsd0 libmd0)
missing=()
for p in "${pkgs[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then apt-get download "${missing[@]}"; fi
ls -1 *.deb | wc -l | xargs echo "debs in .deps:"
# The real Kimi vocabulary, for `tools/gpu_check.sh serve` (a dummy 48B checkpoint needs a tokenizer), packed:
# the device tool carries at most 64 MiB with the tree (~51 MB tracked + the debs), and the 2.7 MB of text is
# 1.3 MB gzipped.
rm -rf kimi
if [[ -d ../../shared/tokenizers/kimi ]]; then tar czf kimi.tar.gz -C ../../shared/tokenizers kimi; fi
