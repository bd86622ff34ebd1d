// StopChecker: one sequence's generated ids -> the text its caller gets, as vLLM's detokenizer makes it:
// skipped special tokens add no text (skip_special_tokens), a tail that could be the start of a stop string
// is held back, and a completed stop string ends the text (cut before it, or after it with
// include_stop_str_in_output). Stop strings match only text the caller sees (never inside a skipped special
// token's name), and only once min_tokens tokens are generated: a match must end in a later token's text.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::engine {

class StopChecker {
 public:
  // Reads stop, min_tokens, include_stop_str_in_output and skip_special_tokens. Without a tokenizer there is
  // no text (and no stop string can match).
  StopChecker(const text::Tokenizer* tokenizer, const SamplingParams& params);
  // Appends a generated id; returns the text now safe to emit. Sets *matched when a stop string completed
  // (the returned text then ends just before it, or just after it with include_stop_str_in_output).
  std::string push(int32_t id, std::optional<std::string>* matched);
  // The held-back text, at the end of a sequence that did not stop on a string.
  std::string flush();

 private:
  const text::Tokenizer* tokenizer_;
  std::optional<text::IncrementalDetokenizer> detok_;
  std::vector<std::string> stops_;
  int32_t min_tokens_ = 0;
  bool include_stop_ = false, skip_special_ = true;
  int32_t n_pushed_ = 0;
  std::string held_;
};

}  // namespace rill::engine
