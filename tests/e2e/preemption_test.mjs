// Preemption: a server with a deliberately tiny cache (--num-kv-blocks 6: 384 tokens of MLA KV for
// everything) under 16 concurrent streams of up to ~260 tokens each must preempt (rill:num_preemptions_total
// > 0) and still finish every request with exactly the output of the same request run alone. Why it must: a
// request is admitted when its first chunk's blocks are free, and a completion's prompt here ends on a
// 64-token block boundary (64, 128 or 192 ids), so its first decoded token already needs another block: once
// the running requests hold the 6 blocks, the next of them to decode preempts one. (Prompts of any length
// leave slack in their last block, and some seeds' requests, on a slow TSan build too, then ran within the free
// blocks without a preemption.)
import { assert, makeRng, run, startServer } from "./lib/harness.mjs";
import { expectCachesFreed, randomRequest, sameResult, streamRequest } from "./lib/traffic.mjs";

await run("e2e_preemption", async (track) => {
  const rng = makeRng("e2e_preemption");
  const server = track(await startServer(["--num-kv-blocks", "6", "--max-batch-size", "8", "--max-num-tokens", "256"]));
  const client = server.client();
  const reqs = Array.from({ length: 16 }, () => randomRequest(rng, { minPrompt: 64, maxPrompt: 200, maxTokens: 60, chatShare: 0.25 }));
  for (const r of reqs) {
    r.body.max_tokens = Math.max(r.body.max_tokens, 40);
    if (r.kind === "completion") r.body.prompt = r.body.prompt.slice(0, 64 * Math.floor(r.body.prompt.length / 64));
  }
  const together = await Promise.all(reqs.map((r) => streamRequest(client, r)));
  const m = await expectCachesFreed(server);
  console.log(`e2e_preemption: ${m["rill:num_preemptions_total"]} preemptions`);
  assert(m["rill:num_preemptions_total"] > 0, "the tiny cache forced preemptions");
  for (let i = 0; i < reqs.length; ++i) sameResult(together[i], await streamRequest(client, reqs[i]), `request ${i}`);
});
