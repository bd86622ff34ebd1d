// Browser clients and the HTTP extras: CORS (--allowed-origins / --allowed-methods / --allowed-headers),
// X-Request-Id, several --served-model-name. What each check compares against:
//  - a real browser: headless Chromium (Debian's `chromium`, scripts/setup.sh) loads a page from another
//    origin that calls the server with fetch — a JSON chat completion with an API key (so the browser sends
//    a preflight first) and a streamed Responses request — and posts what it saw back to this test; a page
//    from an origin not in --allowed-origins is blocked by the browser itself. Without chromium the test is
//    skipped (exit 77), or fails under CI=true;
//  - the preflight answer by hand: 204 with the Access-Control-Allow-* headers for an allowed origin (before
//    the API key check), a 400 naming the origin / method / header that is not allowed, and no CORS headers
//    at all on a server without --allowed-origins (OPTIONS is then a 405);
//  - X-Request-Id: the id this test sends comes back; without one, a fresh 24-hex id on each response
//    (errors and streams included);
//  - /v1/models lists every served name; each is accepted and named back in the response; others are 404s.
import { spawn, spawnSync } from "child_process";
import fs from "fs";
import http from "http";
import os from "os";
import path from "path";

import { skip } from "../shared_data.mjs";
import { assert, assertEq, run, sleep, startServer } from "./lib/harness.mjs";

const KEY = "browser-key";
const inCi = ["true", "1"].includes(process.env.CI ?? "");

// The page: calls RILL with fetch and posts {status, requestId, tokens, events, error} back to its origin.
function page(rill) {
  return `<!doctype html><script type="module">
const out = {};
try {
  const r = await fetch(${JSON.stringify(rill)} + "/v1/chat/completions", { method: "POST",
    headers: { "content-type": "application/json", "authorization": "Bearer ${KEY}", "x-request-id": "from-the-page" },
    body: JSON.stringify({ messages: [{ role: "user", content: "Hello" }], max_tokens: 4, ignore_eos: true }) });
  out.status = r.status;
  out.requestId = r.headers.get("x-request-id");
  out.tokens = (await r.json()).usage.completion_tokens;
  const s = await fetch(${JSON.stringify(rill)} + "/v1/responses", { method: "POST",
    headers: { "content-type": "application/json", "authorization": "Bearer ${KEY}" },
    body: JSON.stringify({ input: "Hello", max_output_tokens: 3, ignore_eos: true, stream: true }) });
  out.events = [...(await s.text()).matchAll(/^event: (.*)$/gm)].map((m) => m[1]);
} catch (e) { out.error = String(e); }
await fetch("/result", { method: "POST", body: JSON.stringify(out) });
</script>`;
}

// A page server on a free port (its page calls rillUrl(), read when the page is fetched); `result`
// resolves when the page posts back.
async function pageServer(rillUrl) {
  let deliver;
  const result = new Promise((r) => (deliver = r));
  const srv = http.createServer((req, res) => {
    if (req.method === "POST" && req.url === "/result") {
      let body = "";
      req.on("data", (d) => (body += d));
      req.on("end", () => { res.end("ok"); deliver(JSON.parse(body)); });
      return;
    }
    res.setHeader("content-type", "text/html");
    res.end(page(rillUrl()));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { srv, origin: `http://127.0.0.1:${srv.address().port}`, result };
}

async function inBrowser(chromium, url, timeoutMs = 60000) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "rill-chromium-"));
  const proc = spawn(chromium, ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
    `--user-data-dir=${profile}`, url], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr.on("data", (d) => (log += d));
  const exited = new Promise((r) => proc.on("exit", r));
  let timer;
  return {
    // Chromium's helpers may still write into the profile for a moment after the kill: removal is best-effort.
    stop: async () => {
      clearTimeout(timer);
      proc.kill("SIGKILL");
      await exited;
      await sleep(200);
      try { fs.rmSync(profile, { recursive: true, force: true, maxRetries: 5 }); } catch { /* left in tmp */ }
    },
    timeout: new Promise((r) => (timer = setTimeout(
      () => r({ error: "the page did not report within " + timeoutMs + " ms:\n" + log.slice(-3000) }), timeoutMs))),
  };
}

const chromium = ["chromium", "chromium-browser", "google-chrome"].find((c) => spawnSync(c, ["--version"]).status === 0);
if (!chromium && !inCi) skip("e2e_browser", "no chromium on PATH (Debian's `chromium`: scripts/setup.sh installs it)");

