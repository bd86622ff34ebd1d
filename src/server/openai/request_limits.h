// What one request may ask for, beyond the body size (--max-request-bytes): each bound keeps one request
// from taking a share of the server that other users then wait for (issue #14). OpenAI's documented limits
// where it has them; otherwise bounds far above what a client sends, named in the 400 (a count or a string
// length) or 413 (a schema's serialised size) with the field at fault.
#pragma once

#include <cstddef>

namespace rill::server {

// Engine sequences one request may enqueue: completions' prompts x n (chat: n). OpenAI caps n at 128; the
// engine's queue holds 1024 (EngineOptions::max_queue), and 1023 sequences from one request pushed every
// other user into 429s. ParseLimits::max_n (16) caps n itself.
inline constexpr int kMaxSequencesPerRequest = 128;

// stop: strings per request (vLLM has no cap; OpenAI allows 4) and bytes per string. Every generated token
// is checked against each stop string's tail, so their total length is work per token.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 1024;

// stop_token_ids: the set the engine checks every sampled token against.
inline constexpr size_t kMaxStopTokenIds = 1024;
// allowed_token_ids: more ids than any served vocabulary has (Kimi: 163,840) repeat themselves.
inline constexpr size_t kMaxAllowedTokenIds = 262144;

// tools: OpenAI's "a max of 128 functions are supported". Each tool's schema is rendered into the prompt
// and, with tool_choice required / named, compiled into a grammar; OpenAI bounds a strict schema's names
// and enum strings to 120,000 characters in all, which these byte counts (compact JSON) leave room for.
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxToolSchemaBytes = 128 * 1024;  // one tool's function.parameters
inline constexpr size_t kMaxToolsBytes = 512 * 1024;       // all of `tools`, descriptions included
// response_format.json_schema.schema: compiled into a grammar for every token of the response.
inline constexpr size_t kMaxResponseSchemaBytes = 128 * 1024;

// Not bounded here: messages and content parts. Their cost (validation, rendering, tokenizing) is linear in
// their bytes, so --max-request-bytes bounds it, and the rendered prompt must fit max_model_len.

}  // namespace rill::server
