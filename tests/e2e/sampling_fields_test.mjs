// vLLM's sampling and output fields (issue #13) and OpenAI's streaming usage against a live `rill serve` on
// the tiny model, through the official `openai` client. What each check compares against:
//  - skip_special_tokens: the special tokens are read from the checkpoint's tokenizer_config.json (added
//    tokens flagged special, and the control block's <|reserved_token_N|>); the default text is the
//    skip_special_tokens=false text with those names removed, and a stop string never matches inside one;
//  - stop + min_tokens: the unstopped greedy text cut by hand with vLLM's rule (a stop string counts only
//    when it ends in the text of a token after the first min_tokens); include_stop_str_in_output keeps it;
//  - min_tokens + stop_token_ids: the id (a reserved token, whose name spells it) is not sampled before
//    min_tokens, and ends the request at once without min_tokens;
//  - ignore_eos on chat: the content equals /v1/completions on the same prompt ids (the template rendered by
//    /tokenize), streamed and not, past the end-of-message token, up to max_tokens;
//  - allowed_token_ids: every generated token is the /detokenize text of an allowed id;
//  - prompt_logprobs, bad allowed_token_ids, continuous_usage_stats, chat echo: 400s naming the field;
//  - streaming usage, chat and completions, on the raw SSE frames: OpenAI's rule (`usage: null` on every
//    chunk and one `choices: []` usage chunk with include_usage; no usage key without; none in a choice).
import fs from "fs";
import path from "path";

import { assert, assertEq, checkChatCompletion, checkCompletion, checkUsage, collectChatStream, MODEL_DIR, OpenAIModule, rawSse, run, startServer } from "./lib/harness.mjs";

const config = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, "tokenizer_config.json"), "utf8"));
const specialNames = Object.values(config.added_tokens_decoder).filter((t) => t.special).map((t) => t.content);
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const specialPattern = [...specialNames.map(escape), "<\\|reserved_token_\\d+\\|>"].join("|");
const isSpecial = (token) => new RegExp(`^(?:${specialPattern})$`).test(token);
const stripSpecials = (text) => text.replace(new RegExp(specialPattern, "g"), "");
const hasSpecial = (text) => new RegExp(specialPattern).test(text);

// vLLM's stop rule on a token stream: after each token from the (min_tokens + 1)-th on, an occurrence of a
// stop string that ends in that token's text cuts the text before it. Returns {text, stopped}.
function cutByStops(pieces, stops, minTokens) {
  let prefix = pieces.slice(0, minTokens).join("");
  for (let k = minTokens; k < pieces.length; ++k) {
    const before = prefix.length;
    prefix += pieces[k];
    let cut = -1;
    for (const s of stops)
      for (let at = prefix.indexOf(s); at >= 0; at = prefix.indexOf(s, at + 1))
        if (at + s.length > before && (cut < 0 || at < cut)) cut = at;
    if (cut >= 0) return { text: prefix.slice(0, cut), stopped: true };
  }
  return { text: prefix, stopped: false };
}

