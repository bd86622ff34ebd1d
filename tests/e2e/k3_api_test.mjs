// Kimi K3 over the OpenAI API: `rill serve` on the tiny K3 checkpoint (`rill tiny-model --kimi-k3`: K3's
// control-block vocabulary, no Jinja template, random weights) driven by the official `openai` client.
// What each check compares against:
//  - the rendered prompt: /tokenize of the chat request, decoded by /detokenize, vs Kimi-K3.jinja rendered by
//    Python jinja2 (tests/text/k3/render_k3_reference.py, the K3 renderer unit test's reference) for the same
//    template variables (thinking, thinking_effort, tools, tool_choice, history tool calls and results);
//  - usage.prompt_tokens vs the /tokenize count minus K3's generation stub (serving.md §1.4: `<|open|>think<|sep|>`
//    or `<|open|>response<|sep|>`, 3 ids with the Kimi vocabulary; the tiny BPE may split the tag name, so the
//    stub is measured with /tokenize of the prompt form), and the X-Msh-Usage-Prompt-Tokens header;
//  - streamed vs non-streamed (greedy): the same reasoning_content, content, tool calls and token counts;
//  - reasoning: K3 thinks by default, i.e. the generation prompt ends in `<|open|>think<|sep|>`, so whatever the
//    model writes first is reasoning_content (random weights or not); thinking off (`thinking: {type:
//    "disabled"}`, or chat_template_kwargs.thinking = false) ends it in `<|open|>response<|sep|>`: content only.
//  - tools: tools / tool_choice "required" / "none" render as the reference does, tool_choice naming a
//    function renders as "auto" (K3 has no form for it) and is forced to one call of that tool by the grammar,
//    and a follow-up turn with an assistant tool call and a `tool` result renders in the XTML call format and
//    runs. Unconstrained, the random model never writes an XTML
//    tool section; tool_choice "required" is grammar-constrained, so there the openai client gets tool_calls,
//    whose arguments ajv validates against each tool's JSON Schema; so is response_format json_schema (the
//    content validated the same way).
//  - `rill chat` (same chat path, no server): the same reasoning and content as the server's greedy reply;
//  - SIGTERM: the server exits 0 (lib/harness.mjs `run`).
import { spawnSync } from "child_process";
import path from "path";
import { fileURLToPath } from "url";

import { Ajv, assert, assertEq, checkChatCompletion, collectChatStream, MODEL_DIR, OpenAIModule, RILL, run, startServer } from "./lib/harness.mjs";
import { checkSharedFiles, SHARED_DIR as SHARED, skip } from "../shared_data.mjs";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REFERENCE = path.resolve(HERE, "../text/k3/render_k3_reference.py");
// Without Kimi-K3.jinja (shared test data) everything else runs and the test then reports as skipped.
const missingTemplate = checkSharedFiles("e2e_k3_api", ["chat_templates/Kimi-K3.jinja"]);
const MODEL = "rill-tiny-k3";

