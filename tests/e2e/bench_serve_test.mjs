// `rill bench serve` against `rill serve` on the tiny model. The result JSON is checked against what this test
// knows or computes itself: 8 requests of exactly --random-input-len token ids each (the server's usage and
// its /metrics agree), ignore_eos + max_tokens fixing every output length, at most --max-concurrency open at
// once (from the per-request start times and latencies), and the reported mean/median/p99 and goodput
// recomputed here from the per-request values with numpy's percentile rule. A second run drives the chat
// route from a prompt file at two request rates and draws the plot (a PNG when gnuplot is installed, else the
// notice). Bad flags and an unreachable server exit with a message naming the flag.
import { spawnSync } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";

import { RILL, assert, benchServe as bench, assertEq, makeRng, run, startServer } from "./lib/harness.mjs";

// numpy.percentile's default (linear between closest ranks).
function percentile(values, p) {
  const v = [...values].sort((a, b) => a - b);
  if (v.length === 0) return 0;
  const rank = (p / 100) * (v.length - 1), lo = Math.floor(rank), hi = Math.min(lo + 1, v.length - 1);
  return v[lo] + (rank - lo) * (v[hi] - v[lo]);
}
const mean = (v) => (v.length ? v.reduce((a, b) => a + b, 0) / v.length : 0);
function near(a, b, what) {
  assert(Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b)), `${what}: ${a} vs ${b} computed here`);
}

// The most intervals [start, start + e2el] open at one instant.
function maxOverlap(starts, e2els) {
  const events = [];
  starts.forEach((s, i) => events.push([s, 1], [s + e2els[i] - 1e-6, -1]));  // 1 us: the two clocks' rounding
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0, most = 0;
  for (const [, d] of events) most = Math.max(most, (open += d));
  return most;
}

