// A matrix of bad requests against a live server: each gets the right 4xx and the OpenAI error envelope
// {"error": {"message", "type", "param", "code"}} (param naming the field where there is one), while good
// streaming requests run concurrently and still produce exactly the reference output. A second server
// checks --api-key (401) and --max-request-bytes (413).
import { assert, assertEq, OpenAIModule, run, sleep, startServer } from "./lib/harness.mjs";

const user = [{ role: "user", content: "hello" }];
const chat = (extra) => ({ path: "/v1/chat/completions", body: { model: "rill-tiny", messages: user, max_tokens: 4, ...extra } });
const cmpl = (extra) => ({ path: "/v1/completions", body: { model: "rill-tiny", prompt: "hello", max_tokens: 4, ...extra } });
const tool = (name, type = "function") => ({ type, function: { name, parameters: { type: "object", properties: {} } } });
const MAX_LEN = 1024;

// [name, request, status, param (undefined: not checked)]
const CASES = [
  ["malformed JSON", { path: "/v1/chat/completions", raw: '{"messages": [' }, 400, null],
  ["body is an array", { path: "/v1/chat/completions", raw: "[1, 2]" }, 400, null],
  ["messages missing", { path: "/v1/chat/completions", body: { max_tokens: 4 } }, 400, "messages"],
  ["messages empty", chat({ messages: [] }), 400, "messages"],
  ["messages not a list", chat({ messages: "hello" }), 400, "messages"],
  ["unknown role", chat({ messages: [{ role: "wizard", content: "x" }] }), 400, "messages[0].role"],
  ["role missing", chat({ messages: [{ content: "x" }] }), 400, "messages[0].role"],
  ["content a number", chat({ messages: [{ role: "user", content: 5 }] }), 400, "messages[0].content"],
  ["user content missing", chat({ messages: [{ role: "user" }] }), 400, "messages[0].content"],
  ["image content part", chat({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x" } }] }] }), 400, "messages[0].content[0].type"],
  ["unknown content part", chat({ messages: [{ role: "user", content: [{ type: "hologram" }] }] }), 400, "messages[0].content[0].type"],
  ["tool message without tool_call_id", chat({ messages: [{ role: "tool", content: "x" }] }), 400, "messages[0].tool_call_id"],
  ["temperature too high", chat({ temperature: 2.5 }), 400, "temperature"],
  ["temperature a string", chat({ temperature: "hot" }), 400, "temperature"],
  ["top_p zero", chat({ top_p: 0 }), 400, "top_p"],
  ["top_k below -1", chat({ top_k: -5 }), 400, "top_k"],
  ["min_p above 1", chat({ min_p: 2 }), 400, "min_p"],
  ["presence_penalty out of range", chat({ presence_penalty: 5 }), 400, "presence_penalty"],
  ["frequency_penalty out of range", chat({ frequency_penalty: -3 }), 400, "frequency_penalty"],
  ["repetition_penalty zero", chat({ repetition_penalty: 0 }), 400, "repetition_penalty"],
  ["n too large", chat({ n: 17 }), 400, "n"],
  ["n zero", chat({ n: 0 }), 400, "n"],
  ["max_tokens zero", chat({ max_tokens: 0 }), 400, "max_tokens"],
  ["max_tokens a string", chat({ max_tokens: "ten" }), 400, "max_tokens"],
  ["logprobs not a boolean", chat({ logprobs: "yes" }), 400, "logprobs"],
  ["top_logprobs without logprobs", chat({ top_logprobs: 2 }), 400, "top_logprobs"],
  ["top_logprobs above 20", chat({ logprobs: true, top_logprobs: 21 }), 400, "top_logprobs"],
  ["stop not a string", chat({ stop: 7 }), 400, "stop"],
  ["stream_options without stream", chat({ stream_options: { include_usage: true } }), 400, "stream_options"],
  ["logit_bias", chat({ logit_bias: { "5": 10 } }), 400, "logit_bias"],
  ["tool type not function", chat({ tools: [tool("f", "retrieval")] }), 400, "tools[0].type"],
  ["tool name pattern", chat({ tools: [tool("1bad")] }), 400, "tools[0].function.name"],
  ["duplicate tool names", chat({ tools: [tool("f"), tool("f")] }), 400, "tools[1].function.name"],
  ["tools not a list", chat({ tools: tool("f") }), 400, "tools"],
  ["tool_choice required without tools", chat({ tool_choice: "required" }), 400, "tool_choice"],
  ["tool_choice names an unknown tool", chat({ tools: [tool("f")], tool_choice: { type: "function", function: { name: "g" } } }), 400, "tool_choice"],
  ["tool_choice bogus", chat({ tools: [tool("f")], tool_choice: "sometimes" }), 400, "tool_choice"],
  ["response_format bad type", chat({ response_format: { type: "yaml" } }), 400, "response_format.type"],
  ["json_schema without schema", chat({ response_format: { type: "json_schema", json_schema: { name: "x" } } }), 400, "response_format.json_schema.schema"],
  ["chat_template_kwargs not an object", chat({ chat_template_kwargs: "x" }), 400, "chat_template_kwargs"],
  ["unknown model (chat)", chat({ model: "gpt-4" }), 404, "model"],
  ["unknown model (completions)", cmpl({ model: "gpt-4" }), 404, "model"],
  ["prompt too long", cmpl({ prompt: Array(MAX_LEN + 10).fill(5) }), 400, "prompt"],
  ["prompt + max_tokens beyond the context", cmpl({ prompt: Array(MAX_LEN - 10).fill(5), max_tokens: 100 }), 400, "max_tokens"],
  ["messages + max_tokens beyond the context", chat({ max_tokens: MAX_LEN }), 400, "max_tokens"],
  ["suffix", cmpl({ suffix: "tail" }), 400, "suffix"],
  ["prompt missing", { path: "/v1/completions", body: { max_tokens: 4 } }, 400, "prompt"],
  ["prompt ids outside the vocabulary", cmpl({ prompt: [1, 999999] }), 400, "prompt"],
  ["prompt of mixed types", cmpl({ prompt: [1, "a"] }), 400, "prompt"],
  ["echo with logprobs", cmpl({ echo: true, logprobs: 1 }), 400, "echo"],
  ["completions logprobs above 20", cmpl({ logprobs: 21 }), 400, "logprobs"],
  ["detokenize outside the vocabulary", { path: "/detokenize", body: { tokens: [-1] } }, 400, "tokens"],
  ["tokenize without prompt", { path: "/tokenize", body: {} }, 400, "prompt"],
  ["unknown route", { path: "/v1/nope", body: {} }, 404, null],
  ["wrong method", { path: "/v1/chat/completions", method: "GET" }, 405, null],
];

function checkEnvelope(r, status, param, name) {
  assertEq(r.status, status, `${name}: HTTP status (body ${r.text})`);
  assert(r.json && typeof r.json.error === "object", `${name}: {"error": {...}} envelope: ${r.text}`);
  const e = r.json.error;
  assert(typeof e.message === "string" && e.message.length > 0, `${name}: error.message`);
  assert(typeof e.type === "string" && e.type.length > 0, `${name}: error.type`);
  assert("param" in e && "code" in e, `${name}: error.param and error.code present`);
  assertEq(e.code, status, `${name}: error.code`);
  if (param !== undefined) assertEq(e.param, param, `${name}: error.param (message: ${e.message})`);
}

async function send(server, req) {
  if (req.method === "GET") return server.fetchJson(req.path);
  return server.fetchJson(req.path, req.raw ?? req.body, req.headers ?? {});
}

await run("e2e_bad_requests", async (track) => {
  const server = track(await startServer(["--max-model-len", String(MAX_LEN), "--max-num-tokens", "1024"]));
  const client = server.client();
  assert(CASES.length >= 30, "at least 30 cases");

  // Good traffic alongside the bad: greedy streams whose text must equal the reference.
  const good = { prompt: "The License", max_tokens: 24, temperature: 0 };
  const reference = (await client.completions.create(good)).choices[0].text;
  let stop = false, goodDone = 0;
  const goodLoop = async () => {
    while (!stop) {
      let text = "";
      for await (const ch of await client.completions.create({ ...good, stream: true })) text += ch.choices[0]?.text ?? "";
      assertEq(text, reference, "a concurrent good request is unaffected");
      goodDone++;
    }
  };
  const loops = [goodLoop(), goodLoop(), goodLoop()];

  for (const [name, req, status, param] of CASES) checkEnvelope(await send(server, req), status, param, name);
  // Through the SDK: the status maps to its error classes.
  try {
    await client.chat.completions.create({ model: "rill-tiny", messages: user, temperature: 9 });
    throw new Error("expected a 400");
  } catch (e) {
    assert(e instanceof OpenAIModule.BadRequestError, "SDK raises BadRequestError: " + e);
    assertEq(e.status, 400, "SDK status");
  }
  try {
    await client.chat.completions.create({ model: "gpt-4", messages: user });
    throw new Error("expected a 404");
  } catch (e) {
    assert(e instanceof OpenAIModule.NotFoundError, "SDK raises NotFoundError: " + e);
    assertEq(e.error?.message ?? e.message.replace(/^404 /, ""), "The model `gpt-4` does not exist.", "404 text");
  }
  await sleep(200);
  stop = true;
  await Promise.all(loops);
  assert(goodDone >= 3, "good requests ran during the matrix");
  const m = await server.metrics();
  assert(m['rill:http_responses_total{code="400"}'] >= CASES.filter((c) => c[2] === 400).length, "400s counted in /metrics");

  // --api-key and --max-request-bytes.
  const locked = track(await startServer(["--api-key", "sekrit", "--max-request-bytes", "4096"]));
  const noKey = await locked.fetchJson("/v1/models");
  checkEnvelope(noKey, 401, null, "missing API key");
  checkEnvelope(await locked.fetchJson("/v1/chat/completions", chat({}).body, { authorization: "Bearer wrong" }), 401, null, "wrong API key");
  try {
    await locked.client({ apiKey: "wrong" }).models.list();
    throw new Error("expected a 401");
  } catch (e) {
    assert(e instanceof OpenAIModule.AuthenticationError, "SDK raises AuthenticationError: " + e);
  }
  const ok = await locked.client({ apiKey: "sekrit" }).chat.completions.create({ messages: user, max_tokens: 2 });
  assertEq(ok.choices.length, 1, "the right key works");
  assertEq((await locked.fetchJson("/health")).status, 200, "/health needs no key");
  const big = await locked.fetchJson("/v1/completions", { prompt: "x".repeat(10000) }, { authorization: "Bearer sekrit" });
  checkEnvelope(big, 413, null, "body over --max-request-bytes");

  // A full queue: 429 with the envelope (the SDK would retry it; clients back off).
  const small = track(await startServer(["--max-batch-size", "1", "--max-queue", "1"]));
  const burst = await Promise.all(Array.from({ length: 6 }, () =>
    small.fetchJson("/v1/completions", { prompt: [1, 2, 3], max_tokens: 64, ignore_eos: true })));
  const full = burst.filter((r) => r.status === 429);
  assert(full.length >= 1, "a burst over --max-queue gets 429: " + burst.map((r) => r.status));
  for (const r of full) checkEnvelope(r, 429, null, "queue full");
  for (const r of burst.filter((r) => r.status !== 429)) assertEq(r.status, 200, "the admitted requests complete");
});
