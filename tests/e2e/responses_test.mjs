// POST /v1/responses through the official `openai` client's `responses.create` and `responses.stream`, on
// the tiny K2-family model. What each check compares against:
//  - text: the same greedy request as a chat completion (the Responses input rendered as chat messages) gives
//    the same text and token counts; the SDK's own `output_text` and its stream accumulation
//    (finalResponse) give the same text as the deltas this test concatenates;
//  - the event stream: sequence numbers 0, 1, 2, ...; response.created first, response.completed or
//    response.incomplete last; per item added -> part added -> deltas -> done events -> item done, each
//    done event repeating what its deltas added up to;
//  - function calls (tool_choice required / named: grammar-forced, the random model calls no tool by itself):
//    call_id, name and arguments equal the chat completion's tool_calls for the same request, arguments are
//    valid for the tool's schema (ajv), streamed == non-streamed; a second turn with function_call and
//    function_call_output items equals the chat request with the assistant tool_calls and a tool message;
//  - max_output_tokens reached: status "incomplete", incomplete_details.reason "max_output_tokens";
//  - Kimi K3 (the tiny K3 checkpoint): thinking is a reasoning item equal to chat's reasoning_content, and
//    reasoning.effort "none" with a forced call gives chat's tool_calls;
//  - what rill cannot do is a 400 naming the field (previous_response_id, a non-function tool, an image).
import path from "path";

import { Ajv, assert, assertEq, MODEL_DIR, OpenAIModule, run, startServer } from "./lib/harness.mjs";

const ID = /^resp_[0-9a-f]{24}$/;
const weather = {
  type: "function", name: "get_weather", description: "Weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
    required: ["city"], additionalProperties: false },
};
const asChatTool = (t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters } });

// The events of one raw stream (`responses.create({stream: true})`: responses.stream's helper accumulates
// into the event objects it hands out), checked for order; returns the events and per-item texts/arguments.
async function collect(stream) {
  const events = [];
  for await (const e of stream) events.push(e);
  events.forEach((e, i) => assertEq(e.sequence_number, i, "sequence_number counts from 0"));
  assertEq(events[0].type, "response.created", "first event");
  assertEq(events[1].type, "response.in_progress", "second event");
  const last = events[events.length - 1];
  assert(["response.completed", "response.incomplete"].includes(last.type), "last event: " + last.type);
  const items = [];
  for (const e of events.slice(2, -1)) {
    if (e.type === "response.output_item.added") {
      assertEq(e.output_index, items.length, "items are added in order");
      items.push({ item: e.item, text: "", done: false, partDone: false });
      continue;
    }
    const it = items[e.output_index];
    assert(it && !it.done, `${e.type} for a live item`);
    switch (e.type) {
      case "response.content_part.added": assertEq(e.part.text, "", "parts start empty"); break;
      case "response.output_text.delta": case "response.reasoning_text.delta":
      case "response.function_call_arguments.delta":
        assert(!it.partDone, "no delta after done"); it.text += e.delta; break;
      case "response.output_text.done": case "response.reasoning_text.done":
        assertEq(e.text, it.text, "text done == its deltas"); it.partDone = true; break;
      case "response.function_call_arguments.done":
        assertEq(e.arguments, it.text, "arguments done == their deltas"); it.partDone = true; break;
      case "response.content_part.done": assertEq(e.part.text, it.text, "part done == its deltas"); break;
      case "response.output_item.done":
        assert(it.partDone, "the item's content was done first");
        assertEq(e.item.status, "completed", "item done status");
        it.done = true; it.item = e.item; break;
      default: throw new Error("unexpected event " + e.type);
    }
  }
  for (const it of items) assert(it.done, "every item was done");
  assertEq(last.response.output, items.map((it) => it.item), "the final response's output == the items done");
  return { events, items, response: last.response };
}

function checkResponse(r, what) {
  assert(ID.test(r.id), `${what}: id ${r.id}`);
  assertEq(r.object, "response", `${what}: object`);
  assert(Number.isInteger(r.created_at), `${what}: created_at`);
  assert(["completed", "incomplete"].includes(r.status), `${what}: status ${r.status}`);
  assertEq(r.store, false, `${what}: nothing stored`);
  const u = r.usage;
  assertEq(u.total_tokens, u.input_tokens + u.output_tokens, `${what}: total_tokens`);
  assert(Number.isInteger(u.input_tokens_details.cached_tokens) && Number.isInteger(u.output_tokens_details.reasoning_tokens),
    `${what}: usage details`);
  if (r.status === "incomplete") assertEq(r.incomplete_details, { reason: "max_output_tokens" }, `${what}: incomplete_details`);
}

