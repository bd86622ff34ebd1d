// SpeculativeConfig: vLLM's --speculative-config JSON ({"method": "ngram", "num_speculative_tokens": K,
// "prompt_lookup_max": N, "prompt_lookup_min": M}) and the drafter it names. Only `ngram` is built; the other
// methods of vLLM and issue #21 (`suffix`, `draft_model`, `mtp`) are refused by name.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/spec/drafter.h"

namespace rill::engine::spec {

struct SpeculativeConfig {
  std::string method = "ngram";
  int num_speculative_tokens = 0;  // 0: speculation off; else in [1, kMaxSpeculativeTokens]
  int prompt_lookup_min = 5, prompt_lookup_max = 5;
  bool enabled() const { return num_speculative_tokens > 0; }
  // The ranges (errors name the key); a disabled config is valid.
  Status validate() const;
};

inline constexpr int kMaxSpeculativeTokens = 16;

// Parses the flag's JSON: unknown keys, wrong types and bad values give an error naming the key (or the
// method). `method` and `num_speculative_tokens` are required; the lookup bounds follow vLLM (both 5 when
// neither is given, the given one's value for the other when one is).
Result<SpeculativeConfig> parse_speculative_config(std::string_view json);

// The drafter the config names.
Result<std::unique_ptr<Drafter>> make_drafter(const SpeculativeConfig& config);

}  // namespace rill::engine::spec