await run("e2e_bench_serve", async (track) => {
  const rng = makeRng("e2e_bench_serve");
  const server = track(await startServer(["--max-batch-size", "4"]));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rill_bench_serve_"));
  const N = 8, IN = rng.int(8, 40), OUT = rng.int(2, 8);
  const before = await server.metrics();

  const resultFile = path.join(dir, "result.json");
  const r = await bench(["--url", server.url, "--num-prompts", `${N}`, "--request-rate", "inf", "--max-concurrency", "2",
    "--random-input-len", `${IN}`, "--random-output-len", `${OUT}`, "--ignore-eos", "--seed", `${rng.int(0, 1e6)}`,
    "--goodput", "ttft:100000", "tpot:100000", "--result-file", resultFile]);
  assertEq(r.code, 0, "bench serve exit code\n" + r.out + r.err);
  const j = JSON.parse(fs.readFileSync(resultFile, "utf8"));
  assertEq([j.completed, j.failed, j.num_prompts, j.max_concurrency, j.request_rate], [N, 0, N, 2, "inf"], "counts");
  assertEq(j.errors, Array(N).fill(""), "no errors");
  assertEq(j.input_lens, Array(N).fill(IN), "every prompt is exactly --random-input-len token ids");
  assertEq(j.output_lens, Array(N).fill(OUT), "ignore_eos: every output is max_tokens long");
  assertEq([j.total_input_tokens, j.total_output_tokens], [N * IN, N * OUT], "token totals");
  const after = await server.metrics();
  assertEq(after["rill:prompt_tokens_total"] - before["rill:prompt_tokens_total"], N * IN, "server prompt tokens");
  assertEq(after["rill:generation_tokens_total"] - before["rill:generation_tokens_total"], N * OUT, "server generated");
  assertEq(maxOverlap(j.start_times, j.e2els), 2, "at most --max-concurrency open, and that many reached");
  assertEq(j.max_in_flight, 2, "max_in_flight");

  const ttft = j.ttfts.map((s) => s * 1e3), e2el = j.e2els.map((s) => s * 1e3), itl = j.itls.flat().map((s) => s * 1e3);
  const tpot = j.e2els.map((e, i) => ((e - j.ttfts[i]) / (OUT - 1)) * 1e3);
  j.ttfts.forEach((t, i) => assert(t > 0 && t <= j.e2els[i], `0 < ttft <= e2el (request ${i})`));
  j.itls.forEach((l, i) => assert(l.length <= OUT - 1, `at most ${OUT - 1} gaps (request ${i}: ${l.length})`));
  for (const [name, v] of [["ttft", ttft], ["tpot", tpot], ["itl", itl], ["e2el", e2el]]) {
    near(j[`mean_${name}_ms`], mean(v), `mean ${name}`);
    near(j[`median_${name}_ms`], percentile(v, 50), `median ${name}`);
    near(j[`p99_${name}_ms`], percentile(v, 99), `p99 ${name}`);
  }
  near(j.request_throughput, N / j.duration, "request throughput");
  near(j.request_goodput, N / j.duration, "goodput with SLOs every request meets");
  near(j.output_throughput, (N * OUT) / j.duration, "output throughput");
  near(j.total_token_throughput, (N * (IN + OUT)) / j.duration, "total token throughput");
  assert(j.duration >= Math.max(...j.e2els), "the run lasts at least its longest request");
  for (const line of [`Successful requests:                     ${N}`, "Maximum request concurrency:             2",
    `Total input tokens:                      ${N * IN}`, `Total generated tokens:                  ${N * OUT}`,
    "Request goodput (req/s):", "P99 TTFT (ms):", "Median TPOT (ms):", "Mean ITL (ms):", "P99 E2EL (ms):"])
    assert(r.out.includes(line), `the table has '${line}':\n${r.out}`);

  // Chat from a prompt file at two rates, with the plot. Output lengths: the line's own, else --custom-output-len.
  const prompts = path.join(dir, "prompts.jsonl");
  fs.writeFileSync(prompts, 'Say something.\n{"prompt": "Count to three.", "output_len": 3}\n"A JSON string prompt"\n');
  const plot = path.join(dir, "latency.png"), results2 = path.join(dir, "results.json");
  const r2 = await bench(["--url", server.url, "--endpoint", "/v1/chat/completions", "--dataset-name", "file",
    "--dataset-path", prompts, "--custom-output-len", "5", "--num-prompts", "4", "--request-rate", "50,inf",
    "--ignore-eos", "--plot", plot, "--result-file", results2]);
  assertEq(r2.code, 0, "chat bench exit code\n" + r2.out + r2.err);
  const runs = JSON.parse(fs.readFileSync(results2, "utf8"));
  assertEq(runs.map((x) => [x.completed, x.request_rate, x.backend]), [[4, 50, "openai-chat"], [4, "inf", "openai-chat"]],
    "one result per rate");
  for (const x of runs) assertEq(x.output_lens, [5, 3, 5, 5], "file lengths, the file read again from the top");
  const tokenized = [];
  for (const text of ["Say something.", "Count to three.", "A JSON string prompt", "Say something."]) {
    const t = await server.fetchJson("/tokenize", { messages: [{ role: "user", content: text }] });
    assertEq(t.status, 200, "/tokenize " + t.text);
    tokenized.push(t.json.count);
  }
  for (const x of runs) assertEq(x.input_lens, tokenized, "chat prompt tokens are the rendered prompts'");
  if (spawnSync("gnuplot", ["--version"]).status === 0) {
    const png = fs.readFileSync(plot);
    assertEq([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], "a PNG signature");
  } else {
    assert(r2.err.includes("gnuplot is not installed"), "the plot is skipped with a notice:\n" + r2.err);
  }

  // A downloaded Hugging Face dataset (--dataset-name hf): its JSON lines' chat prompts, the record's own length.
  const hf = path.join(dir, "hf", "data");
  fs.mkdirSync(hf, { recursive: true });
  fs.writeFileSync(path.join(hf, "train-00000-of-00001.jsonl"),
    '{"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 2}\n{"instruction": "Add.", "input": "1 + 1"}\n');
  const results3 = path.join(dir, "hf.json");
  const r3 = await bench(["--url", server.url, "--dataset-name", "hf", "--dataset-path", path.join(dir, "hf"),
    "--hf-split", "train", "--hf-output-len", "4", "--num-prompts", "3", "--ignore-eos", "--result-file", results3]);
  assertEq(r3.code, 0, "hf dataset bench exit code\n" + r3.out + r3.err);
  assertEq([].concat(JSON.parse(fs.readFileSync(results3, "utf8")))[0].output_lens, [2, 4, 2], "hf record lengths, else --hf-output-len");

  // Bad input names the flag; an unreachable server names the URL.
  const bad = await bench(["--url", server.url, "--request-rate", "0"]);
  assert(bad.code === 2 && bad.err.includes("--request-rate"), "bad rate: " + bad.err);
  const badGoodput = await bench(["--url", server.url, "--goodput", "latency:5"]);
  assert(badGoodput.code === 2 && badGoodput.err.includes("--goodput"), "bad goodput: " + badGoodput.err);
  const gone = await bench(["--url", "http://127.0.0.1:1", "--num-prompts", "1"]);
  assert(gone.code === 1 && gone.err.includes("--url"), "unreachable: " + gone.err);
  fs.rmSync(dir, { recursive: true });
});
