// The HTTP layer under attack (issue 14 items 3, 4, 5, 7, 9) on a live `rill serve`: slowloris (300
// connections trickling their heads), a 200 MB request line without a newline, bodies over the limit in
// every transfer coding, a gzip body, pipelining, HTTP/1.0, conflicting or bad lengths, an unknown transfer
// coding, half-closed requests, a whole response whose client left, a stream still queued in the engine whose
// client left; then SIGTERM under a trickling load.
// After each attack the server answers /health and a chat request through the openai client; memory
// (VmRSS / VmHWM) is reported where the attack is about memory.
import zlib from "zlib";

import { assert, assertEq, run, sleep, startServer } from "./lib/harness.mjs";
import { memoryMiB, rawConnect, rawExchange, statuses } from "./lib/raw_http.mjs";

const LIMIT = 1 << 20;  // --max-request-bytes
const user = [{ role: "user", content: "hello there" }];

async function healthy(server, what) {
  const t0 = Date.now();
  const h = await fetch(server.url + "/health", { signal: AbortSignal.timeout(5000) });
  assertEq(h.status, 200, `${what}: /health answers`);
  const chat = await server.client({ timeout: 20000 }).chat.completions.create({ messages: user, max_tokens: 4 });
  assertEq(chat.choices.length, 1, `${what}: a chat request completes`);
  return Date.now() - t0;
}

// `n` connections that send a head one header line every `everyMs`, never finishing it.
async function trickle(port, n, everyMs) {
  const conns = await Promise.all(Array.from({ length: n }, () => rawConnect(port)));
  for (const c of conns) c.sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n");
  const timer = setInterval(() => {
    for (const c of conns) if (c.closedAt === null) c.sock.write("X-Slow: 1\r\n");
  }, everyMs);
  return { conns, stop: () => { clearInterval(timer); for (const c of conns) c.sock.destroy(); } };
}

const post = (path, body, extra = "") =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

