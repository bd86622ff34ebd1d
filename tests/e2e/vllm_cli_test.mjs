// vLLM's command line (issue 19 part 2) and the server log (part 1). The Kimi-Linear recipe's `vllm serve`
// flags start rill unchanged (the flags with nothing to do get a notice each); every log line carries an
// ISO-8601 UTC timestamp with ms and the level; each finished request has a log line whose id, token counts
// and finish reason are the ones the client got back, and each refused one a line with its status; the stats
// lines' token counts add up to the tokens the test received; --served-model-name takes several names; --seed,
// --generation-config and --chat-template change what the server does; bad values are refused by name, an
// unknown flag gets the closest known one.
import { spawn } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";

import { MODEL_DIR, RILL, assert, assertEq, checkChatCompletion, collectChatStream, run, sleep, startServer } from "./lib/harness.mjs";

const LINE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (debug|info|warning|error)\s/;

function logLines(server) {
  return server.log.split("\n").filter((l) => l.length > 0);
}

// `rill serve ARGS` that must exit by itself (a refused flag); resolves with its exit code and stderr.
function serveFails(args) {
  return new Promise((resolve) => {
    const proc = spawn(RILL, ["serve", MODEL_DIR, "--device", "cpu", "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    proc.stderr.on("data", (d) => (log += d));
    const timer = setTimeout(() => proc.kill("SIGKILL"), 30000);
    proc.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, log });
    });
  });
}

function parseFinished(line) {
  const m = /request (\S+) finished: choice=(\d+) status=(\d+) finish=(\S+) prompt_tokens=(-?\d+) cached_tokens=(-|\d+) completion_tokens=(\d+) ttft=(\S+) tpot=(\S+) e2e=([\d.]+)s(?: method=(\S+) path=(\S+))?(?: client=(\S+))?/.exec(line);
  if (!m) return null;
  return { id: m[1], choice: +m[2], status: +m[3], finish: m[4], prompt: +m[5], cached: m[6] === "-" ? null : +m[6], completion: +m[7],
           ttft: m[8] === "-" ? null : parseFloat(m[8]), e2e: parseFloat(m[10]), method: m[11], path: m[12], client: m[13] };
}

