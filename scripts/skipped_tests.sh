#!/usr/bin/env bash
# Lists what the last ctest run skipped and why, grouped by reason: gtest tests (`Skipped` + the reason, then
# `[  SKIPPED ] Suite.Name`) and node tests (`label: SKIPPED: reason`), read from ctest's LastTest.log. ctest
# shows only whole programs as skipped; `make test` ends with this list so the reasons (missing shared test
# data, no GPU) are on screen. Prints nothing when nothing was skipped.
#
#   scripts/skipped_tests.sh [BUILD=build]
set -euo pipefail
log="${1:-build}/Testing/Temporary/LastTest.log"
[[ -f $log ]] || exit 0
awk '
  function add(reason, name) {
    if (!(reason in seen)) { seen[reason] = 1; order[++n_reasons] = reason }
    key = reason SUBSEP program
    if (!(key in count)) programs[reason] = programs[reason] SUBSEP program
    count[key]++
    if (count[key] <= 6) names[key] = names[key] " " name
  }
  /^[0-9]+\/[0-9]+ Test: / { program = $3; sub(/\..*/, "", program); reason = ""; next }  # gtest entries: PROGRAM.Suite.Test
  /^\[ RUN      \] / { reason = ""; next }
  /: Skipped$/ { getline reason; next }
  /^\[  SKIPPED \] .* \([0-9]+ ms\)$/ { add(reason == "" ? "(no reason given)" : reason, $4); next }
  match($0, /^[A-Za-z0-9_]+: SKIPPED: /) { add(substr($0, RLENGTH + 1), "(the whole test)"); next }
  END {
    if (n_reasons == 0) exit
    print "Skipped (each reason once; CI=true turns missing shared test data into failures):"
    for (r = 1; r <= n_reasons; r++) {
      reason = order[r]
      print "  " reason
      n_progs = split(substr(programs[reason], 2), progs, SUBSEP)
      for (p = 1; p <= n_progs; p++) {
        key = reason SUBSEP progs[p]
        more = count[key] > 6 ? sprintf(" ... (%d tests)", count[key]) : ""
        print "    " progs[p] ":" names[key] more
      }
    }
  }
' "$log"
