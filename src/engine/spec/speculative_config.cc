#include "engine/spec/speculative_config.h"

#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "engine/spec/ngram_drafter.h"

namespace rill::engine::spec {
namespace {

constexpr const char* kWhere = "--speculative-config";

Result<int> int_key(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer())
    return invalid_argument("{}: \"{}\" must be an integer (got {})", kWhere, key, v.dump());
  const int64_t n = v.get<int64_t>();
  if (n < INT32_MIN || n > INT32_MAX)
    return invalid_argument("{}: \"{}\" {} is out of range", kWhere, key, n);
  return int(n);
}

Result<double> number_key(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) return invalid_argument("{}: \"{}\" must be a number (got {})", kWhere, key, v.dump());
  return v.get<double>();
}

constexpr const char* kNgramKeys[] = {"prompt_lookup_min", "prompt_lookup_max"};
constexpr const char* kSuffixKeys[] = {"suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
                                       "suffix_decoding_min_token_prob", "suffix_decoding_max_spec_factor"};

}  // namespace

Status SpeculativeConfig::validate() const {
  if (!enabled()) return {};
  // MTP drafts from the checkpoint's own multi-token-prediction layers (config.json num_nextn_predict_layers,
  // ModelConfig::n_mtp_layers): no released Kimi Linear or K3 checkpoint has any, and rill loads none.
  if (method == "mtp")
    return invalid_argument(
        "{}: method \"mtp\" is not built yet: it needs MTP layers in the checkpoint (config.json "
        "\"num_nextn_predict_layers\" > 0), which no released Kimi checkpoint has and rill does not load; use "
        "\"ngram\", \"suffix\" or \"draft_model\"",
        kWhere);
  if (method != "ngram" && method != "suffix" && method != "draft_model")
    return invalid_argument("{}: unknown method \"{}\" (\"ngram\", \"suffix\" or \"draft_model\")", kWhere, method);
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpeculativeTokens)
    return invalid_argument("{}: \"num_speculative_tokens\" {} must be in [1, {}]", kWhere,
                            num_speculative_tokens, kMaxSpeculativeTokens);
  if (method == "suffix") return SuffixDrafter::create(suffix).status();
  if (method == "draft_model") {
    if (draft_model.empty())
      return invalid_argument("{}: method \"draft_model\" needs \"model\" (a checkpoint directory)", kWhere);
    return {};
  }
  if (prompt_lookup_min < 1)
    return invalid_argument("{}: \"prompt_lookup_min\" {} must be at least 1", kWhere, prompt_lookup_min);
  if (prompt_lookup_max < prompt_lookup_min)
    return invalid_argument("{}: \"prompt_lookup_max\" {} must be at least \"prompt_lookup_min\" {}", kWhere,
                            prompt_lookup_max, prompt_lookup_min);
  return {};
}

