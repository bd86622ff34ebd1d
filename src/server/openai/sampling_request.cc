#include "server/openai/sampling_request.h"

#include "server/openai/request_limits.h"

namespace rill::server {
namespace {

void read_stop(FieldReader& r, engine::SamplingParams* p) {
  const Json* stop = r.any("stop");
  if (!stop) return;
  auto too_long = [](const Json& s) { return s.get_ref<const std::string&>().size() > kMaxStopStringBytes; };
  if (stop->is_string()) {
    if (too_long(*stop))
      return r.fail("stop", "must be at most {} bytes long, got {}", kMaxStopStringBytes,
                    stop->get_ref<const std::string&>().size());
    if (!stop->get<std::string>().empty()) p->stop.push_back(stop->get<std::string>());
    return;
  }
  if (!stop->is_array())
    return r.fail("stop", "must be a string or a list of strings, got {}", json_type_phrase(*stop));
  if (stop->size() > kMaxStopStrings)
    return r.fail("stop", "at most {} stop strings, got {}", kMaxStopStrings, stop->size());
  for (size_t i = 0; i < stop->size(); ++i) {
    const Json& s = (*stop)[i];
    if (!s.is_string() || s.get<std::string>().empty())
      return r.fail("stop", "element {} must be a non-empty string, got {}", i, json_type_phrase(s));
    if (too_long(s))
      return r.fail("stop", "element {} must be at most {} bytes long, got {}", i, kMaxStopStringBytes,
                    s.get_ref<const std::string&>().size());
    p->stop.push_back(s.get<std::string>());
  }
}

// A list of at most `max_count` token ids inside the vocabulary (stop_token_ids, allowed_token_ids).
void read_token_ids(FieldReader& r, const char* key, int32_t vocab_size, size_t max_count,
                    std::vector<int32_t>* out) {
  const Json* ids = r.array(key);
  if (!ids) return;
  if (ids->size() > max_count) return r.fail(key, "at most {} token ids, got {}", max_count, ids->size());
  for (size_t i = 0; i < ids->size(); ++i) {
    const Json& id = (*ids)[i];
    const int64_t hi = vocab_size > 0 ? vocab_size - 1 : INT32_MAX;
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > hi)
      return r.fail(key, "element {} must be a token id in [0, {}]", i, hi);
    out->push_back(int32_t(id.get<int64_t>()));
  }
}

}  // namespace

void read_sampling_fields(FieldReader& r, const ParseLimits& limits, SamplingRequest* out) {
  engine::SamplingParams& p = out->params;
  if (auto v = r.number("temperature", {0.0, 2.0})) p.temperature = float(*v);
  if (auto v = r.number("top_p", {0.0, 1.0, true})) p.top_p = float(*v);
  if (auto v = r.integer("top_k", -1, INT32_MAX)) p.top_k = *v <= 0 ? 0 : int32_t(*v);
  if (auto v = r.number("min_p", {0.0, 1.0})) p.min_p = float(*v);
  if (auto v = r.number("presence_penalty", {-2.0, 2.0})) p.presence_penalty = float(*v);
  if (auto v = r.number("frequency_penalty", {-2.0, 2.0})) p.frequency_penalty = float(*v);
  if (const Json* v = r.any("repetition_penalty")) {
    if (!v->is_number() || !(v->get<double>() > 0.0) || !(v->get<double>() < 1e30))
      r.fail("repetition_penalty", "must be a number > 0, got {}", v->dump());
    else
      p.repetition_penalty = float(v->get<double>());
  }
  if (auto v = r.integer("seed", INT64_MIN, INT64_MAX)) p.seed = uint64_t(*v);
  read_stop(r, &p);
  read_token_ids(r, "stop_token_ids", limits.vocab_size, kMaxStopTokenIds, &p.stop_token_ids);
  if (auto v = r.integer("min_tokens", 0, INT32_MAX)) p.min_tokens = int32_t(*v);
  if (auto v = r.boolean("ignore_eos")) p.ignore_eos = *v;
  if (auto v = r.boolean("include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = r.boolean("skip_special_tokens")) p.skip_special_tokens = *v;
  if (const Json* ids = r.array("allowed_token_ids"); ids && ids->empty())
    r.fail("allowed_token_ids", "must not be empty");
  read_token_ids(r, "allowed_token_ids", limits.vocab_size, kMaxAllowedTokenIds, &p.allowed_token_ids);
  if (r.any("prompt_logprobs")) r.fail("prompt_logprobs", "is not supported");

  if (auto v = r.integer("n", 1, limits.max_n)) out->n = int(*v);
  if (auto v = r.integer("best_of", 1, limits.max_n); v && *v != out->n)
    r.fail("best_of", "must equal n ({}): rill returns every sampled choice, got {}", out->n, *v);
  if (auto v = r.boolean("use_beam_search"); v && *v)
    r.fail("use_beam_search", "beam search is not supported");
  if (const Json* bias = r.object("logit_bias"); bias && !bias->empty())
    r.fail("logit_bias", "is not supported");
  r.string("user");

  if (auto v = r.boolean("stream")) out->stream = *v;
  if (const Json* so = r.object("stream_options")) {
    if (!out->stream) {
      r.fail("stream_options", "is only allowed when stream is true");
    } else {
      FieldReader options(*so, "stream_options.");
      if (auto v = options.boolean("include_usage")) out->include_usage = *v;
      if (auto v = options.boolean("continuous_usage_stats"); v && *v)
        options.fail("continuous_usage_stats", "is not supported (usage comes in the last chunk)");
      if (options.error()) r.fail(*options.error());
    }
  }
}

}  // namespace rill::server