await run("e2e_sampling_fields", async (track) => {
  const server = track(await startServer());
  const client = server.client();
  const prompt = "Licensed under the Apache License";

  // skip_special_tokens (vLLM's default true): the tiny model's random weights write many control-block tokens.
  const kept = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, logprobs: 0, skip_special_tokens: false });
  checkCompletion(kept);
  const tokens = kept.choices[0].logprobs.tokens;
  assert(tokens.some(isSpecial), "the greedy output holds special tokens (else this test proves nothing): " + JSON.stringify(tokens));
  assertEq(kept.choices[0].text, tokens.join(""), "skip_special_tokens false: the text keeps every token's name");
  const plain = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, logprobs: 0 });
  const text = plain.choices[0].text;
  assertEq(text, stripSpecials(kept.choices[0].text), "default: the text without the special tokens' names");
  assertEq(plain.choices[0].logprobs.tokens, tokens, "the same tokens either way");
  assertEq(plain.usage.completion_tokens, 24, "special tokens still count as completion tokens");
  const pieces = tokens.map((t) => (isSpecial(t) ? "" : t));  // each token's text as the client sees it
  assertEq(pieces.join(""), text, "per-token text adds up to the text");
  // A stop string cannot match inside a special token's name.
  const unstopped = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, stop: ["reserved", "token_"] });
  assert(!/reserved|token_/.test(text), "the visible text has no 'reserved'");
  assertEq(unstopped.choices[0].text, text, "stop strings do not match inside special-token names");
  assertEq(unstopped.choices[0].finish_reason, "length", "so nothing stopped it");
  // Chat too, streamed and not.
  const messages = [{ role: "user", content: "You work about" }];
  const chatKept = await client.chat.completions.create({ messages, max_tokens: 48, temperature: 0, skip_special_tokens: false });
  assert(hasSpecial(chatKept.choices[0].message.content ?? ""), "chat, skip_special_tokens false: names in content");
  const chat = await client.chat.completions.create({ messages, max_tokens: 48, temperature: 0 });
  checkChatCompletion(chat);
  assert(!hasSpecial(chat.choices[0].message.content ?? ""), "chat content has no special token: " + chat.choices[0].message.content);
  assertEq(chat.choices[0].message.content, stripSpecials(chatKept.choices[0].message.content), "chat: the content minus the names");
  const chatStreamed = await collectChatStream(await client.chat.completions.create({ messages, max_tokens: 48, temperature: 0, stream: true }));
  assertEq(chatStreamed.choices[0].content, chat.choices[0].message.content, "chat: streamed == not streamed");

  // stop + min_tokens: a stop string inside the first min_tokens tokens is text (it used to be cut out while
  // generation went on); one ending later stops. The stop string: 3 characters of the first min_tokens
  // tokens' text, chosen to occur again later when some do.
  const minTokens = 4;
  const early = pieces.slice(0, minTokens).join("").length;
  let stop = null;
  for (let at = 0; at + 3 <= early && !stop; ++at) if (text.indexOf(text.slice(at, at + 3), early) >= 0) stop = text.slice(at, at + 3);
  stop ??= text.slice(1, 4);
  const want = cutByStops(pieces, [stop], minTokens);
  const cut = cutByStops(pieces, [stop], 0);
  assert(cut.stopped && cut.text.length < early, `'${stop}' occurs in the first ${minTokens} tokens' text`);
  console.log(`stop ${JSON.stringify(stop)}: cut at ${cut.text.length} without min_tokens, ` +
    `${want.stopped ? "at " + want.text.length : "not at all"} with min_tokens ${minTokens} (text of ${text.length})`);
  const withMin = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, stop: [stop], min_tokens: minTokens });
  assertEq(withMin.choices[0].text, want.text, `stop '${stop}' with min_tokens ${minTokens}: vLLM's cut`);
  assertEq(withMin.choices[0].finish_reason, want.stopped ? "stop" : "length", "finish_reason");
  const noMin = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, stop: [stop] });
  assertEq(noMin.choices[0].text, cut.text, "without min_tokens the first occurrence stops");
  let streamedText = "";
  for await (const ch of await client.completions.create({ prompt, max_tokens: 24, temperature: 0, stop: [stop], min_tokens: minTokens, stream: true }))
    streamedText += ch.choices[0]?.text ?? "";
  assertEq(streamedText, want.text, "streamed the same");
  // include_stop_str_in_output keeps the stop string.
  const stop2 = text.slice(6, 10);
  const incl = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, stop: [stop2], include_stop_str_in_output: true });
  assertEq(incl.choices[0].text, text.slice(0, text.indexOf(stop2) + stop2.length), "include_stop_str_in_output: text up to the stop string's end");
  assertEq(incl.choices[0].finish_reason, "stop", "finish_reason stop");

  // min_tokens + stop_token_ids: the id of a special token the greedy output holds (its name spells the id).
  const k = tokens.findIndex((t) => /^<\|reserved_token_\d+\|>$/.test(t));
  const stopId = Number(/\d+/.exec(tokens[k])[0]);
  const stopped = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, logprobs: 0, stop_token_ids: [stopId] });
  assertEq(stopped.usage.completion_tokens, k + 1, `stop_token_ids [${stopId}]: ends at its first occurrence`);
  assertEq(stopped.choices[0].finish_reason, "stop", "finish_reason stop");
  const held = await client.completions.create({ prompt, max_tokens: 24, temperature: 0, logprobs: 0, stop_token_ids: [stopId], min_tokens: k + 3 });
  const heldTokens = held.choices[0].logprobs.tokens;
  assertEq(heldTokens.slice(0, k), tokens.slice(0, k), "greedy as before up to the stop id");
  assert(!heldTokens.slice(0, k + 3).includes(tokens[k]), `the stop id is not sampled before min_tokens: ${JSON.stringify(heldTokens)}`);
  assert(held.usage.completion_tokens > k + 3, "min_tokens tokens before any stop");

  // ignore_eos on chat: the whole generated text reaches the client, past the end-of-message token.
  const rendered = await server.fetchJson("/tokenize", { messages });
  const raw = await client.completions.create({ prompt: rendered.json.tokens, max_tokens: 160, temperature: 0, ignore_eos: true, logprobs: 0 });
  const rawTokens = raw.choices[0].logprobs.tokens;
  const eos = rawTokens.findIndex((t) => t === "<|im_end|>");
  assert(eos >= 0 && eos < 150, "the greedy output has an end-of-message token well before max_tokens: " + eos);
  assert(!rawTokens.includes("<|tool_calls_section_begin|>") && rawTokens[0] !== "<think>", "no markup the chat parser would route");
  const whole = await client.chat.completions.create({ messages, max_tokens: 160, temperature: 0, ignore_eos: true });
  checkChatCompletion(whole);
  assertEq(whole.choices[0].message.content, raw.choices[0].text, "ignore_eos: chat content == the completion of the same prompt");
  assertEq(whole.choices[0].finish_reason, "length", "runs to max_tokens");
  assertEq(whole.usage.completion_tokens, 160, "160 tokens");
  const streamed = await collectChatStream(await client.chat.completions.create({ messages, max_tokens: 160, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true } }), 1, true);
  assertEq(streamed.choices[0].content, raw.choices[0].text, "ignore_eos: the stream keeps emitting after the end of the message");
  assertEq(streamed.usage.completion_tokens, 160, "streamed: 160 tokens");

  // allowed_token_ids: sampling keeps to them (greedy and sampled).
  const allowed = [300, 301, 500, 777, 1026];
  const texts = await Promise.all(allowed.map(async (id) => (await server.fetchJson("/detokenize", { tokens: [id] })).json.prompt));
  for (const temperature of [0, 1]) {
    const r = await client.completions.create({ prompt, max_tokens: 16, temperature, seed: 3, logprobs: 0, allowed_token_ids: allowed, ignore_eos: true, skip_special_tokens: false });
    for (const t of r.choices[0].logprobs.tokens) assert(texts.includes(t), `allowed_token_ids: '${t}' is one of ${JSON.stringify(texts)}`);
  }

  // Fields rill cannot honour are 400s naming them (they used to be accepted and ignored).
  for (const [what, pathname, body, param] of [
    ["prompt_logprobs", "/v1/completions", { prompt, prompt_logprobs: 1 }, "prompt_logprobs"],
    ["prompt_logprobs on chat", "/v1/chat/completions", { messages, prompt_logprobs: 0 }, "prompt_logprobs"],
    ["allowed_token_ids empty", "/v1/completions", { prompt, allowed_token_ids: [] }, "allowed_token_ids"],
    ["allowed_token_ids outside the vocabulary", "/v1/completions", { prompt, allowed_token_ids: [5, 1280] }, "allowed_token_ids"],
    ["continuous_usage_stats", "/v1/chat/completions", { messages, stream: true, stream_options: { continuous_usage_stats: true } }, "stream_options.continuous_usage_stats"],
    ["chat echo", "/v1/chat/completions", { messages, echo: true }, "echo"]]) {
    const r = await server.fetchJson(pathname, { max_tokens: 4, ...body });
    assertEq(r.status, 400, what);
    assertEq(r.json?.error?.param, param, `${what}: the 400 names the field (${r.text})`);
  }
  let sdkError = null;
  try { await client.completions.create({ prompt, max_tokens: 4, prompt_logprobs: 2 }); } catch (e) { sdkError = e; }
  assert(sdkError instanceof OpenAIModule.BadRequestError, "the SDK sees a BadRequestError: " + sdkError);

  // Streaming usage on the wire, both endpoints: OpenAI's rule.
  for (const [pathname, body] of [["/v1/chat/completions", { messages }], ["/v1/completions", { prompt }]]) {
    for (const includeUsage of [false, true]) {
      const req = { ...body, max_tokens: 6, temperature: 0, stream: true, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) };
      const frames = (await rawSse(server, pathname, req)).slice(0, -1).map((f) => JSON.parse(f));
      const where = `${pathname} include_usage ${includeUsage}`;
      for (const f of frames) for (const c of f.choices) assert(!("usage" in c), `${where}: no usage inside a choice: ${JSON.stringify(f)}`);
      const body0 = frames.slice(0, includeUsage ? -1 : frames.length);
      assert(body0.every((f) => f.choices.length === 1), `${where}: one choice per chunk`);
      if (includeUsage) {
        assert(body0.every((f) => "usage" in f && f.usage === null), `${where}: usage null on every chunk`);
        const last = frames[frames.length - 1];
        assertEq(last.choices, [], `${where}: the last chunk has choices []`);
        checkUsage(last.usage, where);
        assertEq(last.usage.completion_tokens, 6, `${where}: completion_tokens`);
      } else {
        assert(frames.every((f) => !("usage" in f)), `${where}: no usage key without include_usage`);
      }
    }
  }
});
