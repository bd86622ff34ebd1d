#!/usr/bin/env bash
# The one script run on the GPU machine (device tool): build with ninja -j16, run the GPU tests (and the CPU
# model tests as a sanity check), compute-sanitizer over the GPU test suite, then the benchmarks. Every log
# goes under $OUT; the last lines printed are a summary table.
#
#   here:  tools/fetch_gpu_deps.sh
#   run:   tools/gpu_check.sh [all|test|sanitize|reference|peers|bench|spec|prefix|tiers|k3bench|serve|profile|cmd]...
#          (device tool, carry: [".deps"]; `all` is everything but profile and cmd)
#   GPU_TARGETS=... narrows the build; `cmd` runs $CMD in the build directory after it (a diagnostic run).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rill-gpu-out}
LOGS=/tmp/rill-gpu-logs  # everything is written here, then packed into $OUT/logs.tgz (the device tool
rm -rf $LOGS             # returns at most 8 files)
mkdir -p "$OUT" $LOGS
trap 'tar czf "$OUT/logs.tgz" -C $LOGS . 2>/dev/null' EXIT
what=("$@")
[[ ${#what[@]} -eq 0 ]] && what=(all)
want() { for w in "${what[@]}"; do [[ ($w == all && $1 != profile && $1 != cmd) || $w == "$1" ]] && return 0; done; return 1; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
summary=()
note() { summary+=("$1"); echo "== $1"; }

# --- dependencies: unpack the carried Debian packages into a private prefix ---------------------------
DEPS=/tmp/rill-deps
if [[ -d .deps ]] && ! [[ -f $DEPS/.done ]]; then
  mkdir -p $DEPS
  for f in .deps/*.deb; do dpkg-deb -x "$f" $DEPS; done
  [[ -f .deps/boost-headers.tar.gz ]] && tar xzf .deps/boost-headers.tar.gz -C $DEPS  # Beast/Asio's headers
  touch $DEPS/.done
fi
export CMAKE_PREFIX_PATH=$DEPS/usr:${CMAKE_PREFIX_PATH:-}
export PKG_CONFIG_PATH=$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$DEPS
export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export CPATH=$DEPS/usr/include:${CPATH:-}
export PATH=$DEPS/usr/bin:/usr/local/cuda/bin:$PATH

# --- build --------------------------------------------------------------------------------------------
# Warnings are errors in CI (g++ 12, the project's toolchain); the GPU image's g++ 13 at -O3 adds false
# positives (-Wstringop-overread in std::equal), so warnings stay warnings here.
BUILD=build-gpu
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv > "$LOGS/gpu.txt" 2>&1
git rev-parse --short HEAD > "$LOGS/commit.txt" 2>/dev/null || echo unknown > "$LOGS/commit.txt"
if ! cmake -S . -B $BUILD -G Ninja -DRILL_CUDA=ON -DCCACHE_PROGRAM=OFF -DRILL_WERROR=OFF -DCMAKE_BUILD_TYPE=Release > "$LOGS/configure.log" 2>&1; then
  note "configure FAILED (see configure.log)"; tail -30 "$LOGS/configure.log"; exit 1
fi
# The GPU-relevant targets first (tests, kernel labs); the rill binary separately, so a server-side build
# problem cannot hide kernel results.
GPU_TARGETS=${GPU_TARGETS:-"backend_tests model_gpu_tests engine_gpu_tests runner_gpu_tests model_tests dist_cuda_tests"}
all_targets=$(ninja -C $BUILD -t targets all 2>/dev/null)  # (not piped into grep -q: pipefail + SIGPIPE)
want bench && for t in kda_bench kda_rollback_bench mla_bench kernel_lab grouped_gemm_bench; do
  [[ $'\n'"$all_targets" == *$'\n'"$t: "* ]] && GPU_TARGETS+=" $t"
done
if want test || want sanitize || want bench || want cmd; then
  if ! timeout ${BUILD_TIMEOUT:-420} ninja -C $BUILD -j16 $GPU_TARGETS > "$LOGS/build.log" 2>&1; then
    note "build FAILED (see build.log)"; grep -E "error|Error" "$LOGS/build.log" | head -40; exit 1
  fi
  note "build ok ($GPU_TARGETS)"
fi
if want bench || want spec || want serve || want profile || want prefix || want tiers || want k3bench || want reference || want peers; then
  timeout 300 ninja -C $BUILD -j16 rill > "$LOGS/build_rill.log" 2>&1 && note "rill built" || note "rill build FAILED"
fi

# --- tests --------------------------------------------------------------------------------------------
if want test; then
  # One ctest entry per gtest test (each its own process and CUDA context): GPU_TEST_JOBS processes share the GPU,
  # except the engine tests, which run one at a time: an engine sizes its caches from the GPU memory free when
  # it starts, so two at once starve each other ("no device memory left for the KV cache", seen on an H100).
  (cd $BUILD && timeout ${TEST_TIMEOUT:-300} ctest -L gpu -E '^engine_gpu_tests' -j ${GPU_TEST_JOBS:-4} \
     --output-on-failure --timeout 280; a=$?; timeout 200 ctest -L gpu -R '^engine_gpu_tests' -j 1 \
     --output-on-failure --timeout 190; b=$?; exit $((a || b))) > "$LOGS/gpu_tests.log" 2>&1
  rc=$?
  note "gpu tests: $( [[ $rc == 0 ]] && echo PASS || echo FAIL ) ($(grep -cE '^\[  FAILED  \]' "$LOGS/gpu_tests.log") failed cases)"
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is|rel|seed' "$LOGS/gpu_tests.log" | head -60
  (cd $BUILD && timeout 120 ctest -R '^model_tests\.' -j 16 --output-on-failure) > "$LOGS/cpu_model_tests.log" 2>&1
  note "cpu model tests: $( [[ $? == 0 ]] && echo PASS || echo FAIL )"
fi
if want sanitize; then
  # SANITIZE_TARGETS narrows the executables (default: all four GPU test programs).
  for t in ${SANITIZE_TARGETS:-model_gpu_tests engine_gpu_tests runner_gpu_tests backend_tests}; do
    exe=$(find $BUILD/tests -name $t -type f | head -1)
    # SANITIZE_FILTER (a gtest filter) narrows backend_tests to the kernels that changed, to fit a short run.
    filter=(); [[ $t == backend_tests && -n ${SANITIZE_FILTER:-} ]] && filter=(--gtest_filter="$SANITIZE_FILTER")
    timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer --tool memcheck --error-exitcode 3 "$exe" --gtest_brief=1 "${filter[@]}" \
      > "$LOGS/memcheck_$t.log" 2>&1
    rc=$?
    note "compute-sanitizer memcheck $t: $( [[ $rc == 0 ]] && echo clean || ([[ $rc == 124 ]] && echo "timed out" || echo "ERRORS rc=$rc") )"
    grep -E "ERROR SUMMARY|Invalid|out of bounds|FAILED" "$LOGS/memcheck_$t.log" | head -8
  done
fi

if want cmd; then
  (cd $BUILD && timeout ${CMD_TIMEOUT:-300} bash -c "$CMD") > "$LOGS/cmd.log" 2>&1
  note "cmd: rc=$?"
  tail -${CMD_TAIL:-150} "$LOGS/cmd.log"
fi

# --- independent references (PyTorch + transformers on this machine; nothing of rill but its checkpoints) -
if want reference; then
  # How far transformers' own bf16 run is from its fp32 run on the same tiny checkpoints (design.md §5 bound).
  tiny=/tmp/rill-tiny-ref && rm -rf $tiny && [[ -x $BUILD/rill ]] && $BUILD/rill tiny-model $tiny --force > /dev/null 2>&1
  timeout ${REF_TIMEOUT:-240} python3 tools/reference/transformers_bf16_error.py tests/data/kimi_linear_tiny_a \
    tests/data/kimi_linear_tiny_b $tiny > "$LOGS/bf16_yardstick.log" 2>&1
  note "transformers bf16 vs fp32 yardstick: rc=$?"
  grep -E "positions|worst|not loadable|Error" "$LOGS/bf16_yardstick.log" | head -8
  if [[ -f tools/reference/kimi_k3_transformers.py ]]; then
    timeout ${REF_TIMEOUT:-240} python3 tools/reference/kimi_k3_transformers.py --check tests/data/kimi_k3_tiny_a \
      tests/data/kimi_k3_tiny_b --bf16-yardstick tests/data/kimi_k3_tiny_a tests/data/kimi_k3_tiny_b \
      > "$LOGS/k3_transformers_reference.log" 2>&1
    note "K3 reference on transformers' kimi_linear modules vs the K3 fixtures: rc=$?"
    grep -E "RESULT|YARDSTICK|ALL PASS|FAILED" "$LOGS/k3_transformers_reference.log"
  fi
fi

# --- peers on the same GPU (issue #33): transformers' KimiLinear composed like `rill bench --composed`, fla's
# chunk_kda alone; PEER_ARGS passes options (e.g. "--kda-tokens 8192 32768 --tokens 8192")
# flash-linear-attention is not on the device image: a copy of its `fla` package (pure Python + Triton) carried as
# .deps/fla.tar.gz (tools/README.md) is put on PYTHONPATH for this run only.
if want peers && [[ -x $BUILD/rill ]]; then
  $BUILD/rill bench --preset kimi-linear-48b --print-config > /tmp/rill-48b-config.json 2> "$LOGS/peer_config.log"
  peer_path=${PYTHONPATH:-}
  if [[ -f .deps/fla.tar.gz ]]; then
    rm -rf /tmp/rill-fla && mkdir -p /tmp/rill-fla && tar xzf .deps/fla.tar.gz -C /tmp/rill-fla &&
      peer_path=/tmp/rill-fla${peer_path:+:$peer_path}
  fi
  PYTHONPATH=$peer_path timeout ${PEER_TIMEOUT:-300} python3 tools/reference/peer_prefill.py /tmp/rill-48b-config.json \
    ${PEER_ARGS:-} > "$LOGS/peer_prefill.log" 2>&1
  note "peers (transformers composed, fla chunk_kda): rc=$?"
  grep -E "RESULT|transformers [0-9]|model options|slice|chunk_kda|not importable|failed|Error" "$LOGS/peer_prefill.log" | head -20
fi

# --- benchmarks -----------------------------------------------------------------------------------------
if want bench; then
  for lab in $BUILD/bench/kernels/*_bench $BUILD/bench/kernels/kernel_lab; do
    [[ -x $lab && ${LABS:-1} == 1 ]] || continue  # LABS=0: only the whole-model bench
    name=$(basename "$lab")
    timeout ${LAB_TIMEOUT:-120} "$lab" --quick > "$LOGS/$name.log" 2>&1
    note "kernel lab $name: rc=$?"
    tail -25 "$LOGS/$name.log"
  done
  if [[ -x $BUILD/rill ]]; then
    timeout ${BENCH_TIMEOUT:-240} $BUILD/rill bench --load-format dummy --preset kimi-linear-48b --markdown "$OUT/bench.md" \
      > "$LOGS/rill_bench.log" 2>&1
    note "rill bench: rc=$?"
    tail -40 "$LOGS/rill_bench.log"
    # The KDA paths the fused decode step and the recurrent verify replaced (issue #16): the whole-model steps
    # again with them, so each run shows what the defaults gain (in logs.tgz).
    timeout ${BENCH_TIMEOUT:-240} $BUILD/rill bench --load-format dummy --backend-option kda_fused_decode=0 \
      --backend-option kda_recurrent_verify=0 --preset kimi-linear-48b --skip-ops \
      --markdown "$LOGS/bench_kda_unfused.md" > "$LOGS/rill_bench_kda_unfused.log" 2>&1
    note "rill bench with --backend-option kda_fused_decode=0 --backend-option kda_recurrent_verify=0: rc=$?"
    grep -E "decode|verify" "$LOGS/rill_bench_kda_unfused.log" | head -30
  fi
fi

# --- speculative decoding on the trained demo model, summarise-and-quote prompts (docs/PERF.md): off, ngram ----
# k = 2 / 4, suffix k = 4 at concurrency 1 and 4; the table in $OUT/spec_workload.md. The prompts are the
# committed bench/data/quote_prompts.jsonl (no Node here). Its own section: `bench` alone nearly fills a call.
# SPEC_REPEATS=R runs every configuration R times, interleaved, for medians (one pass takes ~25 s on an H100).
if want spec && [[ -x $BUILD/rill ]]; then
  timeout ${SPEC_TIMEOUT:-300} tools/spec_workload/run.sh $BUILD --device cuda --out $LOGS/spec_workload \
    --repeats ${SPEC_REPEATS:-1} > "$OUT/spec_workload.md" 2> "$LOGS/spec_workload.log"
  note "spec workload (ngram/suffix on the demo model): rc=$?"
  cat "$OUT/spec_workload.md"
fi

# --- prefix reuse: TTFT of an 8K prompt with 7K cached vs cold (dummy 48B) ----------------------------------
if want prefix && [[ -x $BUILD/rill ]]; then
  timeout ${BENCH_TIMEOUT:-240} $BUILD/rill bench --load-format dummy --preset kimi-linear-48b --prefix-reuse \
    --markdown "$OUT/prefix.md" > "$LOGS/prefix_bench.log" 2>&1
  note "prefix reuse bench: rc=$?"
  tail -8 "$LOGS/prefix_bench.log"
fi

# --- prefix cache tiers (issue #38): 64 conversations x 8K histories through a device pool of 16, FP8 48B -----
# (the bf16 48B does not fit 80 GB); second-turn TTFT recomputed, from the host tier, and from disk after a restart
# (page cache dropped first), beside the pinned copy ceiling. ~3 min on an H100; the table in $OUT/tiers.md.
if want tiers && [[ -x $BUILD/rill ]]; then
  rm -rf /tmp/rill-tiers
  timeout ${TIERS_TIMEOUT:-235} $BUILD/rill bench --load-format dummy --preset kimi-linear-48b --quantization fp8 \
    --multi-turn --conversations ${TIERS_CONVERSATIONS:-64} --history-tokens ${TIERS_HISTORY:-8192} --turn-tokens 256 \
    --kv-offloading-dir /tmp/rill-tiers --markdown "$OUT/tiers.md" > "$LOGS/tiers_bench.log" 2>&1
  note "prefix cache tiers bench (multi-turn): rc=$?"
  tail -16 "$LOGS/tiers_bench.log"
  rm -rf /tmp/rill-tiers
fi

# --- Kimi K3 layer slice at full width (dummy MXFP4 weights) ------------------------------------------------
if want k3bench && [[ -x $BUILD/rill ]] && $BUILD/rill bench --preset kimi-k3-slice --print-config > /dev/null 2>&1; then
  timeout ${BENCH_TIMEOUT:-240} $BUILD/rill bench --load-format dummy --preset kimi-k3-slice --markdown "$OUT/k3_slice.md" \
    > "$LOGS/k3_slice_bench.log" 2>&1
  note "K3 slice bench: rc=$?"
  tail -30 "$LOGS/k3_slice_bench.log"
fi

# --- profile: per-kernel device time of one batch-1 decode step (ncu, NVTX range from rill bench) -----------
if want profile && [[ -x $BUILD/rill ]]; then
  # PROFILE_RANGE / PROFILE_ARGS profile another step, e.g. the 8K prompt's layers on an H100 (or, with
  # "--quantization fp8", the whole FP8 model's):
  # PROFILE_RANGE="prefill 1 x 8192 tokens" PROFILE_ARGS="--composed --skip-ops --repeats 1 --prefill-batch 0
  # --decode-batches 1 --verify-drafts 0" (every slice's run of the range is summed).
  range=${PROFILE_RANGE:-"decode batch ${PROFILE_BATCH:-1} at 4096 context"}
  timeout ${PROFILE_TIMEOUT:-300} ncu --clock-control none --nvtx --nvtx-include "$range/" --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \
    --csv --page raw $BUILD/rill bench --load-format dummy --preset kimi-linear-48b \
    ${PROFILE_ARGS:---skip-ops --repeats 1 --prefill-tokens 64 --decode-batches ${PROFILE_BATCH:-1}} \
    > "$LOGS/profile_raw.csv" 2> "$LOGS/profile.err"
  note "ncu profile of '$range': rc=$?"
  python3 tools/kernel_profile.py "$LOGS/profile_raw.csv" | tee "$OUT/profile.txt" | head -60
  # PROFILE_DETAILS="regex1 regex2 ...": ncu's speed-of-light, memory and warp-state sections of one launch of each
  # kernel matching each regex in the same range, one ncu run per regex (a single --launch-count over an
  # alternation spends the count on whichever kernels come first), into $OUT/profile_details.txt.
  for k in ${PROFILE_DETAILS:-}; do
    timeout ${PROFILE_TIMEOUT:-300} ncu --clock-control none --nvtx --nvtx-include "$range/" -k "regex:$k" --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section LaunchStats $BUILD/rill bench --load-format dummy \
      --preset kimi-linear-48b ${PROFILE_ARGS:---skip-ops --repeats 1 --prefill-tokens 64 --decode-batches ${PROFILE_BATCH:-1}} \
      >> "$OUT/profile_details.txt" 2>> "$LOGS/profile_details.err"
    note "ncu details of '$k' in '$range': rc=$?"
  done
fi

# --- serving benchmark: rill serve with dummy 48B weights and the real Kimi tokenizer (carried in .deps/kimi) -
# SERVE_ARGS adds flags to rill serve (e.g. "--quantization fp8": the 48B on an 80 GB H100); SERVE_SWEEP=0 skips
# the rate sweep.
# The real Kimi tokenizer is needed (rill refuses a config whose vocabulary exceeds the tokenizer's, so the demo
# model's 4,352-id tokenizer cannot stand in); .deps/kimi is not carried when the transfer limit leaves no room.
if want serve && [[ -x $BUILD/rill ]] && ! [[ -f .deps/kimi.tar.gz ]]; then
  note "serving bench skipped: no .deps/kimi.tar.gz (tools/fetch_gpu_deps.sh packs the Kimi tokenizer there)"
fi
if want serve && [[ -x $BUILD/rill && -f .deps/kimi.tar.gz ]]; then
  M=/tmp/rill-bench-48b
  mkdir -p $M && tar xzf .deps/kimi.tar.gz -C $M --strip-components=1 &&
    $BUILD/rill bench --preset kimi-linear-48b --print-config > $M/config.json
  # SERVE_INPUT / SERVE_OUTPUT: the random prompts' and answers' tokens (1024 / 256); SERVE_CONCURRENCY: the closed
  # loops ("1 16 64"); e.g. SERVE_INPUT=8192 SERVE_OUTPUT=16 SERVE_CONCURRENCY=1: the 8K prompt's TTFT (issue #33).
  in_len=${SERVE_INPUT:-1024} out_len=${SERVE_OUTPUT:-256}
  max_len=$(( in_len + out_len > 8192 ? in_len + out_len : 8192 ))
  $BUILD/rill serve $M --load-format dummy --device cuda --port 8123 --max-batch-size 64 --max-num-tokens 8192 \
    --max-model-len $max_len ${SERVE_ARGS:-} > "$LOGS/serve.log" 2>&1 &
  srv=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:8123/health >/dev/null 2>&1 && break; sleep 1; done
  # Closed loops of 1, 16 and 64 clients (4 requests per client), then Poisson arrivals at rising rates under 64:
  # the latency-vs-load plot (serving.png where gnuplot is installed; else `rill bench serve --plot-from
  # serving_rates.json --plot X.png` from logs.tgz on a machine that has it).
  bs=($BUILD/rill bench serve --url http://127.0.0.1:8123 --random-input-len $in_len --random-output-len $out_len --ignore-eos)
  for c in ${SERVE_CONCURRENCY:-1 16 64}; do
    timeout ${SERVE_TIMEOUT:-300} "${bs[@]}" --request-rate inf --max-concurrency $c --num-prompts $((4 * c < 4 ? 4 : 4 * c)) \
      --result-file "$LOGS/serving_c$c.json" >> "$OUT/serving.txt" 2>> "$LOGS/serving_bench.log"
    note "serving bench, concurrency $c: rc=$?"
  done
  if [[ ${SERVE_SWEEP:-1} == 1 ]]; then
    timeout ${SWEEP_TIMEOUT:-600} "${bs[@]}" --request-rate 2,4,8,16,32,inf --max-concurrency 64 --num-prompts 128 \
      --result-file "$LOGS/serving_rates.json" --plot "$OUT/serving.png" >> "$OUT/serving.txt" 2>> "$LOGS/serving_bench.log"
    note "serving bench, rate sweep: rc=$?"
  fi
  grep -iE "kv cache|memory|blocks|weights" "$LOGS/serve.log" | head -8
  tail -5 "$LOGS/serving_bench.log"
  kill -INT $srv; wait $srv 2>/dev/null
fi

echo
echo "===== summary ($(cat "$LOGS/gpu.txt" | tail -1); commit $(cat "$LOGS/commit.txt")) ====="
for s in "${summary[@]}"; do echo "  $s"; done
