// `rill bench serve` against `rill serve --speculative-config` (ngram, suffix) on the tiny model: the
// Speculative Decoding numbers it reports (table and result JSON) equal what this test reads itself from
// /metrics around each run — drafts, draft tokens and accepted tokens as counter deltas, acceptance rate and
// mean acceptance length from them (vLLM's definitions), per-position acceptance from the acceptance-length
// histogram's deltas; a run that drafted nothing reports zeros and "n/a". Whether prompt lookup (ngram) or a
// first suffix-decoding run drafts at all depends on what the random model emits (it drafts only where the
// newest token occurred earlier: seed 1271069277's six ngram requests never did), so those runs are checked
// whatever they drafted; what must draft is a suffix-decoding server's repeats of prompts it has answered,
// whose greedy outputs it drafts: two such runs after a first, the third failing a report of the running
// totals instead of the run's share, with drafts accepted at every position. Against a server without
// speculation the section and the keys are absent.
import fs from "fs";
import os from "os";
import path from "path";

import { RILL, assert, benchServe as bench, assertEq, makeRng, run, startServer } from "./lib/harness.mjs";

const K = 4;  // num_speculative_tokens
const SPEC = "rill:spec_decode_";

// The run's share of the counters, and per-position acceptance from the histogram: draft i was accepted by the
// verify steps that emitted at least i + 2 tokens, i.e. count - bucket(le = i + 1).
function expectedStats(before, after) {
  const d = (key) => after[SPEC + key] - (before[SPEC + key] ?? 0);
  const drafts = d("num_drafts_total"), draftTokens = d("num_draft_tokens_total"), accepted = d("num_accepted_tokens_total");
  const perPosition = [];
  for (let i = 0; i < K; ++i)
    perPosition.push((d("acceptance_length_count") - d(`acceptance_length_bucket{le="${i + 1}"}`)) / drafts);
  return { drafts, draftTokens, accepted, rate: (100 * accepted) / draftTokens, length: 1 + accepted / drafts, perPosition };
}

function near(a, b, what) {
  assert(Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b)), `${what}: ${a} vs ${b} read from /metrics`);
}

