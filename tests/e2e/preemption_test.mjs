// Preemption: a server with a deliberately tiny cache (--num-kv-blocks 6: 384 tokens of MLA KV for
// everything) under 16 concurrent streams must preempt (rill:num_preemptions_total > 0) and still finish every
// request with exactly the output of the same request run alone. Why it must, whatever the seed and however the
// requests arrive: every prompt is 64 ids (one block) and every request generates 40-60 tokens (ignore_eos: no
// early stop), so each needs one block to be admitted and a second at its first decoded token, and holds both
// until it ends: three fit. Whenever the waiting requests' admissions use the last free block (at the latest
// when three run and one ends, freeing two blocks that two of the waiting take in one step), the next step's
// decodes ask a block for each of them with none left, and one is preempted. (Random prompt lengths, chat
// requests and early ends of text let seeds 4242, 1432556812 and 424242 finish without a preemption: a long
// prompt waiting at the head of the queue left its blocks free for the running requests to grow into.)
import { assert, makeRng, run, startServer } from "./lib/harness.mjs";
import { expectCachesFreed, randomRequest, sameResult, streamRequest } from "./lib/traffic.mjs";

await run("e2e_preemption", async (track) => {
  const rng = makeRng("e2e_preemption");
  const server = track(await startServer(["--num-kv-blocks", "6", "--max-batch-size", "8", "--max-num-tokens", "256"]));
  const client = server.client();
  const reqs = Array.from({ length: 16 }, () => randomRequest(rng, { minPrompt: 64, maxPrompt: 64, maxTokens: 60, chatShare: 0 }));
  for (const r of reqs) {
    r.body.max_tokens = Math.max(r.body.max_tokens, 40);
    r.body.ignore_eos = true;
  }
  const together = await Promise.all(reqs.map((r) => streamRequest(client, r)));
  const m = await expectCachesFreed(server);
  console.log(`e2e_preemption: ${m["rill:num_preemptions_total"]} preemptions`);
  assert(m["rill:num_preemptions_total"] > 0, "the tiny cache forced preemptions");
  for (let i = 0; i < reqs.length; ++i) sameResult(together[i], await streamRequest(client, reqs[i]), `request ${i}`);
});