await run("e2e_browser", async (track) => {
  assert(chromium, "chromium is required under CI=true (scripts/setup.sh installs it)");
  let server = null;
  const allowed = await pageServer(() => server.url);
  const other = await pageServer(() => server.url);
  server = track(await startServer(["--api-key", KEY, "--allowed-origins", `${allowed.origin}, http://example.test`,
    "--allowed-methods", "GET,POST", "--allowed-headers", "content-type,authorization,x-request-id"]));

  // The preflight, by hand.
  const preflight = (origin, method = "POST", headers = "content-type, authorization") => fetch(server.url + "/v1/chat/completions", {
    method: "OPTIONS", headers: { origin, "access-control-request-method": method, "access-control-request-headers": headers } });
  const ok = await preflight(allowed.origin);
  assertEq(ok.status, 204, "preflight from an allowed origin (no API key needed)");
  assertEq(ok.headers.get("access-control-allow-origin"), allowed.origin, "Allow-Origin names the origin");
  assertEq(ok.headers.get("access-control-allow-methods"), "GET, POST", "Allow-Methods");
  assertEq(ok.headers.get("access-control-allow-headers"), "content-type, authorization, x-request-id", "Allow-Headers");
  assert(/Origin/.test(ok.headers.get("vary") ?? ""), "Vary: Origin");
  for (const [args, word] of [[[other.origin], other.origin], [[allowed.origin, "DELETE"], "DELETE"], [[allowed.origin, "POST", "x-secret"], "x-secret"]]) {
    const bad = await preflight(...args);
    assertEq(bad.status, 400, "a refused preflight: " + word);
    assert((await bad.text()).includes(word), "the refusal names " + word);
    assert(!bad.headers.get("access-control-allow-methods"), "a refused preflight allows nothing");
  }
  const actual = await fetch(server.url + "/v1/models", { headers: { origin: allowed.origin, authorization: `Bearer ${KEY}` } });
  assertEq(actual.status, 200, "an actual request");
  assertEq(actual.headers.get("access-control-allow-origin"), allowed.origin, "actual responses carry Allow-Origin");
  const denied = await fetch(server.url + "/v1/models", { headers: { origin: other.origin } });
  assertEq([denied.status, denied.headers.get("access-control-allow-origin")], [403, null], "another origin is refused, before the key check");
  // A "simple" request (text/plain POST: no preflight) from another origin must not run (issue #32).
  const simple = await fetch(server.url + "/v1/completions", { method: "POST", headers: { origin: other.origin, "content-type": "text/plain", authorization: `Bearer ${KEY}` }, body: JSON.stringify({ prompt: "hi", max_tokens: 1 }) });
  assertEq(simple.status, 403, "a text/plain POST from another origin is refused");

  // A real browser, from the allowed origin and from another one.
  const b1 = await inBrowser(chromium, allowed.origin + "/");
  const seen = await Promise.race([allowed.result, b1.timeout]);
  await b1.stop();
  assert(!seen.error, "the page's calls succeed: " + JSON.stringify(seen));
  assertEq([seen.status, seen.requestId, seen.tokens], [200, "from-the-page", 4], "the page read the completion and its X-Request-Id");
  assertEq(seen.events[0], "response.created", "the page read the SSE stream");
  assertEq(seen.events[seen.events.length - 1], "response.incomplete", "... to its end");
  const b2 = await inBrowser(chromium, other.origin + "/");
  const blocked = await Promise.race([other.result, b2.timeout]);
  await b2.stop();
  assert(/Failed to fetch|TypeError/.test(blocked.error ?? ""), "the browser blocks a page from another origin: " + JSON.stringify(blocked));
  allowed.srv.close();
  other.srv.close();

  // X-Request-Id, without CORS, and several served names.
  const plain = track(await startServer(["--served-model-name", "rill-tiny", "kimi-linear"]));
  const sent = await fetch(plain.url + "/v1/models", { headers: { "x-request-id": "abc-123", origin: allowed.origin } });
  assertEq(sent.headers.get("x-request-id"), "abc-123", "X-Request-Id echoed");
  assertEq(sent.headers.get("access-control-allow-origin"), null, "no CORS headers without --allowed-origins");
  const opt = await fetch(plain.url + "/v1/models", { method: "OPTIONS", headers: { origin: allowed.origin, "access-control-request-method": "GET" } });
  assertEq(opt.status, 405, "OPTIONS without --allowed-origins is a 405");
  const ids = new Set();
  for (const [pathname, body] of [["/v1/models"], ["/v1/models/nope"], ["/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_tokens: 2, stream: true }]]) {
    const res = await fetch(plain.url + pathname, body ? { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) } : {});
    await res.text();
    const id = res.headers.get("x-request-id") ?? "";
    assert(/^[0-9a-f]{24}$/.test(id), `${pathname}: a generated X-Request-Id (${id}, status ${res.status})`);
    ids.add(id);
  }
  assertEq(ids.size, 3, "a new id per response");
  const client = plain.client();
  assertEq((await client.models.list()).data.map((m) => m.id), ["rill-tiny", "kimi-linear"], "/v1/models lists every served name");
  for (const model of ["rill-tiny", "kimi-linear"]) {
    const c = await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 2 });
    assertEq(c.model, model, `${model}: accepted and named back`);
    assertEq((await client.models.retrieve(model)).id, model, `${model}: /v1/models/${model}`);
  }
  const unknown = await plain.fetchJson("/v1/chat/completions", { model: "other", messages: [{ role: "user", content: "x" }] });
  assertEq(unknown.status, 404, "an unserved name is a 404");
});
