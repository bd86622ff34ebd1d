#include "server/openai/completion_request.h"

#include "server/openai/request_limits.h"

namespace rill::server {
namespace {

std::optional<ApiError> read_ids(const Json& list, const std::string& path, int32_t vocab_size,
                                 std::vector<int32_t>* out) {
  if (list.empty()) return bad_request("prompt", "{}: must not be empty", path);
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& id = list[i];
    const int64_t hi = vocab_size > 0 ? vocab_size - 1 : INT32_MAX;
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > hi)
      return bad_request("prompt", "{}[{}]: must be a token id in [0, {}], got {}", path, i, hi, id.dump());
    out->push_back(int32_t(id.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> read_prompt(const Json& prompt, int32_t vocab_size, CompletionRequest* out) {
  if (prompt.is_string()) {
    if (prompt.get<std::string>().empty()) return bad_request("prompt", "prompt: must not be empty");
    out->prompt_texts.push_back(prompt.get<std::string>());
    return std::nullopt;
  }
  if (!prompt.is_array())
    return bad_request("prompt",
                       "prompt: must be a string, a list of strings, a list of token ids or a list of "
                       "token-id lists, got {}",
                       json_type_phrase(prompt));
  if (prompt.empty()) return bad_request("prompt", "prompt: must not be empty");
  if (prompt[0].is_number()) {
    out->prompt_ids.emplace_back();
    return read_ids(prompt, "prompt", vocab_size, &out->prompt_ids.back());
  }
  const bool texts = prompt[0].is_string();
  for (size_t i = 0; i < prompt.size(); ++i) {
    const Json& p = prompt[i];
    const std::string path = fmt::format("prompt[{}]", i);
    if (texts) {
      if (!p.is_string())
        return bad_request("prompt", "{}: must be a string like prompt[0], got {}", path,
                           json_type_phrase(p));
      if (p.get<std::string>().empty()) return bad_request("prompt", "{}: must not be empty", path);
      out->prompt_texts.push_back(p.get<std::string>());
    } else {
      if (!p.is_array())
        return bad_request("prompt", "{}: must be a list of token ids, got {}", path, json_type_phrase(p));
      out->prompt_ids.emplace_back();
      RILL_API_TRY(read_ids(p, path, vocab_size, &out->prompt_ids.back()));
    }
  }
  return std::nullopt;
}

}  // namespace

ApiResult<CompletionRequest> parse_completion_request(const Json& body, const ParseLimits& limits) {
  if (!body.is_object()) return bad_request("", "the request body must be a JSON object");
  CompletionRequest out;
  FieldReader r(body);
  if (auto model = r.string("model")) out.model = *model;
  const Json* prompt = r.any("prompt");
  if (!prompt) return bad_request("prompt", "prompt: is required");
  RILL_API_TRY(read_prompt(*prompt, limits.vocab_size, &out));
  if (auto suffix = r.string("suffix"); suffix && !suffix->empty()) r.fail("suffix", "is not supported");
  read_sampling_fields(r, limits, &out.sampling);
  if (r.ok() && out.n_prompts() * size_t(out.sampling.n) > size_t(kMaxSequencesPerRequest))
    r.fail(out.sampling.n > 1 ? "n" : "prompt",
           "{} prompts x n {} = {} sequences: at most {} per request (send more requests)", out.n_prompts(),
           out.sampling.n, out.n_prompts() * size_t(out.sampling.n), kMaxSequencesPerRequest);
  out.sampling.max_tokens = 16;  // OpenAI's default for completions
  if (auto v = r.integer("max_tokens", 1, INT32_MAX)) out.sampling.max_tokens = *v;
  if (auto v = r.boolean("echo")) out.echo = *v;
  if (auto v = r.integer("logprobs", 0, limits.max_logprobs)) out.logprobs = int(*v);
  if (out.echo && out.logprobs >= 0)
    r.fail("echo", "echo together with logprobs is not supported (no prompt logprobs)");
  out.sampling.params.logprobs = out.logprobs;
  if (!r.ok()) return *r.error();
  return out;
}

}  // namespace rill::server
