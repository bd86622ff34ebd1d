#!/usr/bin/env bash
# Downloads (here, where the Debian mirror is reachable) the Debian packages rill builds against, into .deps/,
# so tools/gpu_check.sh can unpack them on the GPU machine, which reaches no package registry.
# Run from the repository root before a GPU run; `.deps/` is git-ignored and travels with `carry: [".deps"]`.
# The device tool carries at most 64 MiB with the tree (~51 MiB of it tracked), so what travels is packed small.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
pkgs=(nlohmann-json3-dev libfmt-dev libfmt9 libcli11-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
      libpcre2-posix3 libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
      libspdlog-dev libspdlog1.10 libedit-dev libedit2 libbsd0 libmd0)
missing=()
for p in "${pkgs[@]}"; do ls "${p}"_*.deb >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then apt-get download "${missing[@]}"; fi
ls -1 *.deb | wc -l | xargs echo "debs in .deps:"

# Boost: rill uses only header-only Beast/Asio (src/server/http, src/cli/http_client.cc), so instead of the 10 MB
# libboost1.81-dev package .deps holds the Boost libraries those headers reach, each in full: the preprocessor's
# closure of Asio's and Beast's umbrella headers and of rill's own includes names the libraries (asio, beast,
# core, mp11, system, ...), and every header of each travels, since the GPU machine's g++ may take other branches
# and a header missing here would be taken from that machine's own (other) Boost version: ~3.7 MB gzipped.
if ! [[ -f boost-headers.tar.gz ]]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download libboost1.81-dev >/dev/null 2>&1 && dpkg-deb -x libboost1.81-dev_*.deb root)
  { grep -h '#include <boost/' ../src/server/http/*.cc ../src/server/http/*.h ../src/cli/*.cc
    printf '#include <boost/%s>\n' asio.hpp beast.hpp asio/ssl.hpp; } | sort -u > "$tmp/all.h"
  libs=$(g++ -std=c++20 -fcoroutines -M -x c++ -I"$tmp/root/usr/include" "$tmp/all.h" | tr ' \\' '\n\n' \
           | sed -n 's|.*usr/include/boost/\([^/]*\)/.*|\1|p' | sort -u)
  (cd "$tmp/root" && find usr/include/boost -maxdepth 1 -name '*.hpp' && for l in $libs; do find usr/include/boost/$l -type f; done) \
    | tar czf boost-headers.tar.gz -C "$tmp/root" -T -
  rm -rf "$tmp"
fi
rm -f libboost1.81-dev_*.deb

# The real Kimi vocabulary, for `tools/gpu_check.sh serve` (a dummy 48B checkpoint needs a tokenizer): the 2.7 MB
# of text is 1.3 MB gzipped.
rm -rf kimi
if [[ -d ../../shared/tokenizers/kimi ]]; then tar czf kimi.tar.gz -C ../../shared/tokenizers kimi; fi
