// /metrics against counts this test computes itself, on `rill serve` with the tiny model. Requests run one at
// a time and each is checked by the difference of two scrapes:
//  - request_success_total{finished_reason} counts the finish reason the client got (vLLM's names);
//  - request_prompt_tokens: the prompt is a list of token ids, so its length is known here (sum, count, and
//    every bucket the test can place it in); request_generation_tokens and generation_tokens_total: the
//    tokens the client received (one logprobs entry per token; ignore_eos requests get exactly max_tokens);
//  - inter_token_latency_seconds: one observation per engine event after the first — n - 1 for n tokens
//    (rill's engine emits one event per token), with their sum equal to the request's decode time;
//    time_per_output_token_seconds is the same series (vLLM's deprecated alias);
//    request_time_per_output_token_seconds = decode time / (n - 1), only for n > 1;
//  - TTFT <= e2e latency <= the latency this client measured around the request;
//  - engine-measured queue / prefill times and the per-step iteration_tokens_total (required):
//    queue + prefill <= TTFT, inference = prefill + decode, the iteration tokens sum to the prompt +
//    generation token counters and count the engine steps;
//  - aborts (streams cancelled by the client after a few tokens) count as finished_reason="abort" with their
//    prompt and at least the tokens the client received (never as 0-token requests);
//  - cache_config_info carries --num-kv-blocks and the state slots (--max-batch-size); the process_* metrics
//    agree with /proc/PID read by this test, and the start time with when the test spawned the server.
import fs from "fs";
import os from "os";

import { assert, assertEq, makeRng, run, sleep, startServer } from "./lib/harness.mjs";

const near = (a, b, what, tol = 1e-6) =>
  assert(Math.abs(a - b) <= tol * Math.max(1, Math.abs(a), Math.abs(b)), `${what}: ${a} vs ${b}`);
const diff = (after, before) => (key) => (after[key] ?? 0) - (before[key] ?? 0);
const LENGTH_BOUNDS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1e4, 1e5, 1e6, 2e6];

