// Forced tool calls on the K2 family: `rill serve` on the tiny Kimi-Linear checkpoint (`rill tiny-model`: the
// K2 tool-call format, random weights) driven by the official `openai` client. The weights are random, so
// every well-formed call below comes from the grammar (src/text/k2/turn_grammar.h). What each check compares
// against:
//  - tool_choice "required" (two tools) and a named function: the openai client's parsed message has
//    tool_calls of declared tools (the named one only, exactly one call), ids `functions.NAME:IDX` counted
//    from the calls earlier in the conversation, no content, finish_reason "tool_calls"; one call when
//    parallel_tool_calls is false;
//  - every function.arguments is validated by ajv + ajv-formats (independent JSON Schema validators) against
//    the tool's parameters: integer and number bounds, a pattern, formats (date, uuid, ipv4), counts;
//  - arguments are the model's text: with logprobs, the bytes of the generated tokens contain each
//    arguments string verbatim, and a 29-digit integer (minimum 1e28) keeps every digit;
//  - streamed == non-streamed (same seed): the same calls, ids and finish_reason;
//  - response_format json_schema on the same schema: content ajv-valid;
//  - a schema keyword the compiler does not implement is a 400 naming it.
import { createRequire } from "module";
import path from "path";

import { Ajv, assert, assertEq, checkChatCompletion, collectChatStream, NODE_MODULES, OpenAIModule, run, startServer } from "./lib/harness.mjs";

const require = createRequire(path.join(path.resolve(NODE_MODULES), "x.js"));
const addFormats = require("ajv-formats").default;

const alarm = {
  type: "function",
  function: {
    name: "set_alarm",
    parameters: {
      type: "object",
      properties: {
        hour: { type: "integer", minimum: 0, maximum: 23 },
        minute: { type: "integer", minimum: 0, exclusiveMaximum: 60 },
        label: { type: "string", pattern: "^[a-z]{1,8}$" },
        day: { type: "string", format: "date" },
        volume: { type: "number", exclusiveMinimum: 0, maximum: 1 },
        tags: { type: "array", items: { enum: ["work", "home"] }, maxItems: 2 },
      },
      required: ["hour", "minute", "day"],
      additionalProperties: false,
    },
  },
};
const ledger = {
  type: "function",
  function: {
    name: "record",
    parameters: {
      type: "object",
      properties: {
        id: { type: "string", format: "uuid" },
        amount: { type: "integer", minimum: 1e28 },  // at least 29 digits: past every double's exact range
        host: { type: "string", format: "ipv4" },
        delta: { type: "number", minimum: -2.5, maximum: 2.5 },
      },
      required: ["id", "amount", "host"],
      additionalProperties: false,
    },
  },
};
const messages = [{ role: "system", content: "You are terse." }, { role: "user", content: "Set an alarm for seven." }];

// The generated text, from the logprobs' token bytes.
function generatedText(logprobs) {
  return Buffer.concat(logprobs.map((e) => Buffer.from(e.bytes))).toString("utf8");
}

