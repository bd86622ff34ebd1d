// Issue #32 item 4: constrained requests with counted states (a JSON-schema string with `maxLength`) must not
// slow other users' streams. Each token of such a string used to need a walk over the whole vocabulary (its
// count is part of the grammar state, so the per-state mask cache never hit): on Kimi's 163,840 ids that is
// tens of ms of CPU per token, and four such requests slowed an unrelated stream from 31.6 to 212 ms a token.
// Now the count is split off the state (src/text/constraint/counted_mask.h) and a counted token costs about
// what an unbounded-string token costs.
//
// The effect needs the real vocabulary (the tiny model's 1,280 ids walk in microseconds), so the tiny model is
// served with Kimi's tokenizer (RILL_SHARED_DIR/tokenizers/kimi): its embedding and output rows are tiled
// out to 163,840 ids. Without those files the test is skipped naming them (a failure under CI=true).
//
// Measured through the official `openai` client: the median gap between a stream's chunks alone, and while
// four `maxLength` requests (response_format json_schema, one long bounded string each) decode beside it;
// the second must stay within 2× of the first. Windows of 40 gaps alternate (alone, beside, alone, ...: three
// rounds), each beside window compared with the alone windows around it, and at least one round must pass:
// load from outside that comes and goes can spoil a round, hardly three. On the 2-core development VM
// (shared with other builds, load average 6-10) the fixed server's rounds measured 1.3-1.9× (four
// unconstrained requests beside: 1.1-1.8×, the CPU forward of a batch of five), the server before the
// change 5.7-23×.
//
// The stream decodes greedily and the four sample with top_k 40: the CPU reference sampler sorts the whole
// vocabulary for an unrestricted top_k (backend/sampling.cc; ~15 ms a row at 163,840 ids here), a cost of
// batching that has nothing to do with masks and alone would double the stream's gap.
import fs from "fs";
import os from "os";
import path from "path";
import { assert, assertEq, MODEL_DIR, run, sleep, startServer } from "./lib/harness.mjs";
import { startRecordedStream } from "./lib/recorded_stream.mjs";
import { checkSharedFiles, SHARED_DIR, skip } from "../shared_data.mjs";

const NAME = "e2e_maxlength_stall";
const MAX_RATIO = 2;
const GAPS = 40;  // per window
const ROUNDS = 3;  // alone + beside windows, then one more alone
const KIMI_FILES = ["tokenizers/kimi/tiktoken.model", "tokenizers/kimi/tokenizer_config.json"];

const missing = checkSharedFiles(NAME, KIMI_FILES);
if (missing) skip(NAME, missing);
run(NAME, main);

// The tiny model with Kimi's vocabulary: config vocab_size and control ids moved to Kimi's, the two
// [vocab, hidden] tensors tiled out to 163,840 rows (row r is the tiny row r mod 1,024, the control block
// keeps the tiny control rows), Kimi's tiktoken.model and tokenizer_config.json.
function kimiVocabModel(dir) {
  const tiktoken = fs.readFileSync(path.join(SHARED_DIR, KIMI_FILES[0]), "utf8");
  const nRanks = tiktoken.split("\n").filter((l) => l.trim()).length;
  const vocab = nRanks + 256;
  const config = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, "config.json"), "utf8"));
  const tinyRanks = config.vocab_size - 256;
  const moveId = (id) => nRanks + (id - tinyRanks);
  Object.assign(config, { vocab_size: vocab, bos_token_id: moveId(config.bos_token_id),
    eos_token_id: moveId(config.eos_token_id), pad_token_id: moveId(config.pad_token_id) });
  fs.writeFileSync(path.join(dir, "config.json"), JSON.stringify(config, null, 2));
  for (const f of KIMI_FILES) fs.copyFileSync(path.join(SHARED_DIR, f), path.join(dir, path.basename(f)));

  const src = fs.readFileSync(path.join(MODEL_DIR, "model.safetensors"));
  const headerLen = Number(src.readBigUInt64LE(0));
  const header = JSON.parse(src.subarray(8, 8 + headerLen).toString("utf8"));
  const data = src.subarray(8 + headerLen);
  const names = Object.keys(header).filter((k) => k !== "__metadata__");
  const out = {}, chunks = [];
  let offset = 0;
  for (const name of names) {
    const t = header[name];
    let bytes = data.subarray(t.data_offsets[0], t.data_offsets[1]);
    let shape = t.shape;
    if (shape.length === 2 && shape[0] === tinyRanks + 256) {
      const rowBytes = bytes.length / shape[0];
      const grown = Buffer.alloc(vocab * rowBytes);
      for (let r = 0; r < vocab; ++r) {
        const from = r >= nRanks ? tinyRanks + (r - nRanks) : r % tinyRanks;
        bytes.copy(grown, r * rowBytes, from * rowBytes, (from + 1) * rowBytes);
      }
      bytes = grown;
      shape = [vocab, shape[1]];
    }
    const pad = (8 - (bytes.length % 8)) % 8;
    out[name] = { dtype: t.dtype, shape, data_offsets: [offset, offset + bytes.length] };
    chunks.push(bytes, Buffer.alloc(pad));
    offset += bytes.length + pad;
  }
  if (header.__metadata__) out.__metadata__ = header.__metadata__;
  let json = JSON.stringify(out);
  json += " ".repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  fs.writeFileSync(path.join(dir, "model.safetensors"), Buffer.concat([len, Buffer.from(json), ...chunks]));
  return { vocab, eos: config.eos_token_id };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1];
}

