// Compares rill's tokenizer with an independent reference: OpenAI's npm `tiktoken` (Rust fancy-regex
// compiled to WASM) configured with the real Kimi ranks, the Kimi control block and the Kimi pattern, wrapped
// in a transcription of tokenization_kimi.py's chunking guard (400,000-char pieces, 25,000-char runs).
//
//   node tiktoken_reference_test.mjs DRIVER MODEL_DIR NODE_MODULES
//
// Cases: the mixed corpus (>= 1 MB), >= 10,000 random Unicode strings drawn from the commit's seed
// (tests/test_seed.mjs: printed; RILL_TEST_SEED=N replays it), chunking-guard edge cases. Each text is encoded
// with special tokens allowed and disallowed; ids must be identical and decode(encode(x)) must give x back.
// MODEL_DIR is the real Kimi vocabulary (../shared/tokenizers/kimi): without it the test skips (exit 77).
import { spawn } from "child_process";
import fs from "fs";
import { createRequire } from "module";
import path from "path";

import { checkSharedFiles, skip } from "../../shared_data.mjs";
import { testSeed } from "../../test_seed.mjs";

const [driver, modelDir, nodeModules] = process.argv.slice(2);
if (!driver || !modelDir || !nodeModules) {
  console.error("usage: tiktoken_reference_test.mjs DRIVER MODEL_DIR NODE_MODULES");
  process.exit(2);
}
const missing = checkSharedFiles("tiktoken_reference_test", ["tiktoken.model", "tokenizer_config.json"], modelDir);
if (missing) skip("tiktoken_reference_test", missing);
const { Tiktoken } = createRequire(path.join(path.resolve(nodeModules), "x.js"))("tiktoken");

// The pattern, verbatim from tokenization_kimi.py (spec §6.2).
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

const ranksText = fs.readFileSync(path.join(modelDir, "tiktoken.model"), "utf8");
const nRanks = ranksText.split("\n").filter((l) => l.length > 0).length;
const config = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
const specials = {};
for (let id = nRanks; id < nRanks + 256; id++) {
  const entry = (config.added_tokens_decoder || {})[String(id)];
  specials[entry ? entry.content : `<|reserved_token_${id}|>`] = id;
}
const enc = new Tiktoken(ranksText, specials, PATTERN);

// tokenization_kimi.py: Python str.isspace() (29 code points) and its two cuts, counted in code points.
const isspace = (cp) =>
  (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp === 0x85 || cp === 0xa0 || cp === 0x1680 ||
  (cp >= 0x2000 && cp <= 0x200a) || cp === 0x2028 || cp === 0x2029 || cp === 0x202f || cp === 0x205f ||
  cp === 0x3000;
function* splitRuns(chars, maxRun) {
  let runLen = 0, runIsSpace = chars.length > 0 ? isspace(chars[0].codePointAt(0)) : false, start = 0;
  for (let i = 0; i < chars.length; i++) {
    const sp = isspace(chars[i].codePointAt(0));
    if (runIsSpace !== sp) { runLen = 1; runIsSpace = sp; }
    else if (++runLen > maxRun) { yield chars.slice(start, i).join(""); start = i; runLen = 1; }
  }
  yield chars.slice(start).join("");
}
function referenceEncode(text, allowSpecial) {
  const chars = Array.from(text);
  const ids = [];
  for (let i = 0; i < chars.length; i += 400000) {
    for (const piece of splitRuns(chars.slice(i, i + 400000), 25000)) {
      const part = allowSpecial ? enc.encode(piece, "all", []) : enc.encode_ordinary(piece);
      for (const id of part) ids.push(id);
    }
  }
  return ids;
}

// mulberry32: a small seeded generator, so a failing run can be replayed from its printed seed.
function rng32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng32(testSeed("tiktoken_reference_test"));
const below = (n) => Math.floor(rand() * n);

// Pools weight the classes the pattern distinguishes; one draw in four is uniform over all scalar values.
const POOLS = [
  [0x20, 0x7e], [0x41, 0x5a], [0x61, 0x7a], [0x30, 0x39], [0x09, 0x0d], [0x1c, 0x20], [0x27, 0x27],
  [0x17f, 0x17f], [0x85, 0x85], [0xa0, 0xa0], [0x2000, 0x200b], [0x2028, 0x2029], [0x3000, 0x303f],
  [0x300, 0x36f], [0x483, 0x489], [0x1ab0, 0x1aff], [0x20d0, 0x20ff], [0xe31, 0xe3a], [0x93c, 0x94d],
  [0x4e00, 0x9fff], [0x3400, 0x4dbf], [0x20000, 0x2a6df], [0x2ebf0, 0x2ee5d], [0x2e80, 0x2fdf], [0x16fe0, 0x16fff],
  [0x3040, 0x30ff], [0xac00, 0xd7a3], [0x1100, 0x11ff], [0x600, 0x6ff], [0x400, 0x4ff], [0x370, 0x3ff],
  [0x1c80, 0x1c8f], [0xa720, 0xa7ff], [0x10d40, 0x10d8f], [0x11380, 0x113ff], [0x16100, 0x1613f],
  [0x16d40, 0x16d7f], [0x1e5d0, 0x1e5ff], [0x1f300, 0x1faff], [0xfe00, 0xfe0f], [0x200d, 0x200d],
  [0xff10, 0xff5a], [0x2150, 0x218f], [0x1d400, 0x1d7ff], [0x1f1e6, 0x1f1ff], [0x10000, 0x1ffff],
];
const WORDS = ["'s", "'S", "'re", "'VE", "'ll", "'D", "'m", "'t", "'ſ", "<|im_end|>", "[BOS]", "[EOS]",
  "<|reserved_token_163700|>", "<|im_user|>", "<think>", "<|im_end", "[PAD", "\r\n", " \n", "don't", "HTTPServer"];
function randomCodePoint() {
  if (below(4) === 0) {
    const cp = below(0x110000 - 0x800);
    return cp >= 0xd800 ? cp + 0x800 : cp;  // skip surrogates
  }
  const [lo, hi] = POOLS[below(POOLS.length)];
  return lo + below(hi - lo + 1);
}
function randomString() {
  const n = below(below(8) === 0 ? 200 : 40);
  let s = "";
  for (let i = 0; i < n; i++) s += below(12) === 0 ? WORDS[below(WORDS.length)] : String.fromCodePoint(randomCodePoint());
  return s;
}

// Runs the driver over all requests at once (JSON lines both ways).
function runDriver(requests) {
  return new Promise((resolve, reject) => {
    const child = spawn(driver, [modelDir], { stdio: ["pipe", "pipe", "inherit"] });
    const chunks = [];
    child.stdout.on("data", (d) => chunks.push(d));
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`driver exited with ${code}`));
      resolve(Buffer.concat(chunks).toString("utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l)));
    });
    child.stdin.end(requests.map((r) => JSON.stringify(r)).join("\n") + "\n");
  });
}
function readCorpus() {
  return new Promise((resolve, reject) => {
    const child = spawn(driver, ["--corpus"], { stdio: ["ignore", "pipe", "inherit"] });
    const chunks = [];
    child.stdout.on("data", (d) => chunks.push(d));
    child.on("close", (code) => (code === 0 ? resolve(Buffer.concat(chunks).toString("utf8")) : reject(new Error(`corpus: ${code}`))));
  });
}