await run("e2e_responses", async (track) => {
  const server = track(await startServer());
  const client = server.client();
  const ajv = new Ajv({ strict: false });
  const validate = ajv.compile(weather.parameters);

  // Text: responses.create vs the same chat completion.
  const instructions = "You are terse.", input = "Tell me about the license.";
  const r = await client.responses.create({ model: "rill-tiny", instructions, input, max_output_tokens: 20, temperature: 0, store: false });
  checkResponse(r, "create");
  const chat = await client.chat.completions.create({ model: "rill-tiny", max_tokens: 20, temperature: 0,
    messages: [{ role: "system", content: instructions }, { role: "user", content: input }] });
  assertEq(r.output.length, 1, "one output item");
  assertEq(r.output[0].type, "message", "a message item");
  assertEq(r.output[0].role, "assistant", "role");
  assertEq(r.output[0].content[0].type, "output_text", "output_text part");
  assertEq(r.output[0].content[0].text, chat.choices[0].message.content, "text == the chat completion's (greedy)");
  assertEq(r.output_text, chat.choices[0].message.content, "the SDK's output_text");
  assertEq([r.usage.input_tokens, r.usage.output_tokens], [chat.usage.prompt_tokens, chat.usage.completion_tokens], "usage == chat usage");
  assertEq(r.status, chat.choices[0].finish_reason === "length" ? "incomplete" : "completed", "status follows the finish reason");
  assertEq([r.instructions, r.max_output_tokens, r.temperature], [instructions, 20, 0], "request fields echoed");

  // Message items with parts, and the incomplete case.
  const one = await client.responses.create({ input: [{ role: "user", content: [{ type: "input_text", text: input }] }],
    max_output_tokens: 1, ignore_eos: true });
  checkResponse(one, "max_output_tokens 1");
  assertEq([one.status, one.usage.output_tokens], ["incomplete", 1], "one token, incomplete");

  // Text, streamed: same as non-streamed; the SDK's accumulation agrees.
  const textBody = { model: "rill-tiny", instructions, input, max_output_tokens: 20, temperature: 0 };
  const got = await collect(await client.responses.create({ ...textBody, stream: true }));
  checkResponse(got.response, "stream");
  assertEq(got.items.map((it) => it.text), [r.output[0].content[0].text], "streamed text == non-streamed");
  const helper = client.responses.stream(textBody);
  let snapshot = "";
  helper.on("response.output_text.delta", (e) => (snapshot = e.snapshot));
  const final = await helper.finalResponse();
  // (finalResponse adds no output_text without parseable tools/format: the SDK's own behaviour.)
  assertEq(final.output[0].content[0].text, r.output_text, "responses.stream: the SDK's finalResponse text");
  assertEq(snapshot, r.output_text, "responses.stream: the SDK's last delta snapshot");
  assertEq(got.response.usage.output_tokens, r.usage.output_tokens, "streamed usage");
  // OpenAI's framing: `event: TYPE` + `data: JSON`, no [DONE].
  const raw = await fetch(server.url + "/v1/responses", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ input, max_output_tokens: 3, stream: true }) }).then((x) => x.text());
  const frames = raw.split("\n\n").filter((f) => f);
  for (const f of frames) {
    const [ev, data] = f.split("\n");
    assertEq(ev.slice(0, 7), "event: ", "event line");
    assertEq(JSON.parse(data.slice(6)).type, ev.slice(7), "event name == data.type");
  }
  assert(!raw.includes("[DONE]"), "no [DONE] on the Responses stream");

  // Function calls, forced: required and named; streamed == non-streamed == chat.
  for (const tool_choice of ["required", { type: "function", name: "get_weather" }]) {
    const what = `tool_choice ${JSON.stringify(tool_choice)}`;
    const body = { input: "Weather in Paris?", tools: [weather], tool_choice, temperature: 0, max_output_tokens: 60, parallel_tool_calls: false };
    const fr = await client.responses.create(body);
    checkResponse(fr, what);
    const calls = fr.output.filter((o) => o.type === "function_call");
    assert(calls.length >= 1, `${what}: a function_call item: ${JSON.stringify(fr.output)}`);
    const cc = await client.chat.completions.create({ messages: [{ role: "user", content: body.input }], tools: [asChatTool(weather)],
      tool_choice: tool_choice === "required" ? "required" : { type: "function", function: { name: "get_weather" } },
      temperature: 0, max_tokens: 60, parallel_tool_calls: false });
    assertEq(calls.map((c) => [c.call_id, c.name, c.arguments]),
      cc.choices[0].message.tool_calls.map((t) => [t.id, t.function.name, t.function.arguments]), `${what}: == the chat completion's tool_calls`);
    for (const c of calls) {
      assert(/^fc_[0-9a-f]{24}$/.test(c.id), `${what}: item id ${c.id}`);
      assert(validate(JSON.parse(c.arguments)), `${what}: arguments valid for the schema: ${c.arguments}`);
    }
    const st = await collect(await client.responses.create({ ...body, stream: true }));
    const helper = client.responses.stream(body);
    let args = "";
    helper.on("response.function_call_arguments.delta", (e) => (args = e.snapshot));
    const helperFinal = await helper.finalResponse();
    assertEq(helperFinal.output.filter((o) => o.type === "function_call").map((o) => o.arguments), calls.map((c) => c.arguments),
      `${what}: responses.stream accumulates the same calls`);
    assertEq(args, calls[calls.length - 1].arguments, `${what}: responses.stream's arguments snapshot`);
    assertEq(st.response.output.map((o) => [o.type, o.call_id, o.name, o.arguments]), fr.output.map((o) => [o.type, o.call_id, o.name, o.arguments]),
      `${what}: streamed output == non-streamed`);
    assert(st.events.some((e) => e.type === "response.function_call_arguments.delta"), `${what}: argument deltas streamed`);

    // The second turn: the call and its output as input items == the chat request with a tool message.
    if (typeof tool_choice === "string") {
      const turn = await client.responses.create({ temperature: 0, max_output_tokens: 12, tools: [weather], input: [
        { role: "user", content: body.input },
        ...calls.map((c) => ({ type: "function_call", call_id: c.call_id, name: c.name, arguments: c.arguments })),
        ...calls.map((c) => ({ type: "function_call_output", call_id: c.call_id, output: "sunny" })),
      ] });
      checkResponse(turn, "second turn");
      const chat2 = await client.chat.completions.create({ temperature: 0, max_tokens: 12, tools: [asChatTool(weather)], messages: [
        { role: "user", content: body.input },
        { role: "assistant", content: null, tool_calls: cc.choices[0].message.tool_calls },
        ...calls.map((c) => ({ role: "tool", tool_call_id: c.call_id, content: "sunny" })),
      ] });
      assertEq(turn.usage.input_tokens, chat2.usage.prompt_tokens, "second turn: the same prompt as chat");
      assertEq(turn.output_text, chat2.choices[0].message.content ?? "", "second turn: the same text as chat");
    }
  }

  // What rill refuses, each a 400 naming the field.
  const refused = [
    [{ input, previous_response_id: "resp_123" }, "previous_response_id"],
    [{ input, tools: [{ type: "web_search" }] }, "tools[0].type"],
    [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png" }] }] }, "input[0].content[0].type"],
    [{ input, max_output_tokens: 0 }, "max_output_tokens"],
  ];
  for (const [body, param] of refused) {
    let err = null;
    try { await client.responses.create(body); } catch (e) { err = e; }
    assert(err instanceof OpenAIModule.BadRequestError, `${param}: a 400, got ${err}`);
    assertEq(err.param, param, `${param}: the error names the field (${err.message})`);
  }
  // Kimi K3 (its tiny checkpoint beside MODEL_DIR): thinking is a reasoning item, reasoning.effort "none"
  // turns it off as reasoning_effort does on chat, and the forced call equals chat's.
  const k3 = track(await startServer([], { model: path.join(path.dirname(MODEL_DIR), "rill-tiny-k3") }));
  const kc = k3.client();
  const k3Tool = { type: "function", name: "w", parameters: { type: "object", properties: { c: { type: "string" } } } };
  const thought = await kc.responses.create({ input, max_output_tokens: 40, temperature: 0 });
  const thoughtChat = await kc.chat.completions.create({ messages: [{ role: "user", content: input }], max_tokens: 40, temperature: 0 });
  checkResponse(thought, "K3");
  assertEq(thought.output[0].type, "reasoning", "K3: thinking first");
  assertEq(thought.output[0].content[0].text, thoughtChat.choices[0].message.reasoning_content, "K3: reasoning == chat's reasoning_content");
  assertEq(thought.output_text, thoughtChat.choices[0].message.content ?? "", "K3: text == chat's content");
  assertEq(thought.usage.output_tokens_details.reasoning_tokens, thoughtChat.usage.completion_tokens_details.reasoning_tokens, "K3: reasoning tokens");
  const k3Events = await collect(await kc.responses.create({ input, max_output_tokens: 40, temperature: 0, stream: true }));
  assertEq(k3Events.response.output.map((o) => o.content[0].text), thought.output.map((o) => o.content[0].text), "K3: streamed == non-streamed");
  const k3Call = await kc.responses.create({ input: "weather?", tools: [k3Tool], tool_choice: "required", reasoning: { effort: "none" },
    max_output_tokens: 200, temperature: 0 });
  const k3ChatCall = await kc.chat.completions.create({ messages: [{ role: "user", content: "weather?" }], tools: [asChatTool(k3Tool)],
    tool_choice: "required", reasoning_effort: "none", max_tokens: 200, temperature: 0 });
  assertEq(k3Call.output.map((o) => [o.type, o.call_id, o.name, o.arguments]),
    k3ChatCall.choices[0].message.tool_calls.map((t) => ["function_call", t.id, t.function.name, t.function.arguments]),
    "K3: reasoning.effort none + required: the chat completion's calls");

  let missing = null;
  try { await client.responses.create({ model: "nope", input }); } catch (e) { missing = e; }
  assert(missing instanceof OpenAIModule.NotFoundError, "an unknown model is a 404");
});
