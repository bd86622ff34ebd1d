// POST /v1/completions: prompt forms (string | list of strings | token ids | list of token-id lists), echo,
// integer logprobs, max_tokens (default 16) and the shared sampling fields.
#pragma once

#include <string>
#include <vector>

#include "server/openai/sampling_request.h"

namespace rill::server {

struct CompletionRequest {
  std::string model;  // "" when absent
  SamplingRequest sampling;
  // One entry per prompt: either text (tokenized by the route) or ids, never both.
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompt_ids;
  bool echo = false;
  int logprobs = -1;  // -1: none
  size_t n_prompts() const { return prompt_texts.empty() ? prompt_ids.size() : prompt_texts.size(); }
};

// Checks (400 naming the field): prompt present, of one of the four forms, non-empty, ids inside the
// vocabulary; prompts x n at most kMaxSequencesPerRequest (param "n", or "prompt" when n is 1); suffix
// (unsupported unless empty); echo (not with logprobs: rill has no prompt logprobs); logprobs in [0,
// max_logprobs]; max_tokens >= 1; the shared sampling fields.
ApiResult<CompletionRequest> parse_completion_request(const Json& body, const ParseLimits& limits);

}  // namespace rill::server
