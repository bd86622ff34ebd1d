// Output formats on /v1/completions and /v1/chat/completions (issue 34): OpenAI's response_format, vLLM's
// structured_outputs {json, regex, choice} and its older guided_json / guided_regex / guided_choice, on the tiny
// Kimi-Linear checkpoint (random weights, so every well-formed output comes from the grammar). What each check
// compares against:
//  - JSON outputs: JSON.parse and ajv (an independent JSON Schema validator) under the request's schema;
//  - regex outputs: JavaScript's own RegExp, anchored; choices: membership;
//  - numbers: a schema of unbounded numbers, sampled at temperature 1 over seeds from the commit's seed, always
//    gives JSON that parses (the grammar bounds digits and exponent; before, a random model ran on inside
//    "1.0000..." until max_tokens);
//  - two formats in one request, a grammar field, and a bad regex are 400s naming the field.
import { Ajv, assert, assertEq, makeRng, OpenAIModule, run, startServer } from "./lib/harness.mjs";

const schema = {
  type: "object",
  properties: { name: { type: "string", maxLength: 6 }, score: { type: "number" }, n: { type: "integer" },
    ok: { type: "boolean" } },
  required: ["name", "score", "n", "ok"],
};

await run("e2e_structured_outputs", async (track) => {
  const server = track(await startServer());
  const client = server.client();
  const model = (await client.models.list()).data[0].id;
  const ajv = new Ajv({ strict: false });
  const valid = ajv.compile(schema);
  const rng = makeRng("e2e_structured_outputs");
  const base = { model, prompt: "The record:", max_tokens: 200, temperature: 1 };

  const jsonForms = [
    ["response_format", { response_format: { type: "json_schema", json_schema: { name: "r", schema } } }],
    ["guided_json", { guided_json: schema }],
    ["guided_json as text", { guided_json: JSON.stringify(schema) }],
    ["structured_outputs.json", { structured_outputs: { json: schema } }],
  ];
  for (const [label, fields] of jsonForms) {
    for (let k = 0; k < 3; ++k) {
      const seed = rng.int(0, 1 << 30);
      const where = `completions ${label}, seed ${seed}`;
      const r = await client.completions.create({ ...base, ...fields, seed });
      const text = r.choices[0].text;
      let v;
      try { v = JSON.parse(text); } catch (e) { throw new Error(`${where}: not JSON: ${text}`); }
      assert(valid(v), `${where}: ${text}: ${ajv.errorsText(valid.errors)}`);
      assertEq(r.choices[0].finish_reason, "stop", `${where}: the grammar ends the output`);
    }
  }
  // The same fields on chat completions (no reasoning channel on the tiny model).
  for (const [label, fields] of jsonForms.slice(1)) {
    const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 200,
      temperature: 1, seed: rng.int(0, 1 << 30), ...fields });
    const text = r.choices[0].message.content;
    assert(valid(JSON.parse(text)), `chat ${label}: ${text}: ${ajv.errorsText(valid.errors)}`);
  }
  // json_object on completions: any JSON object (its strings are unbounded, so a random model may still be
  // inside one at max_tokens: only a finished output must parse).
  {
    const r = await client.completions.create({ ...base, response_format: { type: "json_object" }, seed: 3 });
    const text = r.choices[0].text;
    if (r.choices[0].finish_reason === "stop") {
      const v = JSON.parse(text);
      assert(v !== null && typeof v === "object" && !Array.isArray(v), `json_object: ${text}`);
    } else {
      assertEq(r.choices[0].finish_reason, "length", "json_object: stop or length");
      assert(text.startsWith("{"), `json_object: an object begins: ${text}`);
    }
  }

  // Unbounded numbers always parse (a random model writes digits on: the literal bounds end them).
  const numbers = ajv.compile({ type: "array", items: { type: "number" }, minItems: 3, maxItems: 3 });
  for (let k = 0; k < 8; ++k) {
    const seed = rng.int(0, 1 << 30);
    const r = await client.completions.create({ ...base, max_tokens: 400, seed,
      guided_json: { type: "array", items: { type: "number" }, minItems: 3, maxItems: 3 } });
    const text = r.choices[0].text;
    let v;
    try { v = JSON.parse(text); } catch (e) { throw new Error(`numbers, seed ${seed}: not JSON: ${text}`); }
    assert(numbers(v) && v.every((x) => typeof x === "number"), `numbers, seed ${seed}: ${text}`);
    assertEq(r.choices[0].finish_reason, "stop", `numbers, seed ${seed}: ended by the grammar: ${text}`);
  }

  // Regexes and choices, streamed and not.
  for (const [label, fields, check] of [
    ["guided_regex", { guided_regex: "[a-c]{2,5}-[0-9]{3}" }, (t) => /^[a-c]{2,5}-[0-9]{3}$/.test(t)],
    ["structured_outputs.regex", { structured_outputs: { regex: "(yes|no), [0-9]+" } }, (t) => /^(yes|no), [0-9]+$/.test(t)],
    ["guided_choice", { guided_choice: ["red", "green", "blue"] }, (t) => ["red", "green", "blue"].includes(t)],
    ["structured_outputs.choice", { structured_outputs: { choice: ["left", "right"] } }, (t) => ["left", "right"].includes(t)],
  ]) {
    const seed = rng.int(0, 1 << 30);
    const r = await client.completions.create({ ...base, max_tokens: 40, seed, ...fields });
    assert(check(r.choices[0].text), `${label}, seed ${seed}: ${JSON.stringify(r.choices[0].text)}`);
    let streamed = "";
    for await (const c of await client.completions.create({ ...base, max_tokens: 40, seed, ...fields, stream: true }))
      streamed += c.choices[0]?.text ?? "";
    assertEq(streamed, r.choices[0].text, `${label}: streamed == non-streamed`);
  }

  // Refusals name the field.
  for (const [fields, param, needle] of [
    [{ guided_json: schema, guided_regex: "a+" }, "guided_regex", "give one output format"],
    [{ structured_outputs: { grammar: "root ::= \"a\"" } }, "structured_outputs.grammar", "not supported"],
    [{ guided_regex: "(?=a)b" }, "guided_regex", "lookahead"],
    [{ guided_choice: [] }, "guided_choice", "non-empty array"],
    [{ response_format: { type: "json_schema", json_schema: { name: "r", schema: { type: "object", not: {} } } } },
      "response_format", 'keyword "not"'],
  ]) {
    let error = null;
    try { await client.completions.create({ ...base, ...fields }); } catch (e) { error = e; }
    assert(error instanceof OpenAIModule.BadRequestError, `${JSON.stringify(fields)}: 400, got ${error}`);
    assertEq(error.param, param, `${JSON.stringify(fields)}: param`);
    assert(error.message.includes(needle), `${JSON.stringify(fields)}: ${error.message}`);
  }
});
