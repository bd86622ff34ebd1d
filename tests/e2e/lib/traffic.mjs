// Streaming requests for the load, preemption and shutdown tests: greedy, with per-token logprobs, so a
// result is its exact token sequence (token bytes) and text, comparable with the same request run alone.
import { assert, assertEq } from "./harness.mjs";

// A completions request on a random token-id prompt, or a chat request with a random-length message.
export function randomRequest(rng, { minPrompt = 1, maxPrompt = 300, maxTokens = 48, chatShare = 0.3 } = {}) {
  const max_tokens = rng.int(1, maxTokens);
  if (rng.next() < chatShare) {
    const words = ["license", "work", "copyright", "grant", "patent", "the", "of", "and", "notice", "source"];
    const n = rng.int(Math.max(1, minPrompt), Math.max(minPrompt, 1, Math.floor(maxPrompt / 3)));
    const content = Array.from({ length: n }, () => words[rng.int(0, words.length - 1)]).join(" ");
    return { kind: "chat", body: { messages: [{ role: "user", content }], max_tokens, temperature: 0 } };
  }
  const prompt = Array.from({ length: rng.int(minPrompt, maxPrompt) }, () => rng.int(0, 1023));
  return { kind: "completion", body: { prompt, max_tokens, temperature: 0 } };
}

// Streams `req`; returns {text, tokens, finish_reason, usage} after checking that the token count, the
// usage and the finish reason agree. Throws the SDK's abort error when `signal` fires.
export async function streamRequest(client, req, signal) {
  const opts = signal ? { signal } : {};
  let text = "", tokens = [], finish = null, usage = null;
  if (req.kind === "chat") {
    const stream = await client.chat.completions.create(
      { ...req.body, stream: true, logprobs: true, stream_options: { include_usage: true } }, opts);
    for await (const ch of stream) {
      if (ch.choices.length === 0) { usage = ch.usage; continue; }
      const c = ch.choices[0];
      text += c.delta.content ?? "";
      if (c.logprobs) tokens.push(...c.logprobs.content.map((t) => t.bytes.join(",")));
      if (c.finish_reason) finish = c.finish_reason;
    }
  } else {
    const stream = await client.completions.create(
      { ...req.body, stream: true, logprobs: 0, stream_options: { include_usage: true } }, opts);
    for await (const ch of stream) {
      if (ch.choices.length === 0) { usage = ch.usage; continue; }
      const c = ch.choices[0];
      text += c.text;
      if (c.logprobs) tokens.push(...c.logprobs.tokens);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert(["stop", "length"].includes(finish), "finish_reason stop or length, got " + finish);
  assert(usage, "usage chunk");
  assertEq(tokens.length, usage.completion_tokens, "streamed tokens == usage.completion_tokens");
  if (finish === "length") assertEq(usage.completion_tokens, req.body.max_tokens, "length means max_tokens tokens");
  else assert(usage.completion_tokens <= req.body.max_tokens, "stop within max_tokens");
  return { text, tokens, finish_reason: finish, usage };
}

export function sameResult(a, b, what) {
  assertEq(a.tokens, b.tokens, `${what}: same tokens as the request run alone`);
  assertEq(a.text, b.text, `${what}: same text as the request run alone`);
  assertEq(a.finish_reason, b.finish_reason, `${what}: same finish_reason`);
}

// Waits until the engine is idle, then checks that every KV block and state slot was given back.
export async function expectCachesFreed(server, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  let m;
  for (;;) {
    m = await server.metrics();
    if (m["rill:num_requests_running"] === 0 && m["rill:num_requests_waiting"] === 0) break;
    assert(Date.now() < deadline, "the engine drains after the load: " + JSON.stringify(m));
    await new Promise((r) => setTimeout(r, 100));
  }
  assertEq(m["rill:kv_cache_used_blocks"], 0, "no KV blocks in use after the load");
  assertEq(m["rill:state_slots_used"], 0, "no state slots in use after the load");
  return m;
}