await run("e2e_vllm_cli", async (track) => {
  // ---- refused values and the unknown-flag hint (nothing starts) ----
  {
    const r = await serveFails(["--tensor-paralel-size", "1"]);
    assert(r.code !== 0 && /unknown flag --tensor-paralel-size \(did you mean --tensor-parallel-size\?\)/.test(r.log),
           "an unknown flag is named with the closest known one:\n" + r.log);
    for (const [args, want] of [
      [["-dp", "2"], /--data-parallel-size 2: not built yet/],
      [["-tp", "2", "-ep", "3"], /--expert-parallel-size 3 must divide --tensor-parallel-size 2/],
      [["--dtype", "float16"], /--dtype float16: .*use auto or bfloat16/],
      [["--tool-call-parser", "kimi_k3"], /--tool-call-parser kimi_k3: the model is kimi_linear.*use kimi_k2/],
      [["--gpu-memory-utilization", "0.8", "--free-gpu-memory-fraction", "0.5"],
       /--gpu-memory-utilization 0.8 and --kv-cache-fraction 0.5 both size the caches: give one/],
      [["--kv-offloading-backend", "lmcache", "--kv-offloading-size", "1"], /--kv-offloading-backend lmcache: .*use native/],
      [["--kv-offloading-backend", "native"], /--kv-offloading-backend native needs --kv-offloading-size/],
      [["--kv-offloading-dir", "/tmp/rill-kv"], /--kv-offloading-dir \/tmp\/rill-kv: the disk tier sits below the host tier: it needs --kv-offloading-size/],
      [["--kv-offloading-disk-size", "1"], /--kv-offloading-disk-size caps the --kv-offloading-dir files: give the directory/],
    ]) {
      const f = await serveFails(args);
      assertEq(f.code, 2, `${args.join(" ")} is refused as bad input`);
      assert(want.test(f.log), `${args.join(" ")}: the error says why:\n${f.log}`);
    }
  }

  // ---- the recipe's command line (with the request log on, stats every second) ----
  const recipe = ["--tensor-parallel-size", "1", "--max-model-len", "1024", "--trust-remote-code",
                  "--gpu-memory-utilization", "0.9", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2",
                  "--reasoning-parser", "kimi", "--dtype", "bfloat16", "--seed", "0", "--served-model-name", "a", "b",
                  // vLLM flags rill accepts with a notice (src/cli/vllm_flag_table.cc; issue 34)
                  "--kv-cache-dtype", "auto", "--block-size", "16", "--swap-space", "4", "--enable-chunked-prefill",
                  "--uvicorn-log-level", "info", "--disable-fastapi-docs", "--max-logprobs", "20",
                  "--tokenizer", MODEL_DIR, "--async-scheduling", "--enable-request-id-headers",
                  "--response-role", "assistant", "--max-num-partial-prefills", "1",
                  "--compilation-config", '{"level": 3}', "-O3", "--revision", "main", "--download-dir", os.tmpdir(),
                  "--root-path", "/", "--limit-mm-per-prompt", '{"image": 0}', "--tokenizer-mode", "auto",
                  "--api-server-count", "1", "--enable-log-outputs", "--max-log-len", "100",
                  "--kv-offloading-backend", "native", "--kv-offloading-size", "0.01"];
  const server = track(await startServer([...recipe, "--log-stats-interval", "1"]));
  const client = server.client();
  for (const flag of ["--trust-remote-code", "--gpu-memory-utilization", "--enable-auto-tool-choice", "--dtype bfloat16",
                      "--kv-cache-dtype", "--block-size", "--swap-space", "--enable-chunked-prefill", "--max-logprobs",
                      "-O (compilation config)", "--tokenizer", "--api-server-count", "--max-log-len",
                      "--kv-offloading-size"])
    assert(server.log.includes(`notice: ${flag}:`), `a notice for ${flag}:\n${server.log}`);
  const flagsLine = server.log.split("\n").find((l) => / flags: /.test(l)) ?? "";
  for (const f of ["--tensor-parallel-size 1", "--served-model-name a b", "--seed 0", "--trust-remote-code", "--dtype bfloat16"])
    assert(flagsLine.includes(f), `the start-up summary lists ${f}: ${flagsLine}`);
  assert(/model: kimi_linear .* parameters, .* loaded in [\d.]+ s/.test(server.log), "the start-up summary names the model and its load time");
  assert(/cache plan: /.test(server.log) && /chat template: .*tokenizer_config\.json|chat template: .*chat_template\.jinja/.test(server.log),
         "the start-up summary has the cache plan and the chat template's source");
  assert(/loading weights: 100%/.test(server.log), "load progress reaches 100% in the log");
  assert(/cache plan: .*host tier: \d+ MLA blocks/.test(server.log), "--kv-offloading-size: the cache plan has a host tier");

  // Requests under both served names (responses report the name asked for, as vLLM's do); a third name is
  // refused and logged.
  const got = [];  // {id, prompt, completion, finish}
  for (let i = 0; i < 4; ++i) {
    const r = await client.chat.completions.create({
      model: i % 2 ? "b" : "a", messages: [{ role: "user", content: `request ${i}` }], max_tokens: 8 + 4 * i,
    });
    checkChatCompletion(r);
    assertEq(r.model, i % 2 ? "b" : "a", "responses report the served name the request asked for");
    got.push({ id: r.id, prompt: r.usage.prompt_tokens, completion: r.usage.completion_tokens, finish: r.choices[0].finish_reason });
  }
  {
    const stream = await client.chat.completions.create({
      model: "b", messages: [{ role: "user", content: "streamed" }], max_tokens: 12, stream: true,
      stream_options: { include_usage: true },
    });
    const ids = new Set();
    const chunks = [];
    for await (const c of stream) (ids.add(c.id), chunks.push(c));
    assertEq(ids.size, 1, "one id per stream");
    const usage = chunks[chunks.length - 1].usage;
    const finish = chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason;
    got.push({ id: [...ids][0], prompt: usage.prompt_tokens, completion: usage.completion_tokens, finish });
  }
  const refused = await server.fetchJson("/v1/chat/completions", { model: "c", messages: [{ role: "user", content: "x" }] });
  assertEq(refused.status, 404, "a name that is not served gets 404");

  // Let two stats intervals pass after the last token, so every token is in some stats line.
  await sleep(2500);
  const lines = logLines(server);
  for (const l of lines) assert(LINE.test(l), "every log line starts with an ISO-8601 UTC time and the level: " + l);

  const finished = lines.map(parseFinished).filter(Boolean);
  assertEq(finished.length, got.length, "one request line per finished request");
  for (const g of got) {
    const f = finished.find((x) => x.id === g.id);
    assert(f, `a request line names ${g.id}`);
    assertEq([f.status, f.finish, f.prompt, f.completion, f.cached], [200, g.finish, g.prompt, g.completion, 0],
             `${g.id}: the logged status, finish reason and token counts are the client's`);
    assert(f.ttft !== null && f.ttft >= 0 && f.ttft <= f.e2e, `${g.id}: 0 <= ttft <= e2e (${f.ttft}, ${f.e2e})`);
    assertEq([f.method, f.path], ["POST", "/v1/chat/completions"], `${g.id}: the line names the method and path`);
    assert(/^127\.0\.0\.1:\d+$/.test(f.client ?? ""), `${g.id}: the line names the client's address and port: ${f.client}`);
  }
  assert(lines.some((l) => /request rejected: POST \/v1\/chat\/completions status=404 client=127\.0\.0\.1:\d+ reason=.*c/.test(l)),
         "the refused request has a line with its status");

  let prompt = 0, generated = 0;
  const stats = lines.filter((l) => l.includes(" stats: "));
  for (const l of stats) {
    const m = /\((\d+) prompt \+ (\d+) generated tokens in [\d.]+ s\), running (\d+), waiting (\d+), KV blocks (\d+)\/(\d+) \([\d.]+%\), state slots (\d+)\/(\d+)/.exec(l);
    assert(m, "a stats line has the counts: " + l);
    prompt += +m[1];
    generated += +m[2];
  }
  assert(stats.length > 0, "stats lines were written");
  const sum = (k) => got.reduce((a, g) => a + g[k], 0);
  assertEq([prompt, generated], [sum("prompt"), sum("completion")],
           "the stats lines' token counts add up to the tokens the requests report");
  const last = /running (\d+), waiting (\d+), KV blocks (\d+)\/\d+ \(([\d.]+)%\), state slots (\d+)\//.exec(stats[stats.length - 1]);
  assertEq([+last[1], +last[2], +last[5]], [0, 0, 0], "the last stats line shows the idle engine");

  // ---- --disable-log-requests, --seed, --generation-config, --chat-template ----
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rill-vllm-cli-"));
  try {
    fs.writeFileSync(path.join(dir, "generation_config.json"), JSON.stringify({ max_new_tokens: 5, temperature: 1.0 }));
    const tmpl = path.join(dir, "t.jinja");
    fs.writeFileSync(tmpl, "{% for m in messages %}<<{{ m.content }}>>{% endfor %}");
    const quiet = track(await startServer([...recipe, "--disable-log-requests", "--generation-config", dir, "--chat-template", tmpl]));
    assert(quiet.log.includes(`chat template: ${tmpl} (--chat-template)`), "the summary names the template file");
    // --seed 0 on both servers: the first unseeded request of each gets seed 0.
    const fresh = track(await startServer(recipe));
    const ask = (s) => s.client().chat.completions.create({ messages: [{ role: "user", content: "same" }], max_tokens: 16, ignore_eos: true });
    const [x, y] = [await ask(fresh), await ask(fresh)];
    const q = quiet.client();
    // The template file renders the prompt: /tokenize's chat form equals the template's text encoded.
    const viaChat = await quiet.fetchJson("/tokenize", { messages: [{ role: "user", content: "hello" }] });
    const viaText = await quiet.fetchJson("/tokenize", { prompt: "<<hello>>" });
    assertEq(viaChat.json.tokens, viaText.json.tokens, "--chat-template's file renders the chat prompt");
    // generation_config.json's max_new_tokens is the default max_tokens; a request's own value wins.
    const d = await q.chat.completions.create({ messages: [{ role: "user", content: "d" }], ignore_eos: true });
    assertEq(d.usage.completion_tokens, 5, "max_new_tokens is the default max_tokens");
    const e = await q.chat.completions.create({ messages: [{ role: "user", content: "d" }], ignore_eos: true, max_tokens: 7 });
    assertEq(e.usage.completion_tokens, 7, "the request's max_tokens overrides generation_config.json");
    await sleep(200);
    assert(!/request \S+ finished/.test(quiet.log), "--disable-log-requests: no request lines");
    // A third server with --seed 0: its first unseeded request gets seed 0 as the fresh one's did.
    const again = track(await startServer(recipe));
    const z = await ask(again);
    assertEq(z.choices[0].message.content, x.choices[0].message.content,
             "--seed 0: the first unseeded request of two servers samples the same reply");
    assert(y.choices[0].message.content !== x.choices[0].message.content,
           "--seed: the next request gets the next seed (a different reply)");
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
