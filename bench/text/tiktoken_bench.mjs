// Times OpenAI's npm tiktoken (WASM) encoding the same corpus tokenizer_bench uses, configured as the
// reference tokenizer (Kimi ranks, control block, pattern).
//   node bench/text/tiktoken_bench.mjs BUILD/tests/text/tokenizer/tokenizer_ref_driver ../shared/tokenizers/kimi \
//        tests/node/node_modules
import { execFileSync } from "child_process";
import fs from "fs";
import { createRequire } from "module";
import path from "path";

const [driver, modelDir, nodeModules] = process.argv.slice(2);
if (!driver || !modelDir || !nodeModules) {
  console.error("usage: tiktoken_bench.mjs TOKENIZER_REF_DRIVER MODEL_DIR NODE_MODULES");
  process.exit(2);
}
const { Tiktoken } = createRequire(path.join(path.resolve(nodeModules), "x.js"))("tiktoken");
const PATTERN = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");
const ranks = fs.readFileSync(path.join(modelDir, "tiktoken.model"), "utf8");
const nRanks = ranks.split("\n").filter((l) => l).length;
const config = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
const specials = {};
for (let id = nRanks; id < nRanks + 256; id++) {
  const e = (config.added_tokens_decoder || {})[String(id)];
  specials[e ? e.content : `<|reserved_token_${id}|>`] = id;
}
const enc = new Tiktoken(ranks, specials, PATTERN);
const corpus = execFileSync(driver, ["--corpus"], { maxBuffer: 1 << 28 }).toString("utf8");
const bytes = Buffer.byteLength(corpus, "utf8");

function time(label, fn) {
  fn();  // warm-up
  // Wall and CPU time (the CPU figure is comparable with Google Benchmark's on a shared, loaded machine).
  const wall = [], cpu = [];
  for (let i = 0; i < 7; i++) {
    const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
    const n = fn();
    const c = process.cpuUsage(c0);
    wall.push(Number(process.hrtime.bigint() - t0) / 1e6);
    cpu.push((c.user + c.system) / 1e3);
    if (i === 0) console.log(`${label}: ${n} ids`);
  }
  const median = (v) => v.sort((a, b) => a - b)[3];
  const w = median(wall), c = median(cpu);
  const rate = (ms) => (bytes / 1e6 / (ms / 1e3)).toFixed(2);
  console.log(`${label}: median of 7 runs: wall ${w.toFixed(1)} ms (${rate(w)} MB/s), cpu ${c.toFixed(1)} ms (${rate(c)} MB/s); ${bytes} bytes`);
}
time("tiktoken encode_ordinary", () => enc.encode_ordinary(corpus).length);
time("tiktoken encode(allowed=all)", () => enc.encode(corpus, "all", []).length);
