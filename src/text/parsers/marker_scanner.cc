#include "text/parsers/marker_scanner.h"

#include <algorithm>
#include <cassert>

#include <fmt/format.h>

namespace rill::text {

std::string quote_excerpt(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return fmt::format("\"{}\"", text);
  std::string_view head = text.substr(0, max_bytes);
  head.remove_suffix(utf8_incomplete_tail(head));
  return fmt::format("\"{}...\" ({} bytes)", head, text.size());
}

size_t MarkerScanner::drop_cut_marker() {
  const std::string_view rest = std::string_view(buf_).substr(pos_);
  if (rest.empty()) return 0;
  for (std::string_view m : markers_) {
    if (rest.size() < m.size() && m.starts_with(rest)) {
      pos_ = buf_.size();
      return rest.size();
    }
  }
  return 0;
}

bool is_blank(std::string_view text) {
  return std::all_of(text.begin(), text.end(), is_json_space);
}

std::string_view trim_json_space(std::string_view text) {
  while (!text.empty() && is_json_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_json_space(text.back())) text.remove_suffix(1);
  return text;
}

MarkerScanner::MarkerScanner(std::vector<std::string_view> markers) : markers_(std::move(markers)) {
  for (std::string_view m : markers_) {
    // ASCII first bytes: a marker never starts inside a UTF-8 sequence, so cutting text before one is safe.
    assert(!m.empty() && static_cast<unsigned char>(m[0]) < 0x80);
    if (first_bytes_.find(m[0]) == std::string::npos) first_bytes_.push_back(m[0]);
    max_size_ = std::max(max_size_, m.size());
  }
}

void MarkerScanner::feed(std::string_view text) {
  // Tokens handed out earlier point into buf_; they are dead once the caller feeds again.
  buf_.erase(0, pos_);
  pos_ = 0;
  buf_.append(text);
}

MarkerScanner::Match MarkerScanner::match_at(size_t pos, bool at_end, int& marker) const {
  std::string_view rest = std::string_view(buf_).substr(pos);
  bool partial = false;
  marker = -1;
  for (size_t i = 0; i < markers_.size(); ++i) {
    std::string_view m = markers_[i];
    if (rest.size() >= m.size()) {
      if (rest.starts_with(m) && (marker < 0 || m.size() > markers_[marker].size()))
        marker = static_cast<int>(i);
    } else if (!at_end && m.starts_with(rest)) {
      partial = true;  // a longer marker may still complete here: wait, even if a shorter one matched
    }
  }
  if (partial) return Match::Partial;
  return marker >= 0 ? Match::Full : Match::None;
}

size_t MarkerScanner::utf8_safe_end(size_t end) const {
  return end - utf8_incomplete_tail(std::string_view(buf_).substr(pos_, end - pos_));
}

bool MarkerScanner::next(Token& out, bool at_end) {
  size_t search = pos_;
  while (pos_ < buf_.size()) {
    size_t start = buf_.find_first_of(first_bytes_, search);
    if (start == std::string::npos) {
      size_t end = at_end ? buf_.size() : utf8_safe_end(buf_.size());
      if (end == pos_) return false;
      out = Token{false, -1, std::string_view(buf_).substr(pos_, end - pos_)};
      pos_ = end;
      return true;
    }
    int marker = -1;
    Match match = match_at(start, at_end, marker);
    if (match == Match::None) {
      search = start + 1;
      continue;
    }
    if (start > pos_) {  // markers are ASCII, so the text before one ends on a character boundary
      out = Token{false, -1, std::string_view(buf_).substr(pos_, start - pos_)};
      pos_ = start;
      return true;
    }
    if (match == Match::Partial) return false;
    out = Token{true, marker, markers_[marker]};
    pos_ += markers_[marker].size();
    return true;
  }
  return false;
}

}  // namespace rill::text
