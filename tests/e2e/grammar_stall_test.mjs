// Issue #14 item 6: one request's response_format schema must not stall other users' streams. While a
// stream decodes, measured by its inter-token gaps (the time between SSE chunks, through the official
// `openai` client):
//  - a response_format enum of 300k strings (a 6 MB body) is refused (413: the schema's size; it used to be
//    compiled, and its masks computed on the engine thread froze every stream for tens of seconds), and one
//    of 5000 short strings (under the size limit) with a 400 naming the schema path and the enum limit;
//  - the largest enum the limits allow (4096 strings) is served, its content one of the values (ajv);
//  - several such constrained requests at once are served too, their masks computed off the engine thread;
// and through all of it the stream's largest gap stays under 1 s (on today's CPU tiny model a gap is a
// few ms; the frozen stream's was 30 s). The server answers a normal request after.
import { Ajv, assert, assertEq, run, startServer } from "./lib/harness.mjs";
import { startRecordedStream } from "./lib/recorded_stream.mjs";

const MAX_GAP_MS = 1000;

function stringEnum(n, tag) {
  return Array.from({ length: n }, (_, i) => `${tag}-${i}-${(i * 2654435761 >>> 0).toString(36)}`);
}

run("e2e_grammar_stall", async (track) => {
  // The 6 MB body must reach the schema-size check: the default --max-request-bytes (4 MiB) would refuse it
  // in the HTTP layer first.
  const server = track(await startServer(["--max-request-bytes", String(16 << 20)]));
  const client = server.client();
  const model = (await client.models.list()).data[0].id;
  const messages = [{ role: "user", content: "Pick one." }];

  const hugeBody = JSON.stringify({ model, messages, max_tokens: 16,
    response_format: { type: "json_schema", json_schema: { name: "city", schema: { type: "object",
      properties: { city: { type: "string", enum: stringEnum(300000, "city") } }, required: ["city"] } } } });
  const bodyBytes = hugeBody.length;
  // Under the request's schema-size limit (128 KiB) but over the grammar's enum limit: the compiler refuses it.
  const overEnumBody = JSON.stringify({ model, messages, max_tokens: 16,
    response_format: { type: "json_schema", json_schema: { name: "city", schema: { type: "object",
      properties: { city: { type: "string", enum: stringEnum(5000, "city") } }, required: ["city"] } } } });
  assert(bodyBytes > 4e6, `the attack body is over 4 MB (${bodyBytes})`);

  // The victim: an endless stream whose chunk arrival times are recorded (in a worker thread) until stopped.
  const victim = startRecordedStream(server.url, { model, prompt: [1, 2, 3], max_tokens: 8000, ignore_eos: true });
  const { arrivals } = victim;
  const victimError = () => victim.error();
  const waitForChunks = async (n) => {
    const want = arrivals.length + n;
    while (arrivals.length < want) {
      assert(victim.done === null, `the stream ended early: ${victim.done}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  await waitForChunks(5);
  const attackStart = Date.now();

  // 1. 300k enum values (over 4 MB): refused by size; 5000 values (95 KB): refused by the compiler's enum limit.
  const t0 = Date.now();
  const refused = await server.fetchJson("/v1/chat/completions", hugeBody);
  const refusedMs = Date.now() - t0;
  const overEnum = await server.fetchJson("/v1/chat/completions", overEnumBody);

  // 2. The largest enum allowed, served (alone, then four at once), each content one of the values.
  const values = stringEnum(4096, "v");
  const schema = { type: "object", properties: { v: { type: "string", enum: values } }, required: ["v"],
    additionalProperties: false };
  const validate = new Ajv().compile(schema);
  const constrained = (seed) => client.chat.completions.create({ model, messages, max_tokens: 200, temperature: 1, seed,
    response_format: { type: "json_schema", json_schema: { name: "v", schema } } });
  const served = [await constrained(1), ...(await Promise.all([2, 3, 4, 5].map(constrained)))];
  for (const [i, r] of served.entries()) {
    const content = r.choices[0].message.content;
    assertEq(r.choices[0].finish_reason, "stop", `constrained request ${i}: ends after the value`);
    assert(validate(JSON.parse(content)), `constrained request ${i}: ${content} is one of the enum values`);
  }
  await waitForChunks(20);
  const attackEnd = Date.now();
  await victim.stop();

  const gaps = [];
  for (let i = 1; i < arrivals.length; ++i)
    if (arrivals[i] >= attackStart) gaps.push(arrivals[i] - arrivals[i - 1]);
  const maxGap = Math.max(...gaps);
  const sorted = [...gaps].sort((a, b) => a - b);
  console.log(`e2e_grammar_stall: 300k enum (${(bodyBytes / 1e6).toFixed(1)} MB) refused in ${refusedMs} ms; ` +
    `${gaps.length} stream gaps over ${attackEnd - attackStart} ms of attack: median ${sorted[sorted.length >> 1]} ms, ` +
    `max ${maxGap} ms; RSS ${await rssMiB(server)} MiB`);
  assert(victimError() === null, `the stream did not fail: ${victimError()}`);
  assert(gaps.length >= 20, `the stream kept going during the attack (${gaps.length} chunks)`);
  assert(maxGap < MAX_GAP_MS, `the stream's largest gap during the attack is under ${MAX_GAP_MS} ms (got ${maxGap} ms)`);
  // The 6 MB schema is refused by its size before the grammar compiler sees it (server/openai/request_limits.h).
  assertEq(refused.status, 413, `the 300k enum is refused: ${refused.text.slice(0, 300)}`);
  assertEq(refused.json?.error?.param, "response_format.json_schema.schema", "the 413 names the field");
  assertEq(overEnum.status, 400, `the 5000-value enum is refused: ${overEnum.text.slice(0, 300)}`);
  assertEq(overEnum.json?.error?.param, "response_format", "the 400 names the field");
  const msg = overEnum.json?.error?.message ?? "";
  assert(msg.includes("schema.properties.city.enum") && msg.includes("5000 values exceed the limit of 4096"),
    `the 400 names the schema path and the limit: ${msg}`);

  // Alive and answering afterwards.
  const after = await client.completions.create({ model, prompt: [1, 2, 3], max_tokens: 4, ignore_eos: true });
  assertEq(after.usage.completion_tokens, 4, "a normal request after the attack");
});

async function rssMiB(server) {
  const { readFile } = await import("fs/promises");
  const status = await readFile(`/proc/${server.proc.pid}/status`, "utf8");
  return Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)[1]) / 1024);
}
