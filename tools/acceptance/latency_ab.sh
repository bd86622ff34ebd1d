#!/usr/bin/env bash
# Streaming latency A/B on the CPU (issue #32: "no worse than today, same machine, alternated runs"): starts
# `rill serve` of the tiny model with each binary in turn (A, B, A, B, ...) and runs the same `rill bench serve`
# (vLLM's flags) at each concurrency against it; prints one row per run with the median TTFT/TPOT/ITL and the
# load average read just before it (other work on the machine moves the numbers: compare neighbouring rows).
#
#   tools/acceptance/latency_ab.sh RILL_A RILL_B MODEL_DIR [ROUNDS] [CONCURRENCIES]
#     ROUNDS         A/B pairs per concurrency (default 2)
#     CONCURRENCIES  comma list (default 1,64)
#   BENCH_ARGS       the bench's workload (default below); the client is RILL_B's `rill bench serve` for both
#   OUT              directory for the result JSONs and server logs (default: a temporary one)
set -euo pipefail
a=$1 b=$2 model=$3 rounds=${4:-2} concs=${5:-1,64}
bench_args=${BENCH_ARGS:---num-prompts 64 --random-input-len 64 --random-output-len 32 --ignore-eos --seed 0}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "A = $a ($("$a" --version 2>/dev/null | head -1 || true))"
echo "B = $b ($("$b" --version 2>/dev/null | head -1 || true))"
echo "bench: rill bench serve $bench_args --max-concurrency C; results in $out"
printf '| run | binary | conc | median TTFT ms | median TPOT ms | median ITL ms | output tok/s | load avg (1/5/15 min) |\n|---|---|---|---|---|---|---|---|\n'
n=0
for round in $(seq 1 "$rounds"); do
  for c in ${concs//,/ }; do
    for side in A B; do
      bin=$a; [[ $side == B ]] && bin=$b
      n=$((n + 1))
      log="$out/serve_${n}_${side}_c${c}.log"
      : >"$log"  # exists before the server's shell opens it: the port grep below may run first
      "$bin" serve "$model" --device cpu --port 0 >"$log" 2>&1 &
      pid=$!
      trap 'kill -TERM $pid 2>/dev/null || true' EXIT
      port=""
      for _ in $(seq 1 600); do
        port=$(grep -oE 'listening on http://[^:]+:[0-9]+' "$log" | grep -oE '[0-9]+$' || true)
        [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
        sleep 0.1
      done
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      res="$out/run_${n}_${side}_c${c}.json"
      # shellcheck disable=SC2086
      rc=0
      "$b" bench serve --url "http://127.0.0.1:$port" --max-concurrency "$c" $bench_args --result-file "$res" \
        >"$out/bench_${n}_${side}_c${c}.txt" 2>&1 || rc=$?
      kill -TERM "$pid"; wait "$pid" || true
      [[ $rc == 0 ]] || { echo "run $n ($side, c=$c): rill bench serve failed ($rc):"; tail -5 "$out/bench_${n}_${side}_c${c}.txt"; exit 1; }
      python3 - "$res" "$n" "$side" "$c" "$load" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r = r[0] if isinstance(r, list) else r
med = lambda k: r.get(f"median_{k}_ms", r.get(f"p50_{k}_ms", float("nan")))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {med('ttft'):.2f} | {med('tpot'):.2f} | {med('itl'):.2f} | "
      f"{r.get('output_throughput', float('nan')):.0f} | {sys.argv[5]} |")
PY
    done
  done
done
