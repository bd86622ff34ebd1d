// rill serve --speculative-config (issue #21): the official openai client gets exactly the answers of the
// server without speculation — greedy completions and chat, streamed and not — with the n-gram, suffix and
// draft-model drafters, and with a draft model beside a model split over two ranks (-tp 2, ranks as
// threads). /metrics counts what was drafted and accepted (vLLM's spec_decode counters): the model as its own
// draft proposes its own greedy continuation, so every draft token is accepted.
import { MODEL_DIR, assert, assertEq, run, startServer } from "./lib/harness.mjs";
import { answers } from "./lib/greedy_answers.mjs";

const spec = (o) => ["--speculative-config", JSON.stringify(o)];

await run("e2e_speculative_serve", async (track) => {
  const base = ["--served-model-name", "m", "--num-kv-blocks", "64"];
  const plain = track(await startServer(base));
  const want = await answers(plain.client());
  assert(want.some(([, text]) => text.length > 0), "the answers are not empty");
  await plain.stop();

  const configs = [
    { name: "ngram", args: spec({ method: "ngram", num_speculative_tokens: 3, prompt_lookup_max: 3, prompt_lookup_min: 1 }) },
    { name: "suffix", args: spec({ method: "suffix", num_speculative_tokens: 3 }) },
    { name: "draft_model", args: spec({ method: "draft_model", model: MODEL_DIR, num_speculative_tokens: 3 }), selfDraft: true },
    { name: "draft_model -tp 2", args: [...spec({ method: "draft_model", model: MODEL_DIR, num_speculative_tokens: 3 }), "-tp", "2"],
      selfDraft: true },
  ];
  for (const c of configs) {
    const server = track(await startServer([...base, ...c.args]));
    if (c.selfDraft) assert(/loading the draft model/.test(server.log), `${c.name}: the log says the draft model loads:\n` + server.log);
    const got = await answers(server.client());
    assertEq(JSON.stringify(got), JSON.stringify(want), `${c.name}: the answers of the server without speculation`);
    const m = await server.metrics();
    const drafted = m["rill:spec_decode_num_draft_tokens_total"], accepted = m["rill:spec_decode_num_accepted_tokens_total"];
    assert(drafted !== undefined && accepted !== undefined, `${c.name}: /metrics has the spec_decode counters`);
    assert(accepted <= drafted, `${c.name}: accepted ${accepted} <= drafted ${drafted}`);
    if (c.selfDraft) {
      assert(drafted > 0, `${c.name}: the draft model drafted`);
      assertEq(accepted, drafted, `${c.name}: the model as its own draft has every draft token accepted`);
    }
    await server.stop();
  }
});
