#!/usr/bin/env bash
# Issue #32's acceptance check at full size (N1, N1 under ulimit -s 4096, N2 under an 8 GB address-space cap,
# N3, N4, the disallowed-origin POST), each against a fresh `rill serve` of the tiny model on the CPU,
# loopback only; a chat completion must succeed on the same process after each. Prints a table. Too heavy
# for CI (tests/e2e/liveness_test.mjs is the CI-sized version); takes ~2-3 minutes on 2 cores.
#
#   tools/acceptance/hardening.sh [BUILD_DIR | RILL_BINARY] [MODEL_DIR]
#     BUILD_DIR  holds the rill binary (default: build)
#     MODEL_DIR  the tiny model (default: a temporary one made with `rill tiny-model`)
#   RILL_ACCEPT_ONLY=N1,N3  runs only the named rows (N1 N1s N2 N2b N2s N3 N4 CORS)
# Needs node (>= 18), prlimit (util-linux) and tests/node/node_modules (scripts/setup_node.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rill=${1:-build}
[[ -d $rill ]] && rill="$rill/rill"
rill=$(realpath "$rill")
[[ -x $rill ]] || { echo "no rill binary at $rill" >&2; exit 2; }
command -v prlimit >/dev/null || { echo "prlimit (util-linux) is needed for the address-space and stack caps" >&2; exit 2; }
modules="${RILL_NODE_MODULES:-$root/tests/node/node_modules}"
[[ -d $modules/openai ]] || { echo "no openai client under $modules: run scripts/setup_node.sh" >&2; exit 2; }
model=${2:-}
if [[ -z $model ]]; then
  model=$(mktemp -d)/rill-tiny
  trap 'rm -rf "$(dirname "$model")"' EXIT
  "$rill" tiny-model "$model" >/dev/null
fi
# N3's attacker holds 1,100 sockets and N4 260: the client needs the descriptors.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
node "$root/tools/acceptance/hardening_32.mjs" "$rill" "$model" "$modules"
