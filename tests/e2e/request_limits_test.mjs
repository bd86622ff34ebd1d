// Issue #14 items 1, 2 and 8 (last part) against a live server: request JSON nested 100k levels deep (it
// crashed the server in a recursive copy), an object of 100k keys (35 s of CPU in ordered_json's per-key
// scan, slowing every stream), and one completions request of prompts x n over 128 sequences (1023 filled
// the engine queue and pushed other users into 429s). Each must be refused or answered quickly while the
// server keeps serving: a normal request through the official `openai` client answers during and after.
import fs from "fs";

import { assert, assertEq, run, startServer } from "./lib/harness.mjs";

const user = [{ role: "user", content: "hi" }];
const DEPTH = 100000;
const KEYS = 100000;

// A raw POST with a deadline, so that a server still busy with the attack fails the test instead of hanging.
async function post(server, pathname, body, timeoutMs) {
  const res = await fetch(server.url + pathname, {
    method: "POST", headers: { "content-type": "application/json" }, body,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, text, json };
}

// One normal chat through the openai client: the server is alive and serving.
async function normalChat(client, what) {
  const r = await client.chat.completions.create({ model: "rill-tiny", messages: user, max_tokens: 4 });
  assert(r.choices?.length === 1 && typeof r.choices[0].message.content === "string", `${what}: a normal chat answers`);
}

// A streamed chat of `tokens` tokens; resolves to its duration in ms.
async function timedStream(client, tokens) {
  const t0 = Date.now();
  const stream = await client.chat.completions.create({
    model: "rill-tiny", messages: user, max_tokens: tokens, ignore_eos: true, stream: true,
  });
  let chunks = 0;
  for await (const c of stream) if (c.choices?.[0]?.delta?.content) chunks++;
  assert(chunks > 0, "the stream produced content");
  return Date.now() - t0;
}

// The server's resident memory (/proc/<pid>/status VmRSS), for the report.
function rssMiB(server) {
  const status = fs.readFileSync(`/proc/${server.proc.pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1]) / 1024;
}

await run("request_limits", async (track) => {
  const server = track(await startServer());
  const client = server.client({ timeout: 30000 });
  await normalChat(client, "before");

  // Item 1: 100k levels under a field nobody reads, to /tokenize and /v1/chat/completions; and as the
  // arguments string of an earlier tool call (JSON-parsed for templates that want objects; this one prints
  // the string, which makes the prompt too long).
  const deep = "[".repeat(DEPTH) + "]".repeat(DEPTH);
  const deepBody = `{"model":"rill-tiny","messages":[{"role":"user","content":"hi"}],"junk":${deep}}`;
  for (const pathname of ["/tokenize", "/v1/chat/completions"]) {
    const r = await post(server, pathname, deepBody, 10000);
    assertEq(r.status, 400, `${pathname}: ${DEPTH} levels of nesting are a 400 (${r.text.slice(0, 200)})`);
    assert(/nested deeper than 128 levels at byte \d+/.test(r.json?.error?.message ?? ""),
      `${pathname}: the error says why: ${r.text.slice(0, 300)}`);
    assertEq(r.json.error.type, "invalid_request_error", `${pathname}: the OpenAI envelope`);
  }
  const history = [
    { role: "user", content: "call f" },
    { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: deep } }] },
    { role: "tool", tool_call_id: "c1", content: "ok" },
  ];
  const r1 = await post(server, "/v1/chat/completions", JSON.stringify({ model: "rill-tiny", messages: history, max_tokens: 4 }), 10000);
  assertEq(r1.status, 400, `deeply nested tool-call arguments are a 400 (${r1.text.slice(0, 200)})`);
  await normalChat(client, "after the deep bodies");
  console.log(`deep bodies refused; RSS ${rssMiB(server).toFixed(0)} MiB`);

  // Item 2: 100k keys in one object, twice at once, while a stream runs: both answer within seconds and
  // the stream is not slowed much past its time alone (35 s of parsing each before the fix).
  const streamTokens = 48;
  const alone = await timedStream(client, streamTokens);
  const junk = "{" + Array.from({ length: KEYS }, (_, i) => `"k${i}":${i}`).join(",") + "}";
  const wide = `{"model":"rill-tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"junk":${junk},` +
    `"chat_template_kwargs":${junk}}`;
  const t0 = Date.now();
  const [during, ...wideReplies] = await Promise.all([
    timedStream(client, streamTokens),
    post(server, "/v1/chat/completions", wide, 15000),
    post(server, "/tokenize", wide, 15000),
  ]);
  const wideMs = Date.now() - t0;
  for (const r of wideReplies) assertEq(r.status, 200, `a body with ${KEYS}-key objects is served (${r.text.slice(0, 200)})`);
  console.log(`${KEYS}-key bodies (${(wide.length / 1e6).toFixed(1)} MB) answered in ${wideMs} ms; ` +
    `a ${streamTokens}-token stream took ${alone} ms alone, ${during} ms meanwhile`);
  assert(wideMs < 10000, `the ${KEYS}-key bodies answer within 10 s (took ${wideMs} ms)`);
  assert(during < 3 * alone + 3000, `the stream is not held up by them (${during} ms vs ${alone} ms alone)`);

  // Item 8: prompts x n over 128 sequences is a 400 naming n, enqueues nothing, and others are served.
  const prompts = Array.from({ length: 93 }, (_, i) => `prompt ${i}`);  // 93 x 11 = 1023, the case
  const [over, ...others] = await Promise.all([
    post(server, "/v1/completions", JSON.stringify({ model: "rill-tiny", prompt: prompts, n: 11, max_tokens: 16 }), 10000),
    ...Array.from({ length: 4 }, () => client.completions.create({ model: "rill-tiny", prompt: "hello", max_tokens: 4 })),
  ]);
  assertEq(over.status, 400, `1023 sequences in one request are a 400 (${over.text.slice(0, 200)})`);
  assertEq(over.json?.error?.param, "n", "the 400 names n");
  for (const o of others) assert(o.choices?.length === 1, "requests sent meanwhile are served, not 429");
  const at = await post(server, "/v1/completions",
    JSON.stringify({ model: "rill-tiny", prompt: prompts.slice(0, 8), n: 16, max_tokens: 1 }), 30000);
  assertEq(at.status, 200, "128 sequences are accepted");
  assertEq(at.json.choices.length, 128, "and answered with 128 choices");
  await normalChat(client, "after");
  console.log(`limits hold; RSS ${rssMiB(server).toFixed(0)} MiB`);
});
