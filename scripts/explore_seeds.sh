#!/usr/bin/env bash
# Runs the randomised test suites (ctest label `random`) over K fresh seeds, to find failures the commit's own
# seed does not hit (CI runs that one only; tests/README.md "Seeds"). Each round draws one seed and passes it to
# every suite as RILL_TEST_SEED, so a failing round is replayed exactly by the command printed at the end.
#
#   scripts/explore_seeds.sh [K=10] [extra ctest arguments, e.g. -R jinja_test -j 2]
# BUILD selects the build directory (default build). Exits 1 when any round failed.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
shift || true
build=${BUILD:-build}
failed=()
for ((i = 1; i <= rounds; i++)); do
  seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
  log="$build/explore_seed_$seed.log"
  if RILL_TEST_SEED=$seed ctest --test-dir "$build" -L random --output-on-failure "$@" > "$log" 2>&1; then
    echo "round $i/$rounds: seed $seed ok"
    rm -f "$log"
  else
    echo "round $i/$rounds: seed $seed FAILED ($log)"
    failed+=("$seed")
  fi
done
((${#failed[@]} == 0)) && exit 0
echo "failing seeds: ${failed[*]}; replay one with:"
echo "  RILL_TEST_SEED=${failed[0]} ctest --test-dir $build -L random --output-on-failure"
exit 1
