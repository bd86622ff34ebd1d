// Shared pieces of the e2e tests: start `rill serve` on a free port (--port 0; the port is read from its
// log), wait for /health, hand out the official `openai` client, check response shapes explicitly (the SDK
// does not validate them), read /metrics, stop the server and report its exit code.
//
// Every test script is run as: node SCRIPT.mjs RILL_BINARY MODEL_DIR NODE_MODULES
import { spawn } from "child_process";
import { createRequire } from "module";
import path from "path";

import { testSeed } from "../../test_seed.mjs";

export const [RILL, MODEL_DIR, NODE_MODULES] = process.argv.slice(2);
if (!RILL || !MODEL_DIR || !NODE_MODULES) {
  console.error("usage: node SCRIPT.mjs RILL_BINARY MODEL_DIR NODE_MODULES");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(NODE_MODULES), "x.js"));
export const OpenAIModule = require("openai");
export const { OpenAI } = OpenAIModule;
// ajv, the JSON Schema validator (tests/node): the independent check of constrained tool-call arguments.
export const Ajv = require("ajv").default;

export function assert(cond, msg) {
  if (!cond) throw new Error("assertion failed: " + msg);
}
export function assertEq(a, b, msg) {
  const sa = JSON.stringify(a), sb = JSON.stringify(b);
  if (sa !== sb) throw new Error(`assertion failed: ${msg}\n  got:      ${sa}\n  expected: ${sb}`);
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A random generator on the commit's seed (tests/test_seed.mjs: printed; RILL_TEST_SEED=N replays it).
export function makeRng(label) {
  let seed = testSeed(label);
  return {
    next() {  // mulberry32
      seed = (seed + 0x6d2b79f5) | 0;
      let t = seed;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    },
    int(lo, hi) { return lo + Math.floor(this.next() * (hi - lo + 1)); },
  };
}

export class Server {
  constructor(proc) {
    this.proc = proc;
    this.log = "";
    this.exit = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  }
  get url() { return `http://127.0.0.1:${this.port}`; }
  client(opts = {}) {
    return new OpenAI({ apiKey: "none", baseURL: this.url + "/v1", maxRetries: 0, timeout: 120000, ...opts });
  }
  async fetchJson(pathname, body, headers = {}) {
    const res = await fetch(this.url + pathname, body === undefined ? { headers } : {
      method: "POST", headers: { "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: res.status, headers: res.headers, text, json };
  }
  async metrics() {
    const res = await fetch(this.url + "/metrics");
    const out = {};
    for (const line of (await res.text()).split("\n")) {
      if (!line || line.startsWith("#")) continue;
      const sp = line.lastIndexOf(" ");
      const series = line.slice(0, sp);
      out[series.replace(/\{model_name="[^"]*",?/, "{").replace("{}", "")] = Number(line.slice(sp + 1));
    }
    return out;
  }
  // SIGTERM (or `signal`), then the exit status; SIGKILL after `timeoutMs`.
  async stop(signal = "SIGTERM", timeoutMs = 60000) {
    if (this.proc.exitCode !== null) return { code: this.proc.exitCode, signal: null };
    this.proc.kill(signal);
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), timeoutMs);
    const r = await this.exit;
    clearTimeout(timer);
    return r;
  }
}

// Starts `rill serve MODEL_DIR --device cpu --port 0 ...args` and waits until /health answers 200. The
// cache is 256 KV blocks (16K tokens) unless the test sets --num-kv-blocks: several servers run side by side.
// `launch(argv)` returns [program, args, spawn options] to start rill through another program (mpirun).
export async function startServer(args = [], { model = MODEL_DIR, healthTimeoutMs = 120000,
                                               launch = (argv) => [RILL, argv, {}] } = {}) {
  const blocks = args.includes("--num-kv-blocks") ? [] : ["--num-kv-blocks", "256"];
  const [program, argv, options] = launch(["serve", model, "--device", "cpu", "--port", "0", ...blocks, ...args]);
  const proc = spawn(program, argv, { stdio: ["ignore", "inherit", "pipe"], ...options });
  const server = new Server(proc);
  const port = new Promise((resolve, reject) => {
    proc.stderr.on("data", (d) => {
      const s = d.toString();
      server.log += s;
      if (process.env.RILL_E2E_VERBOSE) process.stderr.write(s);
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(server.log);
      if (m) resolve(Number(m[1]));
    });
    proc.on("exit", (code) => reject(new Error(`rill serve exited (${code}) before listening:\n${server.log}`)));
  });
  server.port = await port;
  const deadline = Date.now() + healthTimeoutMs;
  let sawLoading = false;
  for (;;) {
    const r = await server.fetchJson("/health").catch(() => null);
    if (r && r.status === 200) break;
    if (r && r.status === 503) {
      assert(r.json?.error?.type === "unavailable_error", "/health 503 carries the unavailable_error envelope: " + r.text);
      sawLoading = true;
    }
    if (proc.exitCode !== null) throw new Error("rill serve exited while loading:\n" + server.log);
    if (Date.now() > deadline) throw new Error("rill serve did not become healthy:\n" + server.log);
    await sleep(50);
  }
  server.sawLoading = sawLoading;
  return server;
}

// Runs `rill bench serve ARGS`; resolves with its exit code and what it printed, once both streams are drained.
export function benchServe(args) {
  return new Promise((resolve) => {
    const p = spawn(RILL, ["bench", "serve", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (err += d));
    p.on("close", (code) => resolve({ code, out, err }));  // "close": after stdout and stderr are drained
  });
}

// Runs `main(server...)`; prints the failure (and the server log) and sets the exit code.
export async function run(name, main) {
  const t0 = Date.now();
  const servers = [];
  const track = (s) => (servers.push(s), s);
  const printLogs = () => {
    for (const s of servers) {
      console.error(`--- server log (port ${s.port}) ---\n${s.log.slice(-6000)}`);
      s.proc.kill("SIGKILL");
    }
  };
  // A test that hangs ends itself 15 s before ctest's TIMEOUT (RILL_E2E_TIMEOUT_S), with its servers' logs:
  // killed by ctest it would print nothing.
  const limit = Number(process.env.RILL_E2E_TIMEOUT_S ?? 0);
  const watchdog = limit > 30 ? setTimeout(() => {
    console.error(`${name}: FAILED: still running after ${limit - 15} s (ctest's limit is ${limit} s)`);
    printLogs();
    process.exit(1);
  }, (limit - 15) * 1000) : null;
  watchdog?.unref();
  try {
    await main(track);
    for (const s of servers) {
      const r = await s.stop();
      assert(r.code === 0, `rill serve exits 0 after SIGTERM (got ${JSON.stringify(r)})\n${s.log}`);
    }
    console.log(`${name}: ok (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    console.error(`${name}: FAILED: ${e.stack ?? e}`);
    printLogs();
    process.exitCode = 1;
  } finally {
    if (watchdog) clearTimeout(watchdog);
  }
}

// ---- explicit shape checks ----------------------------------------------------------------------------
const ID_CHAT = /^chatcmpl-[0-9a-f]{24}$/, ID_CMPL = /^cmpl-[0-9a-f]{24}$/;

export function checkUsage(u, what) {
  assert(u && typeof u === "object", `${what}: usage present`);
  for (const k of ["prompt_tokens", "completion_tokens", "total_tokens"])
    assert(Number.isInteger(u[k]) && u[k] >= 0, `${what}: usage.${k} is an integer (${JSON.stringify(u)})`);
  assertEq(u.total_tokens, u.prompt_tokens + u.completion_tokens, `${what}: total = prompt + completion`);
  assert(Number.isInteger(u.prompt_tokens_details?.cached_tokens), `${what}: prompt_tokens_details.cached_tokens`);
  assert(Number.isInteger(u.completion_tokens_details?.reasoning_tokens), `${what}: completion_tokens_details.reasoning_tokens`);
}

export function checkChatCompletion(r, n = 1) {
  assert(ID_CHAT.test(r.id), "chat id format: " + r.id);
  assertEq(r.object, "chat.completion", "object");
  assert(Number.isInteger(r.created), "created is an integer");
  assert(typeof r.model === "string" && r.model.length > 0, "model");
  assertEq(r.choices.length, n, "number of choices");
  r.choices.forEach((c, i) => {
    assertEq(c.index, i, "choice index");
    assertEq(c.message.role, "assistant", "role");
    assert(c.message.content === null || typeof c.message.content === "string", "content string or null");
    assert(["stop", "length", "tool_calls"].includes(c.finish_reason), "finish_reason: " + c.finish_reason);
    if (c.message.tool_calls) {
      for (const t of c.message.tool_calls) {
        assert(typeof t.id === "string" && t.type === "function", "tool call id/type");
        assert(typeof t.function.name === "string" && typeof t.function.arguments === "string", "tool call function");
      }
    }
  });
  checkUsage(r.usage, "chat.completion");
}

export function checkCompletion(r, n = 1) {
  assert(ID_CMPL.test(r.id), "completion id format: " + r.id);
  assertEq(r.object, "text_completion", "object");
  assert(Number.isInteger(r.created), "created");
  assertEq(r.choices.length, n, "number of choices");
  r.choices.forEach((c, i) => {
    assertEq(c.index, i, "choice index");
    assert(typeof c.text === "string", "text");
    assert(["stop", "length"].includes(c.finish_reason), "finish_reason: " + c.finish_reason);
  });
  checkUsage(r.usage, "text_completion");
}

// Collects a streamed chat completion through the SDK and checks the Kimi stream spec's frames on the way:
// constant id/created/model, one choice per frame, role + content "" first, no null keys in deltas, content /
// reasoning_content / tool_calls exclusive, an end frame with delta {}; and OpenAI's usage rule: no usage in
// a choice, and with include_usage `usage: null` on every chunk and a last chunk with choices [] and usage
// (without it, no usage key at all). Returns per choice {content, reasoning, tool_calls, finish_reason,
// logprobs, frames} and the final usage.
export async function collectChatStream(stream, n = 1, includeUsage = false) {
  const choices = Array.from({ length: n }, () => ({ content: "", reasoning: "", tool_calls: [], frames: 0, logprobs: [], started: false }));
  let head = null, usage = null, sawUsageChunk = false;
  for await (const chunk of stream) {
    assert(!sawUsageChunk, "nothing after the usage chunk");
    if (!head) head = { id: chunk.id, created: chunk.created, model: chunk.model };
    assert(ID_CHAT.test(chunk.id), "chunk id format");
    assertEq({ id: chunk.id, created: chunk.created, model: chunk.model }, head, "constant id/created/model");
    assertEq(chunk.object, "chat.completion.chunk", "chunk object");
    if (chunk.choices.length === 0) {
      assert(includeUsage, "a choices: [] chunk only with include_usage");
      checkUsage(chunk.usage, "usage chunk");
      usage = chunk.usage;
      sawUsageChunk = true;
      continue;
    }
    assertEq(chunk.choices.length, 1, "one choice per frame");
    if (includeUsage) assert(chunk.usage === null, "usage: null on ordinary chunks");
    else assert(!("usage" in chunk), "no usage key without include_usage");
    const c = chunk.choices[0];
    assert(!("usage" in c), "no usage inside a choice (OpenAI)");
    const st = choices[c.index];
    assert(st && !st.finish_reason, "frame for a live choice " + c.index);
    assert("finish_reason" in c && "delta" in c, "index, delta, finish_reason present");
    for (const [k, v] of Object.entries(c.delta)) assert(v !== null, `no null keys in deltas (${k})`);
    st.frames++;
    if (!st.started) {
      assertEq(c.delta, { role: "assistant", content: "" }, "first frame: role assistant, content ''");
      assert(c.finish_reason === null, "first frame: finish_reason null");
      st.started = true;
      continue;
    }
    assert(!("role" in c.delta), "role only in the first frame");
    if (c.logprobs) st.logprobs.push(...c.logprobs.content);
    if (c.finish_reason !== null) {
      assertEq(c.delta, {}, "end frame delta is {}");
      st.finish_reason = c.finish_reason;
      continue;
    }
    const keys = Object.keys(c.delta);
    assertEq(keys.length, 1, "content / reasoning_content / tool_calls are exclusive: " + JSON.stringify(c.delta));
    if (keys[0] === "content") st.content += c.delta.content;
    else if (keys[0] === "reasoning_content") st.reasoning += c.delta.reasoning_content;
    else if (keys[0] === "tool_calls") {
      for (const t of c.delta.tool_calls) {
        if (t.id !== undefined) {
          assertEq(t.index, st.tool_calls.length, "tool call indices start at 0 and increase by 1");
          assertEq(t.type, "function", "first tool-call chunk has type");
          assertEq(t.function.arguments, "", "first tool-call chunk has empty arguments");
          st.tool_calls.push({ id: t.id, name: t.function.name, arguments: "" });
        } else {
          assertEq(Object.keys(t).sort(), ["function", "index"], "continuation chunks carry index + function.arguments");
          st.tool_calls[t.index].arguments += t.function.arguments;
        }
      }
    } else throw new Error("unexpected delta key " + keys[0]);
  }
  for (const st of choices) assert(st.finish_reason, "every choice ended with a finish frame");
  if (includeUsage) assert(sawUsageChunk, "usage chunk present");
  return { choices, usage, head };
}

// Raw SSE bytes of a POST, split into frames (checks the framing itself).
export async function rawSse(server, pathname, body) {
  const res = await fetch(server.url + pathname, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
  });
  assertEq(res.status, 200, "SSE status");
  assert((res.headers.get("content-type") ?? "").startsWith("text/event-stream"), "content-type text/event-stream");
  const text = await res.text();
  assert(text.endsWith("data: [DONE]\n\n"), "stream ends with data: [DONE]");
  const frames = text.split("\n\n").slice(0, -1);
  for (const f of frames) assert(f.startsWith("data: ") && !f.includes("\n"), "frame is one `data: ` line: " + f);
  return frames.map((f) => f.slice(6));
}
