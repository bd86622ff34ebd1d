// The OpenAI API against a live `rill serve` with the official `openai` client: chat and completions,
// streamed and not; tools with tool_choice auto / none / required / named; n > 1; logprobs; usage accounting;
// /tokenize, /detokenize, /v1/models, /metrics; seeded sampling; response_format. What each check compares
// against:
//  - streamed vs non-streamed: the same greedy request must give the same text and token count;
//  - usage.completion_tokens vs the number of tokens streamed (one logprobs entry per token);
//  - usage.prompt_tokens vs /tokenize of the same request (chat form) or prompt;
//  - token ids vs /detokenize of the ids (text round trip);
//  - shapes vs the OpenAI schema, checked field by field (lib/harness.mjs) on top of the SDK's parsing;
//  - response_format JSON vs the schema, checked by ajv.
import { spawnSync } from "child_process";

import { Ajv, assert, assertEq, checkChatCompletion, checkCompletion, collectChatStream, MODEL_DIR, OpenAIModule, rawSse, RILL, run, startServer } from "./lib/harness.mjs";

const weather = {
  type: "function",
  function: { name: "get_weather", description: "Weather in a city", parameters: { type: "object", properties: { city: { type: "string" } } } },
};
const clock = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };
const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Tell me about the license." }];

await run("e2e_api", async (track) => {
  const server = track(await startServer(["--max_batch_size", "8"]));  // trtllm-serve's spelling
  const client = server.client();

  // Models.
  const models = await client.models.list();
  assertEq(models.data.map((m) => m.id), ["rill-tiny"], "one model card, named after the model directory");
  assertEq(models.data[0].object, "model", "model card object");

  // Chat, non-streamed vs streamed (greedy): same text, same token count.
  const whole = await client.chat.completions.create({ model: "rill-tiny", messages, max_tokens: 24, temperature: 0 });
  checkChatCompletion(whole);
  const tok = await server.fetchJson("/tokenize", { model: "rill-tiny", messages });
  assertEq(tok.status, 200, "/tokenize chat form");
  assertEq(whole.usage.prompt_tokens, tok.json.count, "usage.prompt_tokens == /tokenize of the rendered prompt");
  const streamed = await collectChatStream(
    await client.chat.completions.create({ messages, max_tokens: 24, temperature: 0, stream: true,
      stream_options: { include_usage: true }, logprobs: true, top_logprobs: 3 }), 1, true);
  const s0 = streamed.choices[0];
  assertEq(s0.content, whole.choices[0].message.content ?? "", "streamed content == non-streamed content (greedy)");
  assertEq(streamed.usage.completion_tokens, whole.usage.completion_tokens, "same completion_tokens streamed or not");
  assertEq(s0.logprobs.length, streamed.usage.completion_tokens, "completion_tokens == number of streamed tokens");
  assertEq(streamed.usage.prompt_tokens, tok.json.count, "streamed usage.prompt_tokens == /tokenize");
  for (const lp of s0.logprobs) {
    assertEq(lp.top_logprobs.length, 3, "top_logprobs has 3 entries");
    assert(lp.logprob <= 0, "logprob <= 0");
    assert(Math.abs(lp.logprob - lp.top_logprobs[0].logprob) < 1e-4, "greedy: the chosen token is the most likely");
    assertEq(Buffer.from(lp.bytes).toString("latin1").length, lp.bytes.length, "bytes are byte values");
  }
  assert(whole.choices[0].finish_reason === "length" ? whole.usage.completion_tokens === 24 : true, "length means max_tokens");

  // `rill chat` renders and parses through the same chat path: its first reply is the server's.
  const chatCli = spawnSync(RILL, ["chat", MODEL_DIR, "--device", "cpu", "--system", messages[0].content, "--max-tokens", "24",
    "--temperature", "0"], { input: messages[1].content + "\n/exit\n", encoding: "utf8", timeout: 60000 });
  assertEq(chatCli.status, 0, "rill chat exits 0: " + chatCli.stderr);
  const tail = whole.choices[0].finish_reason === "length" ? "\n[length]\n" : "\n";
  assertEq(chatCli.stdout, (whole.choices[0].message.content ?? "") + tail, "rill chat's reply == the server's (greedy)");

  // The SSE wire format itself.
  const frames = await rawSse(server, "/v1/chat/completions", { messages, max_tokens: 4, temperature: 0, stream: true });
  assertEq(frames[frames.length - 1], "[DONE]", "last frame [DONE]");
  const first = JSON.parse(frames[0]);
  assertEq(first.choices[0].delta, { role: "assistant", content: "" }, "first frame on the wire");
  assert(!("usage" in first), "no usage key without include_usage");

  // Completions: text prompt, echo, logprobs, token-id prompts, several prompts, streamed == non-streamed.
  const prompt = "Licensed under the Apache License";
  const c1 = await client.completions.create({ model: "rill-tiny", prompt, max_tokens: 12, temperature: 0, logprobs: 2 });
  checkCompletion(c1);
  const ptok = await server.fetchJson("/tokenize", { prompt });
  assertEq(c1.usage.prompt_tokens, ptok.json.count, "completions prompt_tokens == /tokenize");
  assertEq(c1.choices[0].logprobs.tokens.length, c1.usage.completion_tokens, "one logprob per completion token");
  assertEq(c1.choices[0].logprobs.top_logprobs[0] && Object.keys(c1.choices[0].logprobs.top_logprobs[0]).length <= 2, true, "<= 2 top logprobs");
  const echo = await client.completions.create({ prompt, max_tokens: 12, temperature: 0, echo: true });
  assertEq(echo.choices[0].text, prompt + c1.choices[0].text, "echo prepends the prompt");
  const byIds = await client.completions.create({ prompt: ptok.json.tokens, max_tokens: 12, temperature: 0 });
  assertEq(byIds.choices[0].text, c1.choices[0].text, "token-id prompt == text prompt");
  const det = await server.fetchJson("/detokenize", { tokens: ptok.json.tokens });
  assertEq(det.json.prompt, prompt, "/detokenize(/tokenize(x)) == x");
  const multi = await client.completions.create({ prompt: [prompt, "Copyright"], max_tokens: 6, temperature: 0, n: 2 });
  checkCompletion(multi, 4);
  assertEq(multi.choices[0].text, multi.choices[1].text, "n = 2 greedy choices agree");
  const single = await client.completions.create({ prompt: "Copyright", max_tokens: 6, temperature: 0 });
  assertEq(multi.choices[3].text, single.choices[0].text, "choice 2 * 1 + 1 belongs to prompt 1");
  let streamedText = "", finish = null, usage = null;
  for await (const ch of await client.completions.create({ prompt, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } })) {
    if (ch.choices.length === 0) { usage = ch.usage; continue; }
    streamedText += ch.choices[0].text;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  assertEq(streamedText, c1.choices[0].text, "streamed completion == non-streamed");
  assertEq(finish, c1.choices[0].finish_reason, "same finish_reason");
  assertEq(usage.completion_tokens, c1.usage.completion_tokens, "streamed usage");

  // n > 1, seeded: choices i use seed + i, so a request reproduces exactly; streamed frames interleave.
  const sampled = { messages, max_tokens: 16, temperature: 1, seed: 1234, n: 3 };
  const a = await client.chat.completions.create(sampled);
  const b = await client.chat.completions.create(sampled);
  checkChatCompletion(a, 3);
  assertEq(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content), "same seed, same text");
  const c = await client.chat.completions.create({ ...sampled, seed: 99 });
  assert(JSON.stringify(a.choices.map((x) => x.message.content)) !== JSON.stringify(c.choices.map((x) => x.message.content)),
    "different seeds give different text");
  const sn = await collectChatStream(await client.chat.completions.create({ ...sampled, stream: true }), 3);
  assertEq(sn.choices.map((x) => x.content), a.choices.map((x) => x.message.content ?? ""), "streamed n = 3 == non-streamed");

  // Tools. auto: well-formed either way; none: never tool calls; required / named: grammar-constrained (the
  // prompt opens the call, the grammar holds the rest), so a call to that tool comes back (e2e_k2_tools checks
  // the arguments).
  const auto = await client.chat.completions.create({ messages, tools: [weather, clock], max_tokens: 16, temperature: 0 });
  checkChatCompletion(auto);
  const none = await client.chat.completions.create({ messages, tools: [weather], tool_choice: "none", max_tokens: 16, temperature: 0 });
  checkChatCompletion(none);
  assert(!none.choices[0].message.tool_calls, "tool_choice none: no tool calls");
  const tokNone = await server.fetchJson("/tokenize", { messages, tools: [weather], tool_choice: "none" });
  assertEq(none.usage.prompt_tokens, tokNone.json.count, "prompt_tokens == /tokenize (tools, none)");
  for (const choice of ["required", { type: "function", function: { name: "get_time" } }]) {
    const tools = choice === "required" ? [weather] : [weather, clock];
    const want = choice === "required" ? "get_weather" : "get_time";
    const r = await client.chat.completions.create({ messages, tools, tool_choice: choice, max_tokens: 16, temperature: 0 });
    checkChatCompletion(r);
    const calls = r.choices[0].message.tool_calls;
    assert(calls && calls.length >= 1, "tool_choice " + JSON.stringify(choice) + ": a tool call");
    assertEq(calls[0].function.name, want, "the forced tool");
    assertEq(calls[0].id, `functions.${want}:0`, "K2 tool-call id");
    assert(["tool_calls", "length"].includes(r.choices[0].finish_reason), "finish_reason tool_calls (or length)");
    if (r.choices[0].finish_reason !== "length") assertEq(r.choices[0].finish_reason, "tool_calls", "tool_calls finish");
    const st = await collectChatStream(await client.chat.completions.create({ messages, tools, tool_choice: choice, max_tokens: 16, temperature: 0, stream: true }));
    assertEq(st.choices[0].tool_calls.map((t) => [t.id, t.name, t.arguments]),
      calls.map((t) => [t.id, t.function.name, t.function.arguments]), "streamed tool calls == non-streamed");
    const tk = await server.fetchJson("/tokenize", { messages, tools, tool_choice: choice });
    assertEq(r.usage.prompt_tokens, tk.json.count, "prompt_tokens == /tokenize (forced tool call)");
  }
  // A conversation that continues after a tool result renders and runs.
  const followUp = await client.chat.completions.create({
    messages: [...messages, { role: "assistant", content: null, tool_calls: [{ id: "functions.get_weather:0", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } }] },
      { role: "tool", tool_call_id: "functions.get_weather:0", content: "sunny" }],
    tools: [weather], max_tokens: 8, temperature: 0 });
  checkChatCompletion(followUp);

  // Stop strings: the text stops before the stop string (vLLM semantics).
  const long = await client.completions.create({ prompt, max_tokens: 32, temperature: 0 });
  const cut = long.choices[0].text.slice(4, 7);
  if (cut.length === 3 && long.choices[0].text.indexOf(cut) === 4) {
    const stopped = await client.completions.create({ prompt, max_tokens: 32, temperature: 0, stop: [cut] });
    assertEq(stopped.choices[0].text, long.choices[0].text.slice(0, 4), "text ends before the stop string");
    assertEq(stopped.choices[0].finish_reason, "stop", "finish_reason stop");
  }

  // response_format json_schema / json_object is grammar-constrained (src/text/constraint): even random
  // weights answer with JSON that ajv (an independent JSON Schema validator) accepts; streamed == whole.
  const person = { type: "object", properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer" },
    pets: { type: "array", items: { enum: ["cat", "dog"] }, maxItems: 3 } }, required: ["name", "age"], additionalProperties: false };
  const ajv = new Ajv({ strict: false });
  for (const [seed, response_format, validate] of [
    [1, { type: "json_schema", json_schema: { name: "person", schema: person } }, ajv.compile(person)],
    [2, { type: "json_schema", json_schema: { name: "person", schema: person, strict: true } }, ajv.compile(person)],
    // Any object: its keys are unbounded strings, which random weights often leave open past max_tokens; with
    // this prompt, seed 14 closes a non-empty object in 75 tokens.
    [14, { type: "json_object" }, ajv.compile({ type: "object" })]]) {
    const body = { model: "rill-tiny", messages, response_format, max_tokens: 300, temperature: 1, seed };
    const r = await client.chat.completions.create(body);
    checkChatCompletion(r);
    const where = `response_format ${response_format.type}, seed ${seed}`;
    assertEq(r.choices[0].finish_reason, "stop", `${where}: ends after the JSON value`);
    const text = r.choices[0].message.content;
    let value;
    try { value = JSON.parse(text); } catch (e) { assert(false, `${where}: not JSON: ${text}`); }
    assert(validate(value), `${where}: ${text} fails the schema: ${ajv.errorsText(validate.errors)}`);
    const st = await collectChatStream(await client.chat.completions.create({ ...body, stream: true }));
    assertEq(st.choices[0].content, text, `${where}: streamed == non-streamed`);
  }
  let badSchema = null;
  try {
    await client.chat.completions.create({ model: "rill-tiny", messages, max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "str" } } } } } });
  } catch (e) { badSchema = e; }
  assert(badSchema instanceof OpenAIModule.BadRequestError && /response_format.*properties\.a\.type/.test(badSchema.message),
    "a schema rill cannot compile is a 400 naming where: " + badSchema?.message);

  // Metrics after the traffic above.
  const m = await server.metrics();
  assert(m["rill:request_success_total{finished_reason=\"length\"}"] > 0, "request_success_total counts");
  assert(m["rill:time_to_first_token_seconds_count"] > 0, "TTFT histogram filled");
  assert(m["rill:generation_tokens_total"] > 0 && m["rill:prompt_tokens_total"] > 0, "token counters");
  assertEq(m["rill:kv_cache_used_blocks"], 0, "no blocks used when idle");
  assertEq(m["rill:state_slots_used"], 0, "no slots used when idle");
  assert(m["rill:kv_cache_total_blocks"] > 0 && m["rill:state_slots_total"] === 8, "cache totals (max batch 8)");
});