async function main(track) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rill-maxlength-"));
  try {
    const { vocab } = kimiVocabModel(dir);
    const server = track(await startServer([], { model: dir }));
    const client = server.client();
    const model = (await client.models.list()).data[0].id;

    const victim = startRecordedStream(server.url,
      { model, prompt: [1, 2, 3], max_tokens: 16000, ignore_eos: true, temperature: 0 });
    const { arrivals } = victim;
    // The median gap of the next `n` chunks.
    const gapsOver = async (n) => {
      const from = arrivals.length;
      while (arrivals.length < from + n + 1) {
        assert(victim.done === null, `the stream ended early: ${victim.done}`);
        await sleep(5);
      }
      const gaps = [];
      for (let i = from + 1; i <= from + n; ++i) gaps.push(arrivals[i] - arrivals[i - 1]);
      return gaps;
    };
    await gapsOver(5);  // started, past its prefill

    // Four requests each inside a long bounded string: the constrained content is one JSON object whose
    // string may hold 5000 characters, so every token until the budget's end is a counted state. Re-issued
    // until the measurement is over (a string can close early: the tiny model's tokens are random).
    const schema = { type: "object", properties: { note: { type: "string", maxLength: 5000 } }, required: ["note"],
      additionalProperties: false };
    let constrainedTokens = 0, constrainedRequests = 0;
    // Until `stop` is aborted (the request then in flight is cancelled: it may be slow to finish).
    const attacker = async (seed, stop) => {
      while (!stop.aborted) {
        let text = "", finish = null;
        try {
          const s = await client.completions.create({ model, prompt: "Write a note:", max_tokens: 400, temperature: 1, top_k: 40,
            seed: seed++, stream: true, response_format: { type: "json_schema", json_schema: { name: "note", schema } } },
          { signal: stop });
          for await (const ch of s) {
            if (ch.choices[0]?.text) text += ch.choices[0].text, ++constrainedTokens;
            finish = ch.choices[0]?.finish_reason ?? finish;
          }
        } catch (e) {
          if (stop.aborted) return;
          throw e;
        }
        if (stop.aborted) return;  // cut short: the text is a prefix
        ++constrainedRequests;
        if (finish === "stop") {
          const v = JSON.parse(text);
          assert(typeof v.note === "string" && [...v.note].length <= 5000, `a valid bounded note: ${text.slice(0, 200)}`);
        } else {
          assert(/^\s*\{\s*"note"/.test(text), `constrained output: ${text.slice(0, 200)}`);
        }
      }
    };

    // Windows alone and beside alternate (alone, beside, alone, ..., alone): round r compares beside window r
    // with the alone windows on either side of it.
    const alone = [], beside = [], duringChunks = [];
    for (let round = 0; round < ROUNDS; ++round) {
      alone.push(await gapsOver(GAPS));
      const stop = new AbortController();
      const attackers = [0, 1, 2, 3].map((i) => attacker(1000 * (round * 4 + i) + 1, stop.signal));
      await gapsOver(20);  // the attackers' prompts and first walks
      const t0 = constrainedTokens;
      beside.push(await gapsOver(GAPS));
      const during = constrainedTokens - t0;
      stop.abort();
      await Promise.all(attackers);
      assert(during >= GAPS, `the constrained requests decoded meanwhile (${during} chunks)`);
      duringChunks.push(during);
    }
    alone.push(await gapsOver(GAPS));
    await victim.stop();
    assert(victim.error() === null, `the stream did not fail: ${victim.error()}`);

    const rounds = beside.map((b, r) => ({ alone: median([...alone[r], ...alone[r + 1]]), beside: median(b) }));
    const ratios = rounds.map((x) => x.beside / Math.max(x.alone, 1));
    console.log(`${NAME}: vocabulary ${vocab}; stream gap medians alone / beside four maxLength requests: ` +
      `${rounds.map((x, r) => `${x.alone} / ${x.beside} ms (${ratios[r].toFixed(2)}x)`).join(", ")}; pooled ` +
      `${median(alone.flat())} / ${median(beside.flat())} ms; ${constrainedRequests} constrained requests, ` +
      `${constrainedTokens} chunks, ${duringChunks.join(" / ")} of them in the windows beside`);
    // The best round: a burst of load from outside can spoil one or two, not the three.
    const best = Math.min(...ratios);
    assert(best <= MAX_RATIO, `the stream's median gap beside four maxLength requests is within ${MAX_RATIO}x of ` +
      `its gap alone in at least one of ${ROUNDS} rounds (best ${best.toFixed(2)}x)`);

    const after = await client.completions.create({ model, prompt: [1, 2, 3], max_tokens: 4, ignore_eos: true });
    assertEq(after.usage.completion_tokens, 4, "a normal request after");
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