const corpus = await readCorpus();
// Chunking-guard cases. Long runs of one pattern piece are slow in fancy-regex (quadratic backtracking), so
// the long isspace / non-space runs are built from short pieces, placed so an off-by-one cut changes ids.
const texts = [
  { name: "corpus", text: corpus, both: true },
  { name: "a*30000", text: "a".repeat(30000) },
  { name: "isspace run of spaces and U+001C", text: "   \x1c\x1c".repeat(6000) + "x" },
  { name: "cut inside [BOS]", text: "ab.c".repeat(6249) + "ab" + "[BOS]" + "b".repeat(10), both: true },
  { name: "[BOS] before the cut", text: "ab.c".repeat(6247) + "ab" + "[BOS]" + "b".repeat(10), both: true },
  { name: "cut after [BOS]", text: "ab.c".repeat(5000) + "[BOS]" + "cd.e".repeat(2500), both: true },
  { name: "isspace-only run", text: "\x1c".repeat(26000) + " a" },
  { name: "newline run", text: "\x1c\n\n".repeat(8400) + "x\r\n" },
  { name: "han and latin run", text: "中文字abc".repeat(4200) },
  { name: "400k cut inside a word", text: "abcdefgh ".repeat(44500) },
];
const nRandom = 10000;
for (let i = 0; i < nRandom; i++) texts.push({ name: `random #${i}`, text: randomString(), both: true });

const requests = [];
const requestText = [];
for (const t of texts) {
  for (const allow of t.both ? [false, true] : [false]) {
    requests.push({ text: t.text, allow_special: allow });
    requestText.push(t.name);
  }
}
const t0 = Date.now();
const responses = await runDriver(requests);
const t1 = Date.now();
if (responses.length !== requests.length) throw new Error(`driver answered ${responses.length}/${requests.length}`);

let failures = 0, specialSeen = 0;
const show = (s) => JSON.stringify(s.length > 200 ? s.slice(0, 200) + "…" : s);
for (let i = 0; i < requests.length; i++) {
  const { text, allow_special } = requests[i];
  const name = requestText[i];
  const want = referenceEncode(text, allow_special);
  const got = responses[i].ids;
  let diff = want.length === got.length ? -1 : Math.min(want.length, got.length);
  for (let k = 0; k < Math.min(want.length, got.length); k++) if (want[k] !== got[k]) { diff = k; break; }
  if (diff >= 0) {
    if (++failures <= 10) {
      console.log(`MISMATCH ${name} allow_special=${allow_special} text=${show(text)}`);
      console.log(`  first difference at id #${diff}: tiktoken ${JSON.stringify(want.slice(diff, diff + 8))} rill ${JSON.stringify(got.slice(diff, diff + 8))}`);
    }
  }
  if (responses[i].decoded !== text) {
    if (++failures <= 10) console.log(`ROUNDTRIP ${name} allow_special=${allow_special} text=${show(text)} decoded=${show(responses[i].decoded)}`);
  }
  const hasSpecial = got.some((id) => id >= nRanks);
  if (hasSpecial && !allow_special) {
    if (++failures <= 10) console.log(`SPECIAL ${name}: a special id with special tokens disallowed`);
  }
  if (hasSpecial) specialSeen++;
}
// The comparison must have exercised special tokens, or the allow_special half proves nothing.
if (specialSeen < 100) { console.log(`only ${specialSeen} texts produced special ids`); failures++; }
console.log(`tiktoken_reference_test: ${requests.length} encodes (${(corpus.length / 1e6).toFixed(2)}M-char corpus + ${nRandom} random strings + chunking cases, both special modes), rill ${t1 - t0} ms, ${failures} failures`);
console.log(`${requests.length - Math.min(failures, requests.length)} passed, ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
