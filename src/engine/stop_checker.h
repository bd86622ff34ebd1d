// StopChecker: turns a sequence's generated ids into text for streaming, holding back any tail that could be
// the start of a stop string, and reports a completed stop string (whose text is not emitted, as in vLLM).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace rill::engine {

class StopChecker {
 public:
  StopChecker(const text::Tokenizer* tokenizer, std::vector<std::string> stops);
  // Appends a generated id; returns the text now safe to emit. Sets *matched when a stop string completed
  // (the returned text then ends just before it).
  std::string push(int32_t id, std::optional<std::string>* matched);
  // The held-back text, at the end of a sequence that did not stop on a string.
  std::string flush();

 private:
  std::optional<text::IncrementalDetokenizer> detok_;
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace rill::engine