const weather = {
  type: "function",
  function: { name: "get_weather", description: "Weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
};
const clock = { type: "function", function: { name: "get_time", parameters: { type: "object", properties: {} } } };
const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Tell me about the license." }];
const toolTurn = [
  ...messages,
  { role: "assistant", content: "Checking.", reasoning_content: "The user wants the weather.",
    tool_calls: [{ id: "get_weather_0", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
                 { id: "get_time_1", type: "function", function: { name: "get_time", arguments: "{}" } }] },
  { role: "tool", tool_call_id: "get_weather_0", content: "sunny" },
  { role: "tool", tool_call_id: "get_time_1", content: "12:00" },
];

// Kimi-K3.jinja under jinja2, one text per variables object.
function jinjaRender(variablesList) {
  const r = spawnSync("python3", [REFERENCE, SHARED], { input: JSON.stringify(variablesList), encoding: "utf8", timeout: 60000 });
  assert(r.status === 0, `render_k3_reference.py (python3 + jinja2, shared dir ${SHARED}) failed:\n${r.stderr}`);
  const out = JSON.parse(r.stdout);
  return out.map((o, i) => {
    assert(typeof o.text === "string", `the reference rendered case ${i}: ${JSON.stringify(o)}`);
    return o.text;
  });
}

await run("e2e_k3_api", async (track) => {
  const server = track(await startServer());
  const client = server.client();

  // Models.
  const models = await client.models.list();
  assertEq(models.data.map((m) => m.id), [MODEL], "one model card, named after the model directory");

  // The generation stubs usage leaves out, in this vocabulary.
  const stubIds = async (text) => (await server.fetchJson("/tokenize", { model: MODEL, prompt: text })).json.count;
  const THINK_STUB = await stubIds("<|open|>think<|sep|>"), RESPONSE_STUB = await stubIds("<|open|>response<|sep|>");
  assert(THINK_STUB >= 3 && RESPONSE_STUB >= 3, "stubs: <|open|> + tag + <|sep|>");

  // The rendered prompt is Kimi-K3.jinja's: request -> (server) /tokenize -> /detokenize vs (reference)
  // the template variables the request stands for.
  const renders = [
    { request: { messages }, vars: {} },
    { request: { messages, thinking: { type: "disabled" } }, vars: { thinking: false } },
    { request: { messages, chat_template_kwargs: { thinking: false } }, vars: { thinking: false } },
    { request: { messages, reasoning_effort: "low" }, vars: { thinking_effort: "low" } },
    { request: { messages, thinking: { type: "enabled", effort: "high" }, reasoning_effort: "low" }, vars: { thinking_effort: "high" } },
    { request: { messages, tools: [weather, clock] }, vars: { tools: [weather, clock] } },
    { request: { messages, tools: [weather], tool_choice: "required" }, vars: { tools: [weather], tool_choice: "required" } },
    { request: { messages, tools: [weather], tool_choice: "none" }, vars: { tools: [weather], tool_choice: "none" } },
    { request: { messages: toolTurn, tools: [weather, clock] }, vars: { tools: [weather, clock] } },
    { request: { messages: toolTurn, tools: [weather, clock], thinking: { type: "disabled" } }, vars: { tools: [weather, clock], thinking: false } },
  ];
  const reference = missingTemplate ? null : jinjaRender(renders.map(({ request, vars }) => ({ messages: structuredClone(request.messages), add_generation_prompt: true, ...vars })));
  const rendered = [];
  for (const [i, { request }] of renders.entries()) {
    const tok = await server.fetchJson("/tokenize", { model: MODEL, ...request });
    assertEq(tok.status, 200, `/tokenize chat form (case ${i}): ${tok.text}`);
    assertEq(tok.json.count, tok.json.tokens.length, "count == number of ids");
    const det = await server.fetchJson("/detokenize", { model: MODEL, tokens: tok.json.tokens });
    assertEq(det.status, 200, "/detokenize");
    if (reference) assertEq(det.json.prompt, reference[i], `the served prompt is Kimi-K3.jinja's (case ${i}: ${JSON.stringify(request).slice(0, 200)})`);
    rendered.push({ text: det.json.prompt, count: tok.json.count });
  }
  const [plain, off] = rendered;
  assert(plain.text.endsWith('<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'), "thinking on: the prompt opens the think channel");
  assert(plain.text.includes("`thinking_effort=max`"), "default effort max");
  assert(off.text.endsWith('<|open|>message role="assistant"<|sep|><|open|>response<|sep|>'), "thinking off: the prompt opens the response channel");
  assertEq(rendered[2].text, off.text, "chat_template_kwargs.thinking=false == thinking.type disabled");
  assert(rendered[4].text.includes("`thinking_effort=high`"), "thinking.effort beats reasoning_effort");
  assert(rendered[6].text.includes("`tool_choice=required`"), "tool_choice required renders its system message");
  assert(rendered[7].text.includes("`tool_choice=none`"), "tool_choice none renders its system message");
  const history = rendered[8].text;
  for (const part of ['<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>',
    '<|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|><|close|>call<|sep|>',
    '<|open|>call tool="get_time" index="2"<|sep|>',
    '<|open|>think<|sep|>The user wants the weather.<|close|>think<|sep|>',
    '<|open|>message role="tool" tool="get_weather" index="1"<|sep|>sunny<|close|>message<|sep|><|end_of_msg|>',
    '<|open|>message role="tool" tool="get_time" index="2"<|sep|>12:00<|close|>message<|sep|><|end_of_msg|>'])
    assert(history.includes(part), "the history renders the XTML tool-call format: " + part);

  // Thinking on (the default), greedy, whole vs streamed: reasoning_content comes back both ways and agrees.
  const req = { model: MODEL, messages, max_tokens: 24, temperature: 0 };
  const { data: whole, response } = await client.chat.completions.create(req).withResponse();
  checkChatCompletion(whole);
  const msg = whole.choices[0].message;
  assert(typeof msg.reasoning_content === "string" && msg.reasoning_content.length > 0,
    "thinking on: the message has reasoning_content: " + JSON.stringify(msg));
  assertEq(whole.usage.prompt_tokens, plain.count - THINK_STUB, "usage.prompt_tokens == /tokenize count - the generation stub");
  assertEq(response.headers.get("x-msh-usage-prompt-tokens"), String(whole.usage.prompt_tokens), "X-Msh-Usage-Prompt-Tokens");
  assert(whole.usage.completion_tokens_details.reasoning_tokens > 0, "reasoning_tokens counted");
  assert(whole.usage.completion_tokens_details.reasoning_tokens <= whole.usage.completion_tokens, "reasoning_tokens <= completion_tokens");
  const streamed = await collectChatStream(await client.chat.completions.create({ ...req, stream: true,
    stream_options: { include_usage: true } }), 1, true);
  const s0 = streamed.choices[0];
  assert(s0.reasoning.length > 0, "streamed reasoning_content deltas");
  assertEq(s0.reasoning, msg.reasoning_content, "streamed reasoning_content == non-streamed (greedy)");
  assertEq(s0.content, msg.content ?? "", "streamed content == non-streamed");
  assertEq(s0.finish_reason, whole.choices[0].finish_reason, "same finish_reason");
  assertEq(streamed.usage.completion_tokens, whole.usage.completion_tokens, "same completion_tokens streamed or not");
  assertEq(streamed.usage.completion_tokens_details.reasoning_tokens, whole.usage.completion_tokens_details.reasoning_tokens,
    "same reasoning_tokens streamed or not");
  assertEq(streamed.usage.prompt_tokens, whole.usage.prompt_tokens, "same prompt_tokens streamed or not");
  console.log(`k3 thinking on: finish ${whole.choices[0].finish_reason}, ${whole.usage.completion_tokens} tokens, ` +
    `${whole.usage.completion_tokens_details.reasoning_tokens} reasoning, reasoning ${JSON.stringify(msg.reasoning_content.slice(0, 60))}`);
  // `rill chat` renders and parses through the same K3 path: it prints the reasoning, then the content.
  const chatCli = spawnSync(RILL, ["chat", MODEL_DIR, "--device", "cpu", "--system", messages[0].content, "--max-tokens", "24",
    "--temperature", "0"], { input: messages[1].content + "\n/exit\n", encoding: "utf8", timeout: 60000 });
  assertEq(chatCli.status, 0, "rill chat exits 0: " + chatCli.stderr);
  const tail = whole.choices[0].finish_reason === "length" ? "\n[length]\n" : "\n";
  assert(chatCli.stdout.startsWith(msg.reasoning_content) && chatCli.stdout.endsWith((msg.content ?? "") + tail),
    `rill chat's reply == the server's (greedy): ${JSON.stringify(chatCli.stdout)}`);
  // Usage follows OpenAI's rule as on K2 (not Moonshot's usage without opt-in): no usage without include_usage.
  for (const extra of [{}, { stream_options: { include_usage: false } }]) {
    const noUsage = await collectChatStream(await client.chat.completions.create({ ...req, max_tokens: 4, stream: true,
      ...extra }), 1, false);
    assert(noUsage.usage === null, "no usage chunk without include_usage: " + JSON.stringify(extra));
  }

  // Thinking off: the same conversation answers in content, with no reasoning_content, streamed or not.
  for (const extra of [{ thinking: { type: "disabled" } }, { chat_template_kwargs: { thinking: false } }]) {
    const w = await client.chat.completions.create({ ...req, ...extra });
    checkChatCompletion(w);
    assert(!("reasoning_content" in w.choices[0].message), "thinking off: no reasoning_content " + JSON.stringify(w.choices[0].message));
    assert((w.choices[0].message.content ?? "").length > 0, "thinking off: content");
    assertEq(w.usage.prompt_tokens, off.count - RESPONSE_STUB, "thinking off: prompt_tokens == /tokenize count - stub");
    assertEq(w.usage.completion_tokens_details.reasoning_tokens, 0, "thinking off: no reasoning tokens");
    const st = await collectChatStream(await client.chat.completions.create({ ...req, ...extra, stream: true }));
    assertEq(st.choices[0].reasoning, "", "thinking off: no streamed reasoning");
    assertEq(st.choices[0].content, w.choices[0].message.content, "thinking off: streamed content == non-streamed");
  }

  // Tools. Named: the prompt of "auto" (the reference has no form for it, serving.md §2.6), so /tokenize
  // gives the same ids; the grammar forces exactly one call of the named tool (checked with ajv below).
  const namedChoice = { type: "function", function: { name: "get_weather" } };
  const namedTok = await server.fetchJson("/tokenize", { model: MODEL, messages, tools: [weather, clock], tool_choice: namedChoice });
  assertEq(namedTok.json.tokens, (await server.fetchJson("/tokenize", { model: MODEL, messages, tools: [weather, clock] })).json.tokens,
    "named tool_choice renders as auto");
  let requiredNoTools = null;
  try { await client.chat.completions.create({ ...req, tool_choice: "required" }); } catch (e) { requiredNoTools = e; }
  assert(requiredNoTools instanceof OpenAIModule.BadRequestError, "tool_choice required without tools: 400");

  // auto / required / none run; streamed == non-streamed, with any call in K3's `NAME_<n>` id form.
  for (const [i, body] of [[5, { tools: [weather, clock] }], [6, { tools: [weather], tool_choice: "required" }],
    [7, { tools: [weather], tool_choice: "none" }], [8, { messages: toolTurn, tools: [weather, clock] }]]) {
    const r = await client.chat.completions.create({ ...req, max_tokens: 8, ...body });
    checkChatCompletion(r);
    assertEq(r.usage.prompt_tokens, rendered[i].count - THINK_STUB, `prompt_tokens == /tokenize - stub (${JSON.stringify(body).slice(0, 80)})`);
    const calls = r.choices[0].message.tool_calls ?? [];
    const first = i === 8 ? 2 : 0;  // two calls earlier in the conversation: ids continue from 2
    calls.forEach((c, k) => assertEq(c.id, `${c.function.name}_${first + k}`, "K3 tool-call id NAME_<n>"));
    if (calls.length) assert(["tool_calls", "length"].includes(r.choices[0].finish_reason), "finish_reason tool_calls (or length)");
    assert(typeof r.choices[0].message.reasoning_content === "string", "thinking on: reasoning_content with tools too");
    const st = await collectChatStream(await client.chat.completions.create({ ...req, max_tokens: 8, ...body, stream: true,
      stream_options: { include_usage: true } }), 1, true);
    assertEq(st.choices[0].tool_calls.map((t) => [t.id, t.name, t.arguments]),
      calls.map((t) => [t.id, t.function.name, t.function.arguments]), "streamed tool calls == non-streamed");
    assertEq(st.choices[0].reasoning, r.choices[0].message.reasoning_content, "streamed reasoning == non-streamed (tools)");
    assertEq(st.choices[0].content, r.choices[0].message.content ?? "", "streamed content == non-streamed (tools)");
    assertEq(st.usage.completion_tokens, r.usage.completion_tokens, "same completion_tokens (tools)");
  }

  // A forced call cut by max_tokens (issue 34): no protocol markup in content, streamed or not. K3 calls are
  // emitted once closed, so a cut one is dropped (as vLLM drops incomplete calls); streamed == non-streamed.
  for (const maxTokens of [2, 4, 8, 12, 20]) {
    const body = { ...req, tools: [weather, clock], tool_choice: "required", thinking: { type: "disabled" },
      max_tokens: maxTokens, temperature: 1, seed: 5 };
    const where = `K3 forced call cut at max_tokens ${maxTokens}`;
    const r = await client.chat.completions.create(body);
    const msg = r.choices[0].message;
    assert(!/<\||call tool=/.test(msg.content ?? ""), `${where}: no markup in content: ${JSON.stringify(msg.content)}`);
    const st = await collectChatStream(await client.chat.completions.create({ ...body, stream: true }), 1, false);
    assert(!/<\||call tool=/.test(st.choices[0].content), `${where}: no markup in streamed content: ${st.choices[0].content}`);
    assertEq(st.choices[0].tool_calls.map((t) => [t.id, t.name, t.arguments]),
      (msg.tool_calls ?? []).map((t) => [t.id, t.function.name, t.function.arguments]), `${where}: streamed == non-streamed`);
  }

  // tool_choice "required" is grammar-constrained (src/text/k3/turn_grammar.h), so even random weights write
  // a tools section: the openai client gets tool_calls of declared tools, finish_reason "tool_calls", and
  // arguments that ajv (an independent JSON Schema validator) accepts under the tool's parameters; one call
  // when parallel_tool_calls is false; streamed == non-streamed. Sampled (seeded) so the calls vary.
  const alarm = {
    type: "function",
    function: {
      name: "set_alarm",
      parameters: {
        type: "object",
        properties: {
          unit: { enum: ["celsius", "fahrenheit"] }, loud: { type: "boolean" }, label: { type: "string", maxLength: 6 },
          repeat: { type: "integer" }, tags: { type: "array", items: { enum: ["a", "b\"c"] }, maxItems: 2 },
          when: { anyOf: [{ type: "null" }, { type: "object", properties: { hour: { type: "integer" } }, required: ["hour"] }] },
        },
        required: ["unit", "loud"],
        additionalProperties: false,
      },
    },
  };
  const ajv = new Ajv({ strict: false });
  const validators = { set_alarm: ajv.compile(alarm.function.parameters), get_time: ajv.compile(clock.function.parameters) };
  let sawParallel = false;
  for (const [seed, parallel] of [[1, true], [2, true], [3, false], [5, false]]) {
    const body = { ...req, messages, tools: [alarm, clock], tool_choice: "required", thinking: { type: "disabled" },
      max_tokens: 400, temperature: 1, seed, parallel_tool_calls: parallel };
    const r = await client.chat.completions.create(body);
    checkChatCompletion(r);
    const where = `required, seed ${seed}, parallel ${parallel}`;
    if (process.env.RILL_E2E_VERBOSE) console.log(where, r.usage.completion_tokens, JSON.stringify(r.choices[0].message.tool_calls));
    assertEq(r.choices[0].finish_reason, "tool_calls", `${where}: finish_reason`);
    const calls = r.choices[0].message.tool_calls ?? [];
    assert(calls.length >= 1, `${where}: at least one call`);
    if (!parallel) assertEq(calls.length, 1, `${where}: one call`);
    sawParallel ||= calls.length > 1;
    assert(!r.choices[0].message.content, `${where}: no content besides the calls`);
    calls.forEach((c, k) => {
      assertEq(c.id, `${c.function.name}_${k}`, `${where}: id`);
      const validate = validators[c.function.name];
      assert(validate, `${where}: a declared tool, got ${c.function.name}`);
      const args = JSON.parse(c.function.arguments);
      assert(validate(args), `${where}: ${c.function.arguments} fails ${c.function.name}'s schema: ${ajv.errorsText(validate.errors)}`);
    });
    const st = await collectChatStream(await client.chat.completions.create({ ...body, stream: true }));
    assertEq(st.choices[0].finish_reason, "tool_calls", `${where}: streamed finish_reason`);
    assertEq(st.choices[0].tool_calls.map((t) => [t.id, t.name, t.arguments]),
      calls.map((t) => [t.id, t.function.name, t.function.arguments]), `${where}: streamed tool calls == non-streamed`);
  }
  assert(sawParallel, "some parallel request made more than one call");
  // Named: exactly one call, of that tool, parallel_tool_calls or not; streamed == non-streamed.
  for (const seed of [1, 2]) {
    const body = { ...req, messages, tools: [alarm, clock], tool_choice: { type: "function", function: { name: "set_alarm" } },
      thinking: { type: "disabled" }, max_tokens: 400, temperature: 1, seed };
    const r = await client.chat.completions.create(body);
    assertEq(r.choices[0].finish_reason, "tool_calls", `named, seed ${seed}: finish_reason`);
    const calls = r.choices[0].message.tool_calls ?? [];
    assertEq(calls.map((c) => [c.id, c.function.name]), [["set_alarm_0", "set_alarm"]], `named, seed ${seed}: one call of set_alarm`);
    assert(validators.set_alarm(JSON.parse(calls[0].function.arguments)), `named, seed ${seed}: ${calls[0].function.arguments}`);
    const st = await collectChatStream(await client.chat.completions.create({ ...body, stream: true }));
    assertEq(st.choices[0].tool_calls.map((t) => [t.id, t.name, t.arguments]),
      calls.map((t) => [t.id, t.function.name, t.function.arguments]), `named, seed ${seed}: streamed == non-streamed`);
  }

  // response_format json_schema is grammar-constrained too: the response channel is the JSON value.
  for (const seed of [1, 2]) {
    const body = { ...req, messages, thinking: { type: "disabled" }, max_tokens: 300, temperature: 1, seed,
      response_format: { type: "json_schema", json_schema: { name: "alarm", schema: alarm.function.parameters } } };
    const r = await client.chat.completions.create(body);
    checkChatCompletion(r);
    assertEq(r.choices[0].finish_reason, "stop", `response_format seed ${seed}: ends after the JSON value`);
    const text = r.choices[0].message.content;
    assert(validators.set_alarm(JSON.parse(text)), `response_format seed ${seed}: ${text}: ${ajv.errorsText(validators.set_alarm.errors)}`);
    const st = await collectChatStream(await client.chat.completions.create({ ...body, stream: true }));
    assertEq(st.choices[0].content, text, `response_format seed ${seed}: streamed == non-streamed`);
  }
});
if (missingTemplate && !process.exitCode) skip("e2e_k3_api", `the rest passed; the prompts were not compared with Kimi-K3.jinja: ${missingTemplate}`);
