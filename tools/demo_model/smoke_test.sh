#!/usr/bin/env bash
# The demo model's whole path on a CPU, before GPU time is spent: train.py --smoke (a tiny config, 4 steps
# through tools/reference/kimi_k3_reference.py; needs PyTorch, e.g. Debian's python3-torch, not transformers)
# writes a Moonshot-layout checkpoint from .deps/demo_corpus; rill must validate it, and `rill perplexity` on
# the held-out ids and on the held-out text must both equal the script's own figure within 1e-4.
#   PYTHON=/usr/bin/python3 RILL=build/rill tools/demo_model/smoke_test.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/usr/bin/python3}
RILL=${RILL:-build/rill}
DATA=${DATA:-.deps/demo_corpus}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[[ -f $DATA/heldout.bin ]] || { echo "smoke_test.sh: no $DATA/heldout.bin (run tools/demo_model/fetch_corpus.sh)" >&2; exit 1; }
"$PYTHON" tools/demo_model/train.py --smoke --data "$DATA" --out "$out/m"
"$RILL" inspect "$out/m" | grep -q "validation   ok" || { "$RILL" inspect "$out/m"; exit 1; }
want=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["head"]["perplexity"])' "$out/m/perplexity.json")
status=0
for input in "$DATA/heldout.bin --ids" "$DATA/heldout.txt"; do
  # shellcheck disable=SC2086
  got=$("$RILL" perplexity "$out/m" $input --context 64 --chunks 2 --device cpu --json 2>/dev/null |
        "$PYTHON" -c 'import json,sys; print(json.loads(sys.stdin.read())["perplexity"])')
  if "$PYTHON" -c 'import sys; g,w=map(float,sys.argv[1:]); sys.exit(abs(g/w-1) > 1e-4)' "$got" "$want"; then
    echo "ok   rill perplexity ($input) $got == train.py $want"
  else
    echo "FAIL rill perplexity ($input) $got != train.py $want"; status=1
  fi
done
exit $status
