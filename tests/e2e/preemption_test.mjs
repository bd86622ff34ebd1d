// Preemption: a server with a deliberately tiny cache (--num-kv-blocks 6: 384 tokens of MLA KV for
// everything) under 16 concurrent streams of up to ~260 tokens each must preempt (rill:num_preemptions_total
// > 0) and still finish every request with exactly the output of the same request run alone. Why it must:
// a request is admitted when its first chunk's blocks are free, and every prompt here is at least 64 tokens
// (a completion's ids; a chat's 64 words and its template are more) with at least 40 tokens to generate, so
// each admitted request needs at least one more block while it decodes: the 6 blocks are taken by the time
// two or three requests run, and the next block a running request asks for preempts one. (With prompts of
// 1 token, some seeds' requests ran one after another within the free blocks and none was preempted.)
import { assert, makeRng, run, startServer } from "./lib/harness.mjs";
import { expectCachesFreed, randomRequest, sameResult, streamRequest } from "./lib/traffic.mjs";

await run("e2e_preemption", async (track) => {
  const rng = makeRng("e2e_preemption");
  const server = track(await startServer(["--num-kv-blocks", "6", "--max-batch-size", "8", "--max-num-tokens", "256"]));
  const client = server.client();
  const reqs = Array.from({ length: 16 }, () => randomRequest(rng, { minPrompt: 64, maxPrompt: 200, maxTokens: 60, chatShare: 0.25 }));
  for (const r of reqs) r.body.max_tokens = Math.max(r.body.max_tokens, 40);
  const together = await Promise.all(reqs.map((r) => streamRequest(client, r)));
  const m = await expectCachesFreed(server);
  console.log(`e2e_preemption: ${m["rill:num_preemptions_total"]} preemptions`);
  assert(m["rill:num_preemptions_total"] > 0, "the tiny cache forced preemptions");
  for (let i = 0; i < reqs.length; ++i) sameResult(together[i], await streamRequest(client, reqs[i]), `request ${i}`);
});