await run("e2e_metrics", async (track) => {
  const spawned = Date.now() / 1000;
  const server = track(await startServer(["--max-batch-size", "4"]));
  const client = server.client();
  const rng = makeRng("e2e_metrics");
  const m0 = await server.metrics();

  // cache_config_info: one series, value 1, labels from the flags.
  const info = Object.keys(m0).filter((k) => k.startsWith("rill:cache_config_info{"));
  assertEq(info.length, 1, "one cache_config_info series");
  assertEq(m0[info[0]], 1, "cache_config_info is 1");
  const labels = Object.fromEntries([...info[0].matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
  assertEq([labels.block_size, labels.num_gpu_blocks, labels.num_state_slots, labels.enable_prefix_caching],
    ["64", "256", "4", "False"], "cache_config_info labels: " + info[0]);
  assertEq(m0["rill:kv_cache_total_blocks"], 256, "the block count the labels name");

  // process_*: against /proc/PID as this test reads it.
  const pid = server.proc.pid;
  const status = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const rss = Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) * 1024;
  const p = m0["process_resident_memory_bytes"];
  assert(p > rss / 2 && p < rss * 2, `process_resident_memory_bytes ${p} vs VmRSS ${rss}`);
  const fds = fs.readdirSync(`/proc/${pid}/fd`).length;
  assert(Math.abs(m0["process_open_fds"] - fds) <= 16, `process_open_fds ${m0["process_open_fds"]} vs ${fds}`);
  assert(m0["process_max_fds"] >= m0["process_open_fds"], "process_max_fds");
  const start = m0["process_start_time_seconds"];
  assert(start >= spawned - 2 && start <= Date.now() / 1000, `process_start_time_seconds ${start} vs spawned ${spawned}`);
  // CPU seconds: read again after the traffic below (a tiny model may load in under a tick).
  const cpuFromProc = () => {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(stat[11]) + Number(stat[12])) / 100;  // utime + stime; USER_HZ is 100 on Linux
  };
  for (const b of LENGTH_BOUNDS)
    assert(`rill:request_prompt_tokens_bucket{le="${b}"}` in m0, `prompt length bucket ${b} (buckets reach 1M-token contexts)`);

  // Finished requests, one at a time.
  for (let i = 0; i < 8; ++i) {
    const prompt = Array.from({ length: rng.int(1, 300) }, () => rng.int(10, 200));
    const maxTokens = rng.int(1, 12);
    const ignoreEos = i % 2 === 0;
    const stream = i % 3 === 0;
    const body = { prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: ignoreEos, logprobs: 0 };
    const before = await server.metrics();
    const t0 = Date.now();
    let n = 0, reason = null;
    if (stream) {
      for await (const ch of await client.completions.create({ ...body, stream: true })) {
        const c = ch.choices[0];
        if (!c) continue;
        n += c.logprobs?.tokens?.length ?? 0;
        if (c.finish_reason) reason = c.finish_reason;
      }
    } else {
      const r = await client.completions.create(body);
      n = r.choices[0].logprobs.tokens.length;
      reason = r.choices[0].finish_reason;
    }
    const latency = (Date.now() - t0) / 1000;
    const after = await server.metrics();
    const d = diff(after, before);
    const what = `request ${i} (${prompt.length} prompt ids, ${n} tokens, ${stream ? "streamed" : "whole"})`;
    if (ignoreEos) assertEq(n, maxTokens, `${what}: ignore_eos gives max_tokens tokens`);
    assertEq(d(`rill:request_success_total{finished_reason="${reason}"}`), 1, `${what}: request_success_total{${reason}}`);
    assertEq(d("rill:request_prompt_tokens_count"), 1, `${what}: prompt histogram count`);
    assertEq(d("rill:request_prompt_tokens_sum"), prompt.length, `${what}: prompt histogram sum`);
    for (const b of LENGTH_BOUNDS)
      assertEq(d(`rill:request_prompt_tokens_bucket{le="${b}"}`), prompt.length <= b ? 1 : 0, `${what}: prompt bucket ${b}`);
    assertEq(d("rill:request_generation_tokens_sum"), n, `${what}: generation histogram sum`);
    assertEq(d("rill:generation_tokens_total"), n, `${what}: generation_tokens_total`);
    assertEq(d("rill:prompt_tokens_total"), prompt.length, `${what}: prompt_tokens_total`);
    assertEq(d("rill:time_to_first_token_seconds_count"), 1, `${what}: TTFT count`);
    const e2e = d("rill:e2e_request_latency_seconds_sum"), ttft = d("rill:time_to_first_token_seconds_sum");
    assert(ttft <= e2e + 1e-9 && e2e <= latency + 0.01, `${what}: TTFT ${ttft} <= e2e ${e2e} <= client ${latency}`);
    assertEq(d("rill:inter_token_latency_seconds_count"), n - 1, `${what}: one inter-token latency per token after the first`);
    assertEq(d("rill:time_per_output_token_seconds_count"), n - 1, `${what}: the deprecated alias counts the same`);
    assertEq(d("rill:request_decode_time_seconds_count"), 1, `${what}: decode count`);
    const decode = d("rill:request_decode_time_seconds_sum");
    near(d("rill:inter_token_latency_seconds_sum"), decode, `${what}: the gaps add up to the decode time`);
    assert(decode <= e2e - ttft + 1e-9, `${what}: decode ${decode} <= e2e - TTFT`);
    assertEq(d("rill:request_time_per_output_token_seconds_count"), n > 1 ? 1 : 0, `${what}: per-request TPOT count`);
    if (n > 1) near(d("rill:request_time_per_output_token_seconds_sum"), decode / (n - 1), `${what}: TPOT = decode / (n - 1)`);
    {
      assertEq(d("rill:request_queue_time_seconds_count"), 1, `${what}: queue count`);
      assertEq(d("rill:request_prefill_time_seconds_count"), 1, `${what}: prefill count`);
      const queue = d("rill:request_queue_time_seconds_sum"), prefill = d("rill:request_prefill_time_seconds_sum");
      assert(queue + prefill <= ttft + 1e-6, `${what}: queue ${queue} + prefill ${prefill} <= TTFT ${ttft}`);
      near(d("rill:request_inference_time_seconds_sum"), prefill + decode, `${what}: inference = prefill + decode`);
    }
    {
      assertEq(d("rill:iteration_tokens_total_count"), d("rill:engine_steps_total"), `${what}: one observation per step`);
      assertEq(d("rill:iteration_tokens_total_sum"), prompt.length + n, `${what}: iteration tokens = prompt + generated`);
    }
  }

  const mc = await server.metrics();
  const cpu = cpuFromProc();
  assert(mc["process_cpu_seconds_total"] > 0 && Math.abs(mc["process_cpu_seconds_total"] - cpu) < 0.5 + os.cpus().length * 0.1,
    `process_cpu_seconds_total ${mc["process_cpu_seconds_total"]} vs /proc ${cpu}`);

  // Aborts: endless streams dropped after a few tokens.
  const before = await server.metrics();
  const prompts = [5, 40, 130].map((len) => Array.from({ length: len }, () => rng.int(10, 200)));
  const received = await Promise.all(prompts.map(async (prompt, k) => {
    const controller = new AbortController();
    let n = 0;
    try {
      const s = await client.completions.create({ prompt, max_tokens: 4000, ignore_eos: true, stream: true, logprobs: 0 },
        { signal: controller.signal });
      for await (const ch of s) {
        n += ch.choices[0]?.logprobs?.tokens?.length ?? 0;
        if (n >= 3 + k) controller.abort();
      }
    } catch (e) {
      if (!controller.signal.aborted) throw e;
    }
    return n;
  }));
  let after;
  for (const deadline = Date.now() + 20000; ; await sleep(50)) {
    after = await server.metrics();
    if (diff(after, before)('rill:request_success_total{finished_reason="abort"}') >= 3) break;
    assert(Date.now() < deadline, "the aborts are counted: " + JSON.stringify(after));
  }
  const d = diff(after, before);
  assertEq(d('rill:request_success_total{finished_reason="abort"}'), 3, "three aborts");
  assertEq(d("rill:request_prompt_tokens_sum"), prompts.reduce((a, p) => a + p.length, 0), "aborts keep their prompt length");
  assertEq(d("rill:request_generation_tokens_count"), 3, "aborts are observed in the generation histogram");
  assert(d("rill:request_generation_tokens_sum") >= received.reduce((a, b) => a + b, 0),
    `aborts count at least the tokens the client got (${d("rill:request_generation_tokens_sum")} vs ${received})`);
  assertEq(d('rill:request_generation_tokens_bucket{le="2"}'), 0, "no abort is recorded with fewer tokens than the client got (>= 3)");
  assertEq(d("rill:time_to_first_token_seconds_count"), 3, "aborts that got tokens have a TTFT");
});
