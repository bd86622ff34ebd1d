// SpeculativeConfig: vLLM's --speculative-config JSON and the drafter it names. Built: `ngram` ({"method":
// "ngram", "num_speculative_tokens": K, "prompt_lookup_max": N, "prompt_lookup_min": M}) and `suffix`
// (suffix decoding: "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
// "suffix_decoding_min_token_prob", "suffix_decoding_max_spec_factor"); the other methods of vLLM and issue
// #21 (`draft_model`, `mtp`) are refused by name.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "engine/spec/drafter.h"
#include "engine/spec/suffix_drafter.h"

namespace rill::engine::spec {

struct SpeculativeConfig {
  std::string method = "ngram";
  int num_speculative_tokens = 0;  // 0: speculation off; else in [1, kMaxSpeculativeTokens]
  int prompt_lookup_min = 5, prompt_lookup_max = 5;  // ngram
  SuffixDrafterOptions suffix;                       // suffix
  bool enabled() const { return num_speculative_tokens > 0; }
  // The ranges (errors name the key); a disabled config is valid.
  Status validate() const;
};

inline constexpr int kMaxSpeculativeTokens = 16;

// Parses the flag's JSON: unknown keys, keys of another method, wrong types and bad values give an error
// naming the key (or the method). `method` and `num_speculative_tokens` are required; the lookup bounds
// follow vLLM (both 5 when neither is given, the given one's value for the other when one is); the suffix
// keys default to SuffixDrafterOptions'.
Result<SpeculativeConfig> parse_speculative_config(std::string_view json);

// The drafter the config names.
Result<std::unique_ptr<Drafter>> make_drafter(const SpeculativeConfig& config);

}  // namespace rill::engine::spec
