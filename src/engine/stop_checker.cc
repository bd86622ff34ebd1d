#include "engine/stop_checker.h"

#include <algorithm>

namespace rill::engine {

StopChecker::StopChecker(const text::Tokenizer* tokenizer, std::vector<std::string> stops) : stops_(std::move(stops)) {
  if (tokenizer) detok_.emplace(*tokenizer);
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopChecker::push(int32_t id, std::optional<std::string>* matched) {
  if (!detok_) return {};
  auto piece = detok_->push(id);
  if (piece.ok()) held_ += *piece;
  // The earliest complete stop string wins.
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos && (best == std::string::npos || at < best)) {
      best = at;
      *matched = s;
    }
  }
  if (best != std::string::npos) {
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
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
