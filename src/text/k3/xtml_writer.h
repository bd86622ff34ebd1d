// Builds the segment list of a K3 ("XTML") prompt: control markers are segments encoded with special
// tokens allowed; tag names, attribute pieces and message text are separate text segments encoded with
// special tokens disallowed (encoding_k3.py's _open_tag/_attr/_close_tag, segment for segment).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rill::text::k3 {

inline constexpr std::string_view kOpen = "<|open|>";
inline constexpr std::string_view kClose = "<|close|>";
inline constexpr std::string_view kSep = "<|sep|>";
inline constexpr std::string_view kEndOfMsg = "<|end_of_msg|>";

struct Segment {
  std::string text;
  bool allow_special = false;
  bool operator==(const Segment&) const = default;
};

// Attribute (key, already str()-converted value); values are escaped when written.
using Attr = std::pair<std::string, std::string>;

class XtmlWriter {
 public:
  void control(std::string_view marker) { add(marker, true); }
  // Empty text adds nothing (the reference drops empty segments).
  void text(std::string_view text) { add(text, false); }

  // <|open|> tag { ' key' '="' escape(value) '"' } <|sep|>, each piece its own segment.
  void open_tag(std::string_view tag, const std::vector<Attr>& attrs = {});
  void close_tag(std::string_view tag);  // <|close|> tag <|sep|>
  void end_of_msg() { control(kEndOfMsg); }
  // open_tag(message, role=system, type=kind) + body.strip() + close_tag(message) + <|end_of_msg|>
  void internal_system_message(std::string_view kind, std::string_view body);

  size_t size() const { return segments_.size(); }
  std::vector<Segment> take() { return std::move(segments_); }

 private:
  void add(std::string_view text, bool allow_special) {
    if (!text.empty()) segments_.push_back({std::string(text), allow_special});
  }
  std::vector<Segment> segments_;
};

// str(value).replace('&', '&amp;').replace('"', '&quot;')
std::string escape_attr_value(std::string_view value);

}  // namespace rill::text::k3