await run("e2e_k2_tools", async (track) => {
  const server = track(await startServer());
  const client = server.client();
  const model = (await client.models.list()).data[0].id;
  const ajv = new Ajv({ strict: false });
  addFormats(ajv);
  const validators = { set_alarm: ajv.compile(alarm.function.parameters), record: ajv.compile(ledger.function.parameters) };
  const checkCalls = (calls, where, { first = 0, only = null } = {}) => {
    calls.forEach((c, k) => {
      assertEq(c.type, "function", `${where}: type`);
      if (only) assertEq(c.function.name, only, `${where}: the named tool`);
      assertEq(c.id, `functions.${c.function.name}:${first + k}`, `${where}: K2 id functions.NAME:IDX`);
      const validate = validators[c.function.name];
      assert(validate, `${where}: a declared tool, got ${c.function.name}`);
      const args = JSON.parse(c.function.arguments);
      assert(validate(args), `${where}: ${c.function.arguments} fails ${c.function.name}'s schema: ${ajv.errorsText(validate.errors)}`);
      if (c.function.name === "record") {
        const digits = /"amount":\s*(\d+)/.exec(c.function.arguments)?.[1];
        assert(digits && digits.length >= 29, `${where}: amount keeps its ${digits?.length} digits: ${c.function.arguments}`);
        assert(BigInt(digits) >= 10n ** 28n, `${where}: amount >= 1e28 as an exact integer`);
      }
    });
  };

  const base = { model, messages, tools: [alarm, ledger], max_tokens: 600, temperature: 1, logprobs: true };
  let sawParallel = false, sawBoth = new Set();
  for (const [seed, toolChoice, parallel] of [[1, "required", true], [2, "required", true], [3, "required", false],
    [4, "required", true], [5, { type: "function", function: { name: "record" } }, true],
    [6, { type: "function", function: { name: "set_alarm" } }, false]]) {
    const named = typeof toolChoice === "object" ? toolChoice.function.name : null;
    const where = `seed ${seed}, tool_choice ${named ?? toolChoice}, parallel ${parallel}`;
    const body = { ...base, seed, tool_choice: toolChoice, parallel_tool_calls: parallel };
    const r = await client.chat.completions.create(body);
    checkChatCompletion(r);
    const msg = r.choices[0].message;
    if (process.env.RILL_E2E_VERBOSE) console.log(where, r.usage.completion_tokens, JSON.stringify(msg.tool_calls));
    assertEq(r.choices[0].finish_reason, "tool_calls", `${where}: finish_reason`);
    const calls = msg.tool_calls ?? [];
    assert(calls.length >= 1, `${where}: at least one call`);
    if (!parallel || named) assertEq(calls.length, 1, `${where}: one call`);
    sawParallel ||= calls.length > 1;
    for (const c of calls) sawBoth.add(c.function.name);
    assert(!msg.content, `${where}: no content besides the calls: ${JSON.stringify(msg.content)}`);
    checkCalls(calls, where, { only: named });
    // Verbatim: each arguments string is a piece of what the model generated.
    const text = generatedText(r.choices[0].logprobs.content);
    for (const c of calls) assert(text.includes(c.function.arguments), `${where}: ${c.function.arguments} is in the generated text ${text}`);

    const st = await collectChatStream(await client.chat.completions.create({ ...body, stream: true }), 1, false);
    assertEq(st.choices[0].finish_reason, "tool_calls", `${where}: streamed finish_reason`);
    assertEq(st.choices[0].tool_calls.map((t) => [t.id, t.name, t.arguments]),
      calls.map((t) => [t.id, t.function.name, t.function.arguments]), `${where}: streamed tool calls == non-streamed`);
    assertEq(st.choices[0].content, "", `${where}: no streamed content`);
  }
  assert(sawParallel, "some parallel request made more than one call");
  assertEq([...sawBoth].sort(), ["record", "set_alarm"], "\"required\" calls either tool");

  // A forced call cut by max_tokens (issue 34): no protocol markup in content, streamed or not. A call cut inside
  // its id is dropped; one cut inside its arguments comes back incomplete (name + the arguments so far, as vLLM
  // streams it), finish_reason "length"; streamed == non-streamed.
  for (const maxTokens of [1, 2, 3, 4, 6, 10, 16]) {
    const body = { ...base, seed: 21, tool_choice: "required", max_tokens: maxTokens, logprobs: false };
    const where = `forced call cut at max_tokens ${maxTokens}`;
    const r = await client.chat.completions.create(body);
    const msg = r.choices[0].message;
    assert(!/<\||functions\./.test(msg.content ?? ""), `${where}: no markup in content: ${JSON.stringify(msg.content)}`);
    assertEq(r.choices[0].finish_reason, "length", `${where}: finish_reason`);
    for (const c of msg.tool_calls ?? []) assert(["set_alarm", "record"].includes(c.function.name), `${where}: a declared tool`);
    const st = await collectChatStream(await client.chat.completions.create({ ...body, stream: true }), 1, false);
    assert(!/<\||functions\./.test(st.choices[0].content), `${where}: no markup in streamed content: ${st.choices[0].content}`);
    assertEq(st.choices[0].tool_calls.map((t) => [t.id, t.name, t.arguments]),
      (msg.tool_calls ?? []).map((t) => [t.id, t.function.name, t.function.arguments]), `${where}: streamed == non-streamed`);
  }

  // A later turn: the calls continue the numbering of the conversation's earlier calls.
  const history = [...messages,
    { role: "assistant", content: "", tool_calls: [{ id: "functions.set_alarm:0", type: "function",
      function: { name: "set_alarm", arguments: '{"hour":7,"minute":0,"day":"2025-01-01"}' } }] },
    { role: "tool", tool_call_id: "functions.set_alarm:0", content: "ok" },
    { role: "user", content: "Record it." }];
  const later = await client.chat.completions.create({ ...base, messages: history, seed: 7, tool_choice: "required", parallel_tool_calls: false });
  assertEq(later.choices[0].finish_reason, "tool_calls", "later turn: finish_reason");
  checkCalls(later.choices[0].message.tool_calls, "later turn", { first: 1 });

  // response_format json_schema: the content is the JSON value.
  for (const seed of [1, 2]) {
    const body = { model, messages, max_tokens: 600, temperature: 1, seed,
      response_format: { type: "json_schema", json_schema: { name: "alarm", schema: alarm.function.parameters } } };
    const r = await client.chat.completions.create(body);
    assertEq(r.choices[0].finish_reason, "stop", `response_format seed ${seed}: ends after the value`);
    const content = r.choices[0].message.content;
    assert(validators.set_alarm(JSON.parse(content)), `response_format seed ${seed}: ${content}: ${ajv.errorsText(validators.set_alarm.errors)}`);
  }

  // Keywords the compiler does not implement are refused, not ignored.
  for (const [schema, needle] of [[{ type: "object", properties: { n: { type: "integer", not: { const: 3 } } } }, 'keyword "not"'],
    [{ type: "object", properties: { s: { type: "string", pattern: "(?=a)b" } } }, "lookahead"],
    [{ type: "object", properties: { d: { type: "string", format: "duration" } } }, '"duration"']]) {
    let error = null;
    try {
      await client.chat.completions.create({ model, messages, max_tokens: 8, tool_choice: "required",
        tools: [{ type: "function", function: { name: "f", parameters: schema } }] });
    } catch (e) { error = e; }
    assert(error instanceof OpenAIModule.BadRequestError, `unsupported schema ${JSON.stringify(schema)}: 400, got ${error}`);
    assert(error.message.includes(needle) && error.message.includes("tool f"), `the 400 names the keyword and tool: ${error.message}`);
  }
});
