// OpenAI response objects and their SSE framing (serving.md §1.3, with the stricter Kimi stream spec's frame
// shapes): `data: <json>\n\n` frames, one choice per chunk, null keys dropped from deltas. Usage in streams
// follows OpenAI on both endpoints and for both model families (not the Kimi spec's per-choice usage): only
// with stream_options.include_usage, as `"usage": null` on every chunk and one last chunk with `choices: []`
// and the usage, before `data: [DONE]`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai/errors.h"
#include "text/parsers/output_parser.h"

namespace rill::server {

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0, reasoning_tokens = 0;
  Usage& operator+=(const Usage& o);
};
// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details{cached_tokens},
//  completion_tokens_details{reasoning_tokens}}
Json usage_json(const Usage& usage);

// One generated token's logprob, spelled out by the caller: `token` is its text (U+FFFD for a partial UTF-8
// sequence), `bytes` its raw bytes.
struct LogprobEntry {
  std::string token, bytes;
  float logprob = 0.0f;
  std::vector<LogprobEntry> top;  // best first
};

// What stays constant across one response's chunks.
struct ResponseHeader {
  std::string id;       // chatcmpl-<24 hex> / cmpl-<24 hex>
  int64_t created = 0;  // unix seconds
  std::string model;
};

// `prefix` + 24 random hex digits.
std::string make_response_id(std::string_view prefix);
int64_t unix_now();

// ---- chat ----------------------------------------------------------------------------------------------
// {"content": [{token, logprob, bytes, top_logprobs: [...]}]}
Json chat_logprobs_json(const std::vector<LogprobEntry>& entries);
// The delta of one parser increment: content | reasoning_content | tool_calls (exactly one key).
Json chat_delta_json(const text::OutputDelta& delta);
// {"index", "delta", "finish_reason", ["logprobs"]}; finish_reason "" is sent as null; a null `logprobs` is
// left out.
Json chat_chunk_choice(int index, Json delta, std::string_view finish_reason, Json logprobs = nullptr);
// {"id", "object": "chat.completion.chunk", "created", "model", "choices": [choice]} (+ "usage": null when
// the client asked for a usage chunk, as OpenAI sends it on every other chunk).
Json chat_chunk(const ResponseHeader& header, Json choice, bool usage_null);
// The final usage chunk: "choices": [] and the usage.
Json chat_usage_chunk(const ResponseHeader& header, const Usage& usage);

struct ChatChoice {
  int index = 0;
  text::ParseResult parsed;
  std::string finish_reason;
  Json logprobs = nullptr;  // chat_logprobs_json(...) when requested
};
// {"id", "object": "chat.completion", "created", "model", "choices": [{index, message, logprobs,
// finish_reason}], "usage"}; message = {role, content (null when only tool calls), [reasoning_content],
// [tool_calls]}.
Json chat_completion_json(const ResponseHeader& header, const std::vector<ChatChoice>& choices,
                          const Usage& usage);

// ---- completions ---------------------------------------------------------------------------------------
// {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}, offsets from `offset`.
Json completion_logprobs_json(const std::vector<LogprobEntry>& entries, int64_t offset);
Json completion_choice_json(int index, std::string_view text, std::string_view finish_reason, Json logprobs);
// object "text_completion", the whole response: `usage` null leaves the key out.
Json completion_json(const ResponseHeader& header, Json choices, const Usage* usage);
// A stream chunk: {"id", "object": "text_completion", "created", "model", "choices": [choice]} (+ "usage":
// null when the client asked for a usage chunk).
Json completion_chunk(const ResponseHeader& header, Json choice, bool usage_null);
// The final usage chunk: "choices": [] and the usage.
Json completion_usage_chunk(const ResponseHeader& header, const Usage& usage);

// ---- SSE -----------------------------------------------------------------------------------------------
// JSON text with invalid UTF-8 replaced (never throws).
std::string dump_json(const Json& value);
std::string sse_data(const Json& value);  // "data: <json>\n\n"
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace rill::server
