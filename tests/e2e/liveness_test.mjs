// Issue #32 on a live `rill serve`: each attack against a fresh server, then /health must answer and a chat
// completion must succeed. N1: a 60,000-character model path (std::regex's recursion was a SIGSEGV). N3: one
// address re-opening trickling connections (it held every slot: /health got 503). N4: streams whose clients
// do not read while their requests wait in the engine (they held every --http-threads thread: /health timed
// out). N2: concurrent large bodies over a small --max-request-memory (some are refused with 503, the server
// lives). A text/plain POST from a disallowed Origin (no preflight) is refused with 403, not run.
import net from "net";

import { assert, assertEq, run, sleep, startServer } from "./lib/harness.mjs";
import { rawConnect, rawExchange } from "./lib/raw_http.mjs";

const user = [{ role: "user", content: "hello there" }];

async function healthy(server, what) {
  const h = await fetch(server.url + "/health", { signal: AbortSignal.timeout(5000) });
  assertEq(h.status, 200, `${what}: /health answers`);
  const chat = await server.client({ timeout: 60000 }).chat.completions.create({ messages: user, max_tokens: 4 });
  assertEq(chat.choices.length, 1, `${what}: a chat request completes`);
}

const post = (path, body, extra = "") =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

// A connection from another loopback address (Linux routes all of 127.0.0.0/8 to lo).
function connectFrom(port, localAddress) {
  return new Promise((resolve) => {
    const sock = net.createConnection({ port, host: "127.0.0.1", localAddress });
    sock.on("error", () => {});
    sock.once("connect", () => resolve(sock));
    sock.once("error", () => resolve(sock));
  });
}

await run("e2e_liveness", async (track) => {
  {  // N1
    const server = track(await startServer(["--max-header-bytes", "65536"]));
    const r = await rawExchange(server.port, `GET /v1/models/${"a".repeat(60000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
    assertEq(r.status, 414, "N1: a 60,000-character path is refused");
    await healthy(server, "N1");
    await server.stop();
  }
  {  // N3
    const server = track(await startServer(["--max-connections", "64", "--max-connections-per-client", "16",
                                            "--header-timeout", "3"]));
    const socks = [];
    for (let i = 0; i < 200; ++i) {  // re-opened as fast as they are refused
      const s = await connectFrom(server.port, "127.0.0.2");
      s.write("GET /health HTTP/1.1\r\nX: ");
      socks.push(s);
    }
    for (let i = 0; i < 10; ++i) await healthy(server, `N3 probe ${i}`);
    socks.forEach((s) => s.destroy());
    await server.stop();
  }
  {  // N4
    const server = track(await startServer(["--http-threads", "4", "--max-batch-size", "1"]));
    const body = JSON.stringify({ messages: user, max_tokens: 48, stream: true, ignore_eos: true });
    const streams = [];
    for (let i = 0; i < 16; ++i) {  // 4x the handler threads; 15 of them wait in the engine queue
      const c = await rawConnect(server.port);
      c.sock.pause();  // never reads
      c.sock.write(post("/v1/chat/completions", body));
      streams.push(c);
    }
    await sleep(300);
    const t0 = Date.now();
    const h = await fetch(server.url + "/health", { signal: AbortSignal.timeout(3000) });
    assertEq(h.status, 200, "N4: /health answers beside 16 non-reading streams");
    const models = await fetch(server.url + "/v1/models", { signal: AbortSignal.timeout(3000) });
    assertEq(models.status, 200, "N4: another route answers too");
    console.log(`N4: /health and /v1/models answered in ${Date.now() - t0} ms beside 16 non-reading streams`);
    streams.forEach((c) => c.sock.destroy());
    await healthy(server, "N4");
    await server.stop();
  }
  {  // N2
    const server = track(await startServer(["--max-request-memory", String(256 << 20)]));
    // 3 MB (an unknown field: parsing is the cost, not tokenizing): 99 MB charged once read.
    const big = JSON.stringify({ prompt: "hi", pad: "x".repeat(3000000) });
    const results = await Promise.all(Array.from({ length: 6 }, () => rawExchange(server.port, post("/tokenize", big), 60000)));
    const codes = results.map((r) => r.status);
    results.forEach((r) => r.c.sock.destroy());
    assert(codes.every((s) => s === 200 || s === 503), "N2: each big body is answered or refused: " + codes);
    assert(codes.includes(503), "N2: the budget refuses some of 6 concurrent 3 MB bodies: " + codes);
    await healthy(server, "N2");
    await server.stop();
  }
  {  // a disallowed origin
    const server = track(await startServer(["--allowed-origins", "http://ok.test"]));
    const body = JSON.stringify({ messages: user, max_tokens: 4 });
    const r = await rawExchange(server.port, post("/v1/chat/completions", body, "Origin: http://evil.test\r\n").replace("application/json", "text/plain"));
    assertEq(r.status, 403, "a text/plain POST from a disallowed origin is refused");
    await healthy(server, "origin");
    await server.stop();
  }
});
