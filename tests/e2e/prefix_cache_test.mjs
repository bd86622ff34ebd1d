// Prefix caching through the server (--enable-prefix-caching --kda-snapshot-interval 64): a repeated prompt,
// a shared prefix and a conversation's next turn report usage.prompt_tokens_details.cached_tokens > 0 — chat
// and completions, streamed and not — with exactly the output of a server without caching (greedy), and
// /metrics reports the hits, the cached blocks and the snapshots, with every block back once idle.
import { assert, assertEq, checkChatCompletion, checkCompletion, makeRng, run, startServer } from "./lib/harness.mjs";
import { expectCachesFreed, sameResult, streamRequest } from "./lib/traffic.mjs";

await run("e2e_prefix_cache", async (track) => {
  const rng = makeRng("e2e_prefix_cache");
  const cached = track(await startServer(["--enable-prefix-caching", "--kda-snapshot-interval", "64"]));
  const plain = track(await startServer([]));
  const [cc, pc] = [cached.client(), plain.client()];
  const cachedTokens = (u) => u.prompt_tokens_details.cached_tokens;

  // Completions on a 200-token prompt: nothing cached, then the same prompt again (its first 3 full blocks;
  // the last token is always recomputed), then a streamed prompt sharing its first 150 tokens.
  const ids = Array.from({ length: 200 }, () => rng.int(0, 1023));
  const body = { prompt: ids, max_tokens: 8, temperature: 0 };
  const want = await pc.completions.create(body);
  const first = await cc.completions.create(body);
  checkCompletion(first);
  assertEq(cachedTokens(first.usage), 0, "nothing cached yet");
  assertEq(cachedTokens(want.usage), 0, "no caching, nothing cached");
  const again = await cc.completions.create(body);
  checkCompletion(again);
  assertEq(cachedTokens(again.usage), 192, "the same prompt again");
  for (const r of [first, again]) assertEq(r.choices[0].text, want.choices[0].text, "same text as without caching");
  const shared = { kind: "completion", body: { prompt: [...ids.slice(0, 150), ...Array.from({ length: 60 }, () => rng.int(0, 1023))],
    max_tokens: 8, temperature: 0 } };
  const s = await streamRequest(cc, shared);
  assertEq(cachedTokens(s.usage), 128, "a 150-token shared prefix: the deepest snapshot inside it");
  sameResult(s, await streamRequest(pc, shared), "streamed completion");

  // Chat: the second turn of a conversation resumes after the first; streamed and not.
  const words = ["license", "work", "copyright", "grant", "patent", "the", "of", "and", "notice", "source"];
  const system = Array.from({ length: 160 }, () => words[rng.int(0, words.length - 1)]).join(" ");
  const turn1 = [{ role: "system", content: system }, { role: "user", content: "What does the grant cover?" }];
  const t1 = await cc.chat.completions.create({ messages: turn1, max_tokens: 16, temperature: 0 });
  checkChatCompletion(t1);
  const p1 = await pc.chat.completions.create({ messages: turn1, max_tokens: 16, temperature: 0 });
  assertEq(t1.choices[0].message.content, p1.choices[0].message.content, "turn 1: same reply as without caching");
  const turn2 = [...turn1, { role: "assistant", content: t1.choices[0].message.content ?? "" },
    { role: "user", content: "And the patent clause?" }];
  const req2 = { kind: "chat", body: { messages: turn2, max_tokens: 16, temperature: 0 } };
  const r2 = await streamRequest(cc, req2);
  assert(cachedTokens(r2.usage) >= 128, `turn 2 resumes from turn 1 (cached ${cachedTokens(r2.usage)})`);
  assert(cachedTokens(r2.usage) < r2.usage.prompt_tokens, "cached tokens within the prompt");
  sameResult(r2, await streamRequest(pc, req2), "turn 2, streamed");
  const w2 = await cc.chat.completions.create(req2.body);
  checkChatCompletion(w2);
  assert(cachedTokens(w2.usage) >= 128, "turn 2 again, not streamed");
  assertEq(w2.choices[0].message.content ?? "", r2.text, "turn 2: streamed == not streamed");

  const m = await expectCachesFreed(cached);
  console.log(`e2e_prefix_cache: hit rate ${m["rill:prefix_cache_hit_rate"]}, ${m["rill:prefix_cache_blocks"]} blocks, ` +
    `${m["rill:kda_snapshots_used"]} snapshots`);
  assert(m["rill:prefix_cache_hits_total"] > 0 && m["rill:prefix_cache_hit_rate"] > 0, "/metrics counts the hits");
  assert(m["rill:prefix_cache_blocks"] > 0 && m["rill:kda_snapshots_used"] > 0, "/metrics: cached blocks and snapshots");
  assert(m["rill:kda_snapshots_total"] >= m["rill:kda_snapshots_used"], "snapshots within the pool");
});
