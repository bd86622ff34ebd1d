// Graceful shutdown: SIGTERM during load. Requests already running (streamed and not) all complete with the
// same output as before the signal (compared with reference runs), new requests get 503 (or find the port
// closed), and the process exits 0. With a short --shutdown-timeout, what cannot finish in time ends with
// finish_reason "server_interrupted" (streams) or 503 (whole responses), still exiting 0.
import { assert, assertEq, run, sleep, startServer } from "./lib/harness.mjs";
import { sameResult, streamRequest } from "./lib/traffic.mjs";

const prompts = [[1, 2, 3, 4, 5], [100, 200, 300], [7, 7, 7, 7, 7, 7, 7, 7], [512, 4, 99, 1000, 3, 3]];

async function whole(client, req) {
  const r = await client.completions.create({ ...req.body, logprobs: 0 });
  const c = r.choices[0];
  return { text: c.text, tokens: c.logprobs.tokens, finish_reason: c.finish_reason, usage: r.usage };
}

await run("e2e_shutdown", async (track) => {
  const server = track(await startServer(["--shutdown-timeout", "60"]));
  const client = server.client();
  const reqs = prompts.map((p) => ({ kind: "completion", body: { prompt: p, max_tokens: 96, temperature: 0 } }));
  const refs = [];
  for (const r of reqs) refs.push(await streamRequest(client, r));

  const inflight = [];
  for (let i = 0; i < 24; ++i) {
    const k = i % reqs.length;
    inflight.push(i % 3 === 2 ? whole(client, reqs[k]).then((r) => [k, r]) : streamRequest(client, reqs[k]).then((r) => [k, r]));
  }
  const finished = (m) => Object.entries(m).filter(([k]) => k.startsWith("rill:request_success_total")).reduce((a, [, v]) => a + v, 0);
  for (let t = 0; ; t += 20) {  // every request admitted (the references finished before)
    const m = await server.metrics();
    if (m["rill:num_requests_running"] + m["rill:num_requests_waiting"] + finished(m) - refs.length >= inflight.length) break;
    assert(t < 20000, "all requests reach the engine: " + JSON.stringify(m));
    await sleep(20);
  }
  server.proc.kill("SIGTERM");
  await sleep(100);
  const late = await server.fetchJson("/v1/completions", { prompt: [1, 2], max_tokens: 2 }).catch(() => null);
  if (late) {
    assertEq(late.status, 503, "a request after SIGTERM gets 503");
    assertEq(late.json.error.type, "unavailable_error", "503 envelope");
  }
  for (const [k, r] of await Promise.all(inflight)) sameResult(r, refs[k], `in-flight request on prompt ${k}`);
  const exit = await server.exit;
  assertEq(exit.code, 0, "exit code 0 after draining");

  // Grace shorter than the work: the rest is interrupted, the process still exits 0 promptly.
  const quick = track(await startServer(["--shutdown-timeout", "0.5", "--max-model-len", "4096"]));
  const qc = quick.client();
  const longReq = { kind: "completion", body: { prompt: [1, 2, 3], max_tokens: 3000, temperature: 0, ignore_eos: true } };
  const streams = Array.from({ length: 4 }, async () => {
    let finish = null;
    const s = await qc.completions.create({ ...longReq.body, stream: true });
    for await (const ch of s) if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
    return finish;
  });
  const wholeOne = qc.completions.create(longReq.body).then(() => 200, (e) => e.status);
  await sleep(500);
  const t0 = Date.now();
  quick.proc.kill("SIGTERM");
  for (const f of await Promise.all(streams)) assertEq(f, "server_interrupted", "an interrupted stream says so");
  assertEq(await wholeOne, 503, "an interrupted whole response is a 503");
  assertEq((await quick.exit).code, 0, "exit code 0 after cancelling");
  assert(Date.now() - t0 < 15000, "the short grace is honoured");
});
