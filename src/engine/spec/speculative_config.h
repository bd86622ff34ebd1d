// SpeculativeConfig: vLLM's --speculative-config JSON and the drafter it names. Built: `ngram` ({"method":
// "ngram", "num_speculative_tokens": K, "prompt_lookup_max": N, "prompt_lookup_min": M}), `suffix` (suffix
// decoding: "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
// "suffix_decoding_min_token_prob", "suffix_decoding_max_spec_factor") and `draft_model` ("model": DIR;
// in the commands that take it); `mtp` is refused by name. rill's own key "kda_rollback" ("checkpoint", the
// default, or "records") chooses how a rejected draft's KDA state is rolled back (cache::KdaRollback).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "cache/cache_manager.h"
#include "core/status.h"
#include "engine/spec/drafter.h"
#include "engine/spec/suffix_drafter.h"

namespace rill::engine::spec {

struct SpeculativeConfig {
  std::string method = "ngram";
  int num_speculative_tokens = 0;  // 0: speculation off; else in [1, kMaxSpeculativeTokens]
  int prompt_lookup_min = 5, prompt_lookup_max = 5;  // ngram
  SuffixDrafterOptions suffix;                       // suffix
  std::string draft_model;                           // draft_model: the checkpoint directory (vLLM's "model")
  // "kda_rollback": replay records folded after acceptance (default: on the H100 the demo model's ngram k = 4
  // at concurrency 1 ran at 1.29x TPOT with them against 1.19x with checkpoints, medians of 3 passes, and
  // they take 8.5x less memory; docs/PERF.md) or checkpoint slots + re-feed.
  cache::KdaRollback kda_rollback = cache::KdaRollback::Records;
  bool enabled() const { return num_speculative_tokens > 0; }
  // The ranges (errors name the key); a disabled config is valid.
  Status validate() const;
};

inline constexpr int kMaxSpeculativeTokens = 16;

// Parses the flag's JSON: unknown keys, keys of another method, wrong types and bad values give an error
// naming the key (or the method). `method` and `num_speculative_tokens` are required; the lookup bounds
// follow vLLM (both 5 when neither is given, the given one's value for the other when one is); the suffix
// keys default to SuffixDrafterOptions'.
// `draft_models`: the command runs a draft model (rill generate, rill serve); elsewhere "draft_model" is
// refused as not built yet there.
Result<SpeculativeConfig> parse_speculative_config(std::string_view json, bool draft_models = false);

// The drafter the config names (not draft_model: Engine::create makes it over the executor that runs the
// draft model).
Result<std::unique_ptr<Drafter>> make_drafter(const SpeculativeConfig& config);

}  // namespace rill::engine::spec