await run("e2e_http_hardening", async (track) => {
  const server = track(await startServer(["--max-request-bytes", String(LIMIT), "--header-timeout", "3"]));
  const pid = server.proc.pid;
  await healthy(server, "at start");
  const mem0 = memoryMiB(pid);

  // 1. Slowloris: 300 trickling connections hold no thread; each is cut at the 3 s head deadline.
  const t0 = Date.now();
  const loris = await trickle(server.port, 300, 250);
  await sleep(500);
  const during = await healthy(server, "during slowloris");
  const stream = await server.client().chat.completions.create({ messages: user, max_tokens: 8, stream: true });
  let frames = 0;
  for await (const ch of stream) frames += ch.choices.length;
  assert(frames > 0, "a streamed chat completes during slowloris");
  await Promise.all(loris.conns.map((c) => c.closed));
  const cut = Date.now() - t0;
  loris.stop();
  assert(cut < 3000 + 3000, `the trickling connections are closed at the head deadline (all closed after ${cut} ms)`);
  console.log(`slowloris: /health + chat answered in ${during} ms during 300 trickling connections; all cut after ${cut} ms`);

  // 2. A 200 MB request line without a newline: answered 431 after the head limit, never buffered.
  const line = await rawConnect(server.port);
  line.sock.write("GET /");
  const piece = Buffer.alloc(1 << 20, "a");
  let sent = 0;
  while (sent < 200 * piece.length && line.closedAt === null) {
    if (!line.sock.write(piece)) await Promise.race([new Promise((r) => line.sock.once("drain", r)), line.closed]);
    sent += piece.length;
  }
  await line.closed;
  assertEq(statuses(line.data())[0], 431, "an endless request line gets 431");
  const mem1 = memoryMiB(pid);
  assert(mem1.hwm - mem0.hwm < 64, `VmHWM stays bounded (${mem0.hwm.toFixed(0)} -> ${mem1.hwm.toFixed(0)} MiB)`);
  console.log(`200 MB line: ${(sent / 2 ** 20).toFixed(0)} MiB sent before the close; VmRSS ${mem0.rss.toFixed(0)} -> ${mem1.rss.toFixed(0)} MiB, VmHWM ${mem0.hwm.toFixed(0)} -> ${mem1.hwm.toFixed(0)} MiB`);

  // 3. Bodies over the limit in every coding: chunked (decoded size), Content-Length (at once, no body
  // read), and none (a request without a length has no body: the bytes are the next "request", 431).
  const chunked = await rawConnect(server.port);
  chunked.sock.write("POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  const chunk = Buffer.alloc(65536, "x");
  for (let i = 0; i < 2 * LIMIT / chunk.length && chunked.closedAt === null; ++i)
    chunked.sock.write(Buffer.concat([Buffer.from(chunk.length.toString(16) + "\r\n"), chunk, Buffer.from("\r\n")]));
  const overChunked = await chunked.waitFor(/^HTTP\/1\.1 \d{3}/);
  assert(overChunked?.startsWith("HTTP/1.1 413"), "a chunked body over the limit gets 413: " + overChunked?.slice(0, 80));
  assert(overChunked.includes('"code":413'), "with the envelope");
  chunked.sock.destroy();
  const overLength = await rawExchange(server.port, `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: ${LIMIT + 1}\r\n\r\n`);
  assertEq(overLength.status, 413, "Content-Length over the limit gets 413 before the body");
  assert(overLength.elapsed < 1000, `at once (${overLength.elapsed} ms)`);
  overLength.c.sock.destroy();
  const lengthless = await rawConnect(server.port);
  lengthless.sock.write("POST /tokenize HTTP/1.1\r\nHost: x\r\n\r\n" + "z".repeat(2 * LIMIT));
  await lengthless.closed;
  assertEq(statuses(lengthless.data()), [400, 431], "no length: an empty body (400), then the rest is not a request (431)");

  // 4. A compressed body is refused (rill does not decompress): 415 with the envelope.
  const gz = zlib.gzipSync(JSON.stringify({ prompt: "x".repeat(1 << 20) }));
  const gzipped = await rawExchange(server.port, Buffer.concat([Buffer.from(
    `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: ${gz.length}\r\n\r\n`), gz]));
  assertEq(gzipped.status, 415, "a gzip body gets 415");
  assert(gzipped.text.includes('"code":415'), "with the envelope: " + gzipped.text.slice(0, 300));
  gzipped.c.sock.destroy();

  // 5. Framing refused from the head, at once (no waiting for a timeout).
  for (const [head, status, what] of [
    ["Content-Length: 2\r\nContent-Length: 2\r\n", 400, "duplicate Content-Length"],
    ["Content-Length: 2\r\nContent-Length: 3\r\n", 400, "conflicting Content-Length"],
    ["Content-Length: 2x\r\n", 400, "bad Content-Length"],
    ["Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", 400, "Content-Length with Transfer-Encoding"],
    ["Transfer-Encoding: gzip, chunked\r\n", 501, "Transfer-Encoding gzip, chunked"],
  ]) {
    const r = await rawExchange(server.port, `POST /tokenize HTTP/1.1\r\nHost: x\r\n${head}\r\n`);
    assertEq(r.status, status, what);
    assert(r.elapsed < 1000, `${what}: answered at once (${r.elapsed} ms)`);
    r.c.sock.destroy();
  }

  // 6. Pipelining: three requests in one write, three answers in order.
  const piped = await rawConnect(server.port);
  piped.sock.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" +
    post("/tokenize", JSON.stringify({ prompt: "hi" }), "Connection: close\r\n"));
  await piped.closed;
  const pipedText = piped.data();
  assertEq(statuses(pipedText), [200, 200, 200], "pipelined requests all answered");
  const order = ['{"status":"ok"}', '"object":"list"', '"tokens":'].map((s) => pipedText.indexOf(s));
  assert(order[0] >= 0 && order[0] < order[1] && order[1] < order[2], "in order: " + order);

  // 7. HTTP/1.0: a stream is close-delimited, never chunked.
  const h10 = await rawConnect(server.port);
  const streamBody = JSON.stringify({ messages: user, max_tokens: 4, stream: true });
  h10.sock.write(`POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${streamBody.length}\r\n\r\n${streamBody}`);
  await h10.closed;
  const t10 = h10.data();
  assert(t10.startsWith("HTTP/1.0 200"), "HTTP/1.0 answered as 1.0: " + t10.slice(0, 40));
  assert(!/transfer-encoding/i.test(t10), "no chunked encoding to an HTTP/1.0 client");
  assert(t10.includes("data: [DONE]"), "the whole stream arrives before the close");

  // 8. Half-closed requests are answered; a whole generation half-closed is cancelled with 499 (README).
  for (const [req, status, what] of [
    ["GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 200, "/health"],
    [post("/tokenize", JSON.stringify({ prompt: "hello" })), 200, "/tokenize"],
    ["GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 200, "/v1/models"],
    // long enough that the FIN is seen before it could finish
    [post("/v1/chat/completions", JSON.stringify({ messages: user, max_tokens: 4000, ignore_eos: true })), 499, "whole chat"],
  ]) {
    const c = await rawConnect(server.port);
    c.sock.end(req);  // request, then FIN
    await c.closed;
    assertEq(statuses(c.data()), [status], `half-closed ${what}`);
  }

  // 9. A whole response whose client disconnects is cancelled (not run to max_tokens).
  const gone = await rawConnect(server.port);
  gone.sock.write(post("/v1/completions", JSON.stringify({ prompt: [1, 2, 3], max_tokens: 6000, ignore_eos: true })));
  for (let t = 0; (await server.metrics())["rill:num_requests_running"] < 1; t += 20) {
    assert(t < 10000, "the long request starts");
    await sleep(20);
  }
  gone.sock.destroy();
  const tGone = Date.now();
  while ((await server.metrics())["rill:num_requests_running"] > 0) {
    assert(Date.now() - tGone < 3000, "a disconnected whole request is cancelled within 3 s");
    await sleep(20);
  }
  // 9b. A stream still queued in the engine whose client leaves is aborted there (vLLM's behaviour), not kept
  // until its turn: one running request holds the only slot, and the queued stream's client has read what it
  // was sent, so its close is a FIN (no write to it fails while it waits).
  {
    const one = track(await startServer(["--max-batch-size", "1"]));
    const long = await rawConnect(one.port);
    long.sock.write(post("/v1/completions", JSON.stringify({ prompt: [1, 2, 3], max_tokens: 6000, ignore_eos: true, stream: true })));
    for (let t = 0; (await one.metrics())["rill:num_requests_running"] < 1; t += 20) {
      assert(t < 10000, "the long stream starts");
      await sleep(20);
    }
    const abortsBefore = (await one.metrics())['rill:request_success_total{finished_reason="abort"}'] ?? 0;
    const queued = await rawConnect(one.port);
    queued.sock.write(post("/v1/chat/completions", JSON.stringify({ messages: user, max_tokens: 8, stream: true })));
    assert(await queued.waitFor(/"role":"assistant"/, 10000), "the queued stream's head and first chunk arrive");
    assertEq((await one.metrics())["rill:num_requests_waiting"], 1, "the stream waits behind the long one");
    await sleep(100);  // everything it was sent is read: its close is a FIN
    queued.sock.destroy();
    const tGone = Date.now();
    for (;;) {
      const m = await one.metrics();
      if (m["rill:num_requests_waiting"] === 0) {
        assertEq(m["rill:num_requests_running"], 1, "the long stream still runs: the queued one was removed, not served");
        assertEq(m['rill:request_success_total{finished_reason="abort"}'], abortsBefore + 1, "counted as an abort");
        break;
      }
      assert(Date.now() - tGone < 2000, "a queued stream whose client left is aborted within 2 s");
      await sleep(20);
    }
    console.log(`queued stream whose client left: aborted in ${Date.now() - tGone} ms`);
    long.sock.destroy();
    await healthy(one, "after the queued stream's abort");
    await one.stop();
  }

  await healthy(server, "after the attacks");
  const mem2 = memoryMiB(pid);
  console.log(`memory at the end: VmRSS ${mem2.rss.toFixed(0)} MiB, VmHWM ${mem2.hwm.toFixed(0)} MiB (start: ${mem0.rss.toFixed(0)} / ${mem0.hwm.toFixed(0)})`);

  // 10. SIGTERM while 200 clients trickle heads and a stream runs: exit 0 within --shutdown-timeout + 2 s.
  const quick = track(await startServer(["--shutdown-timeout", "2", "--max-model-len", "8192"]));
  const held = await trickle(quick.port, 200, 200);
  const longStream = quick.client().completions.create({ prompt: [1, 2], max_tokens: 8000, ignore_eos: true, stream: true })
    .then(async (s) => { let f = null; for await (const ch of s) f = ch.choices[0]?.finish_reason ?? f; return f; });
  await sleep(500);
  const tTerm = Date.now();
  quick.proc.kill("SIGTERM");
  const exit = await quick.exit;
  const took = Date.now() - tTerm;
  held.stop();
  assertEq(exit.code, 0, "exit 0 after SIGTERM under trickling load");
  assert(took < 4000, `SIGTERM under trickling load exits within the timeout + 2 s (${took} ms)`);
  assertEq(await longStream, "server_interrupted", "the running stream is interrupted");
  console.log(`SIGTERM under 200 trickling connections: exited in ${took} ms (--shutdown-timeout 2)`);
});
