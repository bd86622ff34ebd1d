#include "engine/stop_checker.h"

#include <algorithm>

namespace rill::engine {

StopChecker::StopChecker(const text::Tokenizer* tokenizer, const SamplingParams& params)
    : tokenizer_(tokenizer),
      stops_(params.stop),
      min_tokens_(params.min_tokens),
      include_stop_(params.include_stop_str_in_output),
      skip_special_(params.skip_special_tokens) {
  if (tokenizer) detok_.emplace(*tokenizer);
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopChecker::push(int32_t id, std::optional<std::string>* matched) {
  if (!detok_) return {};
  ++n_pushed_;
  // What is held was searched when it came, or came before min_tokens: a match must end after it.
  const size_t searched = held_.size();
  if (!(skip_special_ && tokenizer_->is_skipped_special(id))) {
    auto piece = detok_->push(id);
    if (piece.ok()) held_ += *piece;
  }
  if (n_pushed_ > min_tokens_) {
    // The earliest stop string wins.
    size_t best = std::string::npos, best_end = 0;
    for (const auto& s : stops_) {
      const size_t at = held_.find(s, searched >= s.size() ? searched - s.size() + 1 : 0);
      if (at != std::string::npos && (best == std::string::npos || at < best)) {
        best = at;
        best_end = at + s.size();
        *matched = s;
      }
    }
    if (best != std::string::npos) {
      std::string out = held_.substr(0, include_stop_ ? best_end : best);
      held_.clear();
      return out;
    }
  }
  // Hold back the longest tail that is a proper prefix of some stop string (also before min_tokens: a stop
  // string may start there and end after it).
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopChecker::flush() {
  std::string out = std::move(held_);
  held_.clear();
  if (detok_) out += detok_->flush();
  return out;
}

}  // namespace rill::engine
