// The request fields chat and completions share: sampling knobs (OpenAI + vLLM extras), stop conditions,
// n, stream and stream_options. Ranges follow vLLM's protocol checks; the engine's own
// SamplingParams::validate runs again at submit.
#pragma once

#include <cstdint>
#include <optional>

#include "engine/engine.h"
#include "server/openai/fields.h"

namespace rill::server {

struct ParseLimits {
  int32_t vocab_size = 0;  // token ids must be below it (0: unchecked)
  int max_n = 16;          // choices per request
  int max_logprobs = 20;   // top_logprobs / completions logprobs
};

struct SamplingRequest {
  engine::SamplingParams params;      // max_tokens and logprobs are set by the endpoint
  std::optional<int64_t> max_tokens;  // as requested (>= 1)
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// temperature [0, 2], top_p (0, 1], top_k >= -1 (-1 and 0: all), min_p [0, 1], presence/frequency [-2, 2],
// repetition_penalty > 0, seed (any integer), stop (string or list of non-empty strings), stop_token_ids,
// min_tokens >= 0, ignore_eos, include_stop_str_in_output, skip_special_tokens, allowed_token_ids (non-empty
// ids in the vocabulary; the counts and stop string lengths of request_limits.h), prompt_logprobs
// (unsupported: any value is a 400), n [1, max_n], best_of (== n), use_beam_search (false), logit_bias
// (empty), stream, stream_options (only with stream; continuous_usage_stats unsupported), user.
void read_sampling_fields(FieldReader& r, const ParseLimits& limits, SamplingRequest* out);

}  // namespace rill::server