await run("e2e_bench_serve_spec", async (track) => {
  const rng = makeRng("e2e_bench_serve_spec");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rill_bench_spec_"));
  // Prompts that repeat themselves, so prompt lookup finds matches wherever the random model emits a token of
  // the prompt or repeats itself.
  const words = ["red", "green", "blue", "seven", "river", "stone", "night", "paper"];
  const lines = [];
  for (let i = 0; i < 6; ++i) {
    const cycle = Array.from({ length: rng.int(2, 5) }, () => words[rng.int(0, words.length - 1)]).join(" ");
    lines.push(JSON.stringify({ prompt: Array(rng.int(3, 6)).fill(cycle).join(" "), output_len: rng.int(16, 32) }));
  }
  const prompts = path.join(dir, "prompts.jsonl");
  fs.writeFileSync(prompts, lines.join("\n") + "\n");
  const args = ["--dataset-name", "file", "--dataset-path", prompts, "--num-prompts", "6", "--max-concurrency", "2",
    "--ignore-eos"];

  // The table's numbers as vLLM's Python prints them (f"{x:.2f}"): the double's exact value rounded half to
  // even. JS toFixed rounds an exact tie up (1.125 -> "1.13" where Python and rill print "1.12": one accepted
  // token in 8 drafts).
  const pyFixed2 = (x) => {
    const exact = Math.abs(x).toPrecision(100);  // every digit of the double (these have far fewer than 100)
    const [, frac = ""] = exact.split(".");
    if (/^50*$/.test(frac.slice(2)) && Number(frac[1]) % 2 === 0) return (x < 0 ? "-" : "") + exact.slice(0, exact.indexOf(".") + 3);
    return x.toFixed(2);
  };

  // One bench run against `server`; its Speculative Decoding numbers must be the /metrics deltas around it.
  // mustDraft: the run is one that drafts whatever the seed.
  const checkedRun = async (server, what, mustDraft) => {
    const resultFile = path.join(dir, "result.json");
    const before = await server.metrics();
    const r = await bench(["--url", server.url, ...args, "--result-file", resultFile]);
    const after = await server.metrics();
    assertEq(r.code, 0, `${what}: bench serve exit code\n` + r.out + r.err);
    const j = JSON.parse(fs.readFileSync(resultFile, "utf8"));
    assertEq([j.completed, j.failed], [6, 0], `${what}: every request completed`);
    const e = expectedStats(before, after);
    if (mustDraft) assert(e.drafts > 0, `${what}: the server drafted (${JSON.stringify(e)})`);
    assert(e.draftTokens >= e.drafts && e.accepted <= e.draftTokens, `${what}: consistent counters (${JSON.stringify(e)})`);
    assertEq([j.spec_decode_num_drafts, j.spec_decode_draft_tokens, j.spec_decode_accepted_tokens],
      [e.drafts, e.draftTokens, e.accepted], `${what}: drafts, draft tokens, accepted = the /metrics deltas`);
    if (e.drafts === 0) {  // nothing to rate: zeros, "n/a", no per-position rates
      assertEq([j.spec_decode_acceptance_rate, j.spec_decode_acceptance_length], [null, null], `${what}: no rates`);
      assertEq(j.spec_decode_per_position_acceptance_rates, [], `${what}: no per-position rates`);
      for (const line of ["-------------Speculative Decoding---------------",
        "Acceptance rate (%):                     n/a", "Acceptance length:                       n/a",
        "Drafts:                                  0", "Draft tokens:                            0",
        "Accepted tokens:                         0"])
        assert(r.out.includes(line), `${what}: the table has '${line}':\n${r.out}`);
      assert(!r.out.includes("Per-position acceptance"), `${what}: no per-position lines:\n${r.out}`);
      return e;
    }
    near(j.spec_decode_acceptance_rate, e.rate, `${what}: acceptance rate (%)`);
    near(j.spec_decode_acceptance_length, e.length, `${what}: acceptance length`);
    assertEq(j.spec_decode_per_position_acceptance_rates.length, K, `${what}: one rate per draft position`);
    j.spec_decode_per_position_acceptance_rates.forEach((v, i) => near(v, e.perPosition[i], `${what}: position ${i}`));
    for (const line of ["-------------Speculative Decoding---------------",
      `Acceptance rate (%):                     ${pyFixed2(e.rate)}`,
      `Acceptance length:                       ${pyFixed2(e.length)}`,
      `Drafts:                                  ${e.drafts}`, `Draft tokens:                            ${e.draftTokens}`,
      `Accepted tokens:                         ${e.accepted}`, "Per-position acceptance (%):",
      `  Position 0:                            ${pyFixed2(100 * e.perPosition[0])}`,
      `  Position ${K - 1}:                            ${pyFixed2(100 * e.perPosition[K - 1])}`])
      assert(r.out.includes(line), `${what}: the table has '${line}':\n${r.out}`);
    return e;
  };

  // ngram (prompt lookup), twice on one server.
  const ngram = track(await startServer(["--max-batch-size", "4", "--speculative-config",
    JSON.stringify({ method: "ngram", num_speculative_tokens: K, prompt_lookup_max: 4, prompt_lookup_min: 1 })]));
  await checkedRun(ngram, "ngram, first run", false);
  await checkedRun(ngram, "ngram, second run", false);
  // Suffix decoding drafts a repeated prompt's earlier (greedy, hence identical) output, so the runs after the
  // first draft and accept drafts at every position: the per-position figures are then not all zero.
  const suffix = track(await startServer(["--max-batch-size", "4", "--speculative-config",
    JSON.stringify({ method: "suffix", num_speculative_tokens: K })]));
  await checkedRun(suffix, "suffix, first run", false);
  for (const what of ["suffix, the same prompts again", "suffix, the same prompts a third time"]) {
    const repeated = await checkedRun(suffix, what, true);
    assert(repeated.perPosition[K - 1] > 0, `${what}: drafts accepted up to position ${K - 1}: ${JSON.stringify(repeated)}`);
  }

  // Without speculation the server exports no spec_decode counters: no section, no keys.
  const plain = track(await startServer(["--max-batch-size", "4"]));
  const plainFile = path.join(dir, "plain.json");
  const r = await bench(["--url", plain.url, ...args, "--result-file", plainFile]);
  assertEq(r.code, 0, "bench serve exit code (no speculation)\n" + r.out + r.err);
  assert(!r.out.includes("Speculative Decoding"), "no section without speculation:\n" + r.out);
  const j = JSON.parse(fs.readFileSync(plainFile, "utf8"));
  assert(!Object.keys(j).some((k) => k.startsWith("spec_decode_")), "no spec_decode_ keys without speculation");
  fs.rmSync(dir, { recursive: true });
});
