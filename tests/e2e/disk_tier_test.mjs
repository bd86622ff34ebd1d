// The prefix cache's disk tier across a restart of `rill serve` (issue #38): a server with a host tier and
// --kv-offloading-dir answers a conversation's first turn and a long completion, is stopped (SIGTERM: it
// writes what it cached to the directory), and a second server over the same directory answers the second turn
// and the same completion again with usage.prompt_tokens_details.cached_tokens > 0 — read from disk, counted
// in /metrics — and exactly the output of a server without caching (greedy).
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { assert, assertEq, checkChatCompletion, checkCompletion, makeRng, run, startServer } from "./lib/harness.mjs";

const dir = mkdtempSync(join(tmpdir(), "rill_e2e_disk_"));
await run("e2e_disk_tier", async (track) => {
  const rng = makeRng("e2e_disk_tier");
  const tiered = ["--enable-prefix-caching", "--kda-snapshot-interval", "64", "--kv-offloading-size", "0.05",
    "--kv-offloading-dir", dir];
  const plain = track(await startServer([]));
  const pc = plain.client();
  const cachedTokens = (u) => u.prompt_tokens_details.cached_tokens;

  const words = ["license", "work", "copyright", "grant", "patent", "the", "of", "and", "notice", "source"];
  const system = Array.from({ length: 160 }, () => words[rng.int(0, words.length - 1)]).join(" ");
  const turn1 = [{ role: "system", content: system }, { role: "user", content: "What does the grant cover?" }];
  const ids = Array.from({ length: 200 }, () => rng.int(0, 1023));
  const completion = { prompt: ids, max_tokens: 8, temperature: 0 };

  const first = track(await startServer(tiered));
  const t1 = await first.client().chat.completions.create({ messages: turn1, max_tokens: 16, temperature: 0 });
  checkChatCompletion(t1);
  const p1 = await pc.chat.completions.create({ messages: turn1, max_tokens: 16, temperature: 0 });
  assertEq(t1.choices[0].message.content, p1.choices[0].message.content, "turn 1: same reply as without caching");
  const c1 = await first.client().completions.create(completion);
  checkCompletion(c1);
  const stopped = await first.stop();
  assertEq(stopped.code, 0, "the first server exits 0 after SIGTERM");
  const files = readdirSync(dir);
  assert(files.some((f) => f.endsWith(".blk")) && files.some((f) => f.endsWith(".snap")),
    `the first server left blocks and snapshots in ${dir}: ${files.length} files`);

  const second = track(await startServer(tiered));
  assert(/disk tier .*: \d+ MLA blocks and \d+ KDA snapshots found/.test(second.log), "the restart scans the directory");
  const turn2 = [...turn1, { role: "assistant", content: t1.choices[0].message.content ?? "" },
    { role: "user", content: "And the patent clause?" }];
  const t2 = await second.client().chat.completions.create({ messages: turn2, max_tokens: 16, temperature: 0 });
  checkChatCompletion(t2);
  assert(cachedTokens(t2.usage) >= 128, `turn 2 after the restart resumes from disk (cached ${cachedTokens(t2.usage)})`);
  const p2 = await pc.chat.completions.create({ messages: turn2, max_tokens: 16, temperature: 0 });
  assertEq(t2.choices[0].message.content, p2.choices[0].message.content, "turn 2: same reply as without caching");
  const c2 = await second.client().completions.create(completion);
  assertEq(cachedTokens(c2.usage), 192, "the completion again after the restart: its 3 full blocks");
  assertEq(c2.choices[0].text, (await pc.completions.create(completion)).choices[0].text, "same completion text");
  assertEq(c2.choices[0].text, c1.choices[0].text, "same completion text as before the restart");

  const m = await second.metrics();
  console.log(`e2e_disk_tier: ${files.length} files, ${m["rill:prefix_cache_hits_disk_total"]} hit tokens from disk, ` +
    `${m["rill:kv_offload_bytes_from_disk_total"]} bytes read`);
  assert(m["rill:prefix_cache_hits_disk_total"] >= 128 + 192, "/metrics counts the disk hits");
  assert(m["rill:kv_offload_bytes_from_disk_total"] > 0 && m["rill:disk_tier_files"] > 0, "/metrics: bytes read, files");
  assertEq(m["rill:disk_tier_read_errors_total"], 0, "no read errors");
});
rmSync(dir, { recursive: true, force: true });
