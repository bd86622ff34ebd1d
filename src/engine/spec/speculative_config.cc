#include "engine/spec/speculative_config.h"

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

}  // namespace

Status SpeculativeConfig::validate() const {
  if (!enabled()) return {};
  if (method == "suffix" || method == "draft_model" || method == "mtp")
    return invalid_argument("{}: method \"{}\" is not built yet (only \"ngram\" is)", kWhere, method);
  if (method != "ngram")
    return invalid_argument("{}: unknown method \"{}\" (only \"ngram\")", kWhere, method);
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpeculativeTokens)
    return invalid_argument("{}: \"num_speculative_tokens\" {} must be in [1, {}]", kWhere,
                            num_speculative_tokens, kMaxSpeculativeTokens);
  if (prompt_lookup_min < 1)
    return invalid_argument("{}: \"prompt_lookup_min\" {} must be at least 1", kWhere, prompt_lookup_min);
  if (prompt_lookup_max < prompt_lookup_min)
    return invalid_argument("{}: \"prompt_lookup_max\" {} must be at least \"prompt_lookup_min\" {}", kWhere,
                            prompt_lookup_max, prompt_lookup_min);
  return {};
}

Result<SpeculativeConfig> parse_speculative_config(std::string_view json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument("{}: not valid JSON ({})", kWhere, e.what());
  }
  if (!j.is_object()) return invalid_argument("{}: must be a JSON object, got {}", kWhere, j.dump());
  for (const auto& [key, value] : j.items())
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_min" &&
        key != "prompt_lookup_max")
      return invalid_argument(
          "{}: unknown key \"{}\" (known: method, num_speculative_tokens, prompt_lookup_min, "
          "prompt_lookup_max)",
          kWhere, key);
  // The method first: one that is not built is the error to see, whatever else the object says.
  if (!j.contains("method")) return invalid_argument("{}: \"method\" is required (\"ngram\")", kWhere);
  if (!j["method"].is_string())
    return invalid_argument("{}: \"method\" must be a string (got {})", kWhere, j["method"].dump());
  SpeculativeConfig c;
  c.method = j["method"].get<std::string>();
  if (c.method != "ngram") {
    c.num_speculative_tokens = 1;
    RILL_TRY(c.validate());  // an error for every method but ngram
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
  if (!has_min && !has_max) c.prompt_lookup_min = c.prompt_lookup_max = 5;
  if (has_min && !has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  if (has_max && !has_min) c.prompt_lookup_min = c.prompt_lookup_max;
  RILL_TRY(c.validate());
  return c;
}

Result<std::unique_ptr<Drafter>> make_drafter(const SpeculativeConfig& config) {
  RILL_TRY(config.validate());
  if (!config.enabled()) return invalid_argument("{}: speculation is off", kWhere);
  RILL_ASSIGN_OR_RETURN(NgramDrafter d,
                        NgramDrafter::create(config.prompt_lookup_min, config.prompt_lookup_max));
  return std::unique_ptr<Drafter>(std::make_unique<NgramDrafter>(std::move(d)));
}

}  // namespace rill::engine::spec