Result<SpeculativeConfig> parse_speculative_config(std::string_view json, bool draft_models) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument("{}: not valid JSON ({})", kWhere, e.what());
  }
  if (!j.is_object()) return invalid_argument("{}: must be a JSON object, got {}", kWhere, j.dump());
  auto in = [](const auto& keys, const std::string& key) {
    return std::find(std::begin(keys), std::end(keys), key) != std::end(keys);
  };
  for (const auto& [key, value] : j.items())
    if (key != "method" && key != "num_speculative_tokens" && key != "model" && key != "kda_rollback" &&
        !in(kNgramKeys, key) && !in(kSuffixKeys, key))
      return invalid_argument(
          "{}: unknown key \"{}\" (known: method, num_speculative_tokens, prompt_lookup_min, "
          "prompt_lookup_max, suffix_decoding_max_tree_depth, suffix_decoding_max_cached_requests, "
          "suffix_decoding_min_token_prob, suffix_decoding_max_spec_factor, model, kda_rollback)",
          kWhere, key);
  // The method first: one that is not built is the error to see, whatever else the object says.
  if (!j.contains("method"))
    return invalid_argument("{}: \"method\" is required (\"ngram\" or \"suffix\")", kWhere);
  if (!j["method"].is_string())
    return invalid_argument("{}: \"method\" must be a string (got {})", kWhere, j["method"].dump());
  SpeculativeConfig c;
  c.method = j["method"].get<std::string>();
  if (c.method == "draft_model" && !draft_models)
    return invalid_argument(
        "{}: method \"draft_model\" is not built yet in this command (rill generate and rill serve run it)", kWhere);
  if (c.method != "ngram" && c.method != "suffix" && c.method != "draft_model") {
    c.num_speculative_tokens = 1;
    RILL_TRY(c.validate());  // an error for every method not built
  }
  for (const auto& [key, value] : j.items())
    if ((c.method != "suffix" && in(kSuffixKeys, key)) || (c.method != "ngram" && in(kNgramKeys, key)) ||
        (c.method != "draft_model" && key == "model"))
      return invalid_argument("{}: \"{}\" does not apply to method \"{}\"", kWhere, key, c.method);
  if (j.contains("model")) {
    if (!j["model"].is_string())
      return invalid_argument("{}: \"model\" must be a string (got {})", kWhere, j["model"].dump());
    c.draft_model = j["model"].get<std::string>();
  }
  if (j.contains("kda_rollback")) {  // rill's own: every method verifies through the same KDA
    const nlohmann::json& v = j["kda_rollback"];
    const std::string name = v.is_string() ? v.get<std::string>() : std::string();
    if (name == "checkpoint")
      c.kda_rollback = cache::KdaRollback::Checkpoint;
    else if (name == "records")
      c.kda_rollback = cache::KdaRollback::Records;
    else
      return invalid_argument("{}: \"kda_rollback\" must be \"checkpoint\" or \"records\" (got {})", kWhere,
                              v.dump());
  }
  if (!j.contains("num_speculative_tokens"))
    return invalid_argument("{}: \"num_speculative_tokens\" is required", kWhere);
  RILL_ASSIGN_OR_RETURN(c.num_speculative_tokens, int_key(j, "num_speculative_tokens"));
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > kMaxSpeculativeTokens)
    return invalid_argument("{}: \"num_speculative_tokens\" {} must be in [1, {}]", kWhere,
                            c.num_speculative_tokens, kMaxSpeculativeTokens);
  // vLLM's defaults: both bounds 5 when neither is given; when one is, the other takes its value.
  const bool has_min = j.contains("prompt_lookup_min"), has_max = j.contains("prompt_lookup_max");
  if (has_min) {
    RILL_ASSIGN_OR_RETURN(c.prompt_lookup_min, int_key(j, "prompt_lookup_min"));
  }
  if (has_max) {
    RILL_ASSIGN_OR_RETURN(c.prompt_lookup_max, int_key(j, "prompt_lookup_max"));
  }
  SuffixDrafterOptions& sx = c.suffix;
  if (j.contains("suffix_decoding_max_tree_depth")) {
    RILL_ASSIGN_OR_RETURN(sx.max_tree_depth, int_key(j, "suffix_decoding_max_tree_depth"));
  }
  if (j.contains("suffix_decoding_max_cached_requests")) {
    RILL_ASSIGN_OR_RETURN(sx.max_cached_requests, int_key(j, "suffix_decoding_max_cached_requests"));
  }
  if (j.contains("suffix_decoding_min_token_prob")) {
    RILL_ASSIGN_OR_RETURN(sx.min_token_prob, number_key(j, "suffix_decoding_min_token_prob"));
  }
  if (j.contains("suffix_decoding_max_spec_factor")) {
    RILL_ASSIGN_OR_RETURN(sx.max_spec_factor, number_key(j, "suffix_decoding_max_spec_factor"));
  }
  if (!has_min && !has_max) c.prompt_lookup_min = c.prompt_lookup_max = 5;
  if (has_min && !has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  if (has_max && !has_min) c.prompt_lookup_min = c.prompt_lookup_max;
  RILL_TRY(c.validate());
  return c;
}

Result<std::unique_ptr<Drafter>> make_drafter(const SpeculativeConfig& config) {
  RILL_TRY(config.validate());
  if (!config.enabled()) return invalid_argument("{}: speculation is off", kWhere);
  if (config.method == "draft_model")
    return invalid_argument("{}: method \"draft_model\" runs in the executor (Engine::create makes its drafter)",
                            kWhere);
  if (config.method == "suffix") {
    RILL_ASSIGN_OR_RETURN(std::unique_ptr<SuffixDrafter> s, SuffixDrafter::create(config.suffix));
    return std::unique_ptr<Drafter>(std::move(s));
  }
  RILL_ASSIGN_OR_RETURN(NgramDrafter d,
                        NgramDrafter::create(config.prompt_lookup_min, config.prompt_lookup_max));
  return std::unique_ptr<Drafter>(std::make_unique<NgramDrafter>(std::move(d)));
}

}  // namespace rill::engine::spec
