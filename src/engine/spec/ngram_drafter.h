// NgramDrafter: prompt lookup (vLLM's `ngram` method, with its `prompt_lookup_min` / `prompt_lookup_max`):
// the last n tokens of the context, for the largest n in [min_n, max_n] that occurs earlier in the context,
// and the tokens that followed their most recent earlier occurrence are the draft. Most recent rather than
// first: in code edits and multi-turn chats the nearest copy is the one being repeated. The continuation may
// run into the suffix itself (a repeating pattern drafts its own next period).
#pragma once

#include "core/status.h"
#include "engine/spec/drafter.h"

namespace rill::engine::spec {

class NgramDrafter final : public Drafter {
 public:
  // Errors name vLLM's keys: 1 <= prompt_lookup_min <= prompt_lookup_max.
  static Result<NgramDrafter> create(int min_n, int max_n);
  std::vector<int32_t> propose(std::span<const int32_t> context, int max_tokens) const override;

 private:
  NgramDrafter(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {}
  int min_n_, max_n_;
};

}  // namespace rill::engine::spec
