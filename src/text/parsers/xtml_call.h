// K3 XTML markers and the builder for one tool-call element (kimi-architecture.md §6.4):
//   <|open|>call tool="NAME" index="N"<|sep|>
//     (<|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>)*
//     | <|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>
//   <|close|>call<|sep|>
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rill::text::k3 {

// The scanner's marker list for K3. Whole tags are markers so that a channel never shows half of
// one; the lone "<|open|>", "<|close|>", "<|sep|>" catch everything else (longest match wins).
enum Marker : int {
  kThinkOpen,
  kThinkClose,
  kResponseOpen,
  kResponseClose,
  kToolsOpen,
  kToolsClose,
  kCallOpen,  // attributes follow, up to <|sep|>
  kCallClose,
  kArgOpen,  // attributes follow
  kArgClose,
  kJsonOpen,  // attributes follow
  kJsonClose,
  kMessageClose,
  kOpen,
  kClose,
  kSep,
  kEndOfMsg,
  kEos,
  kEot,
};

const std::vector<std::string_view>& markers();
inline std::string_view spelling(int marker) {
  return markers()[static_cast<size_t>(marker)];
}
inline bool is_stop(int marker) {
  return marker == kEndOfMsg || marker == kEos || marker == kEot;
}

// Parses ` key="value" key2="value2"` (attribute values unescape &quot; and &amp;); false when the
// header is anything else.
bool parse_attributes(std::string_view header, std::vector<std::pair<std::string, std::string>>& out);

// Collects one call element, token by token, after its "<|open|>call" marker.
class XtmlCall {
 public:
  enum class Step {
    Consumed,  // the token belongs to the call
    Complete,  // <|close|>call<|sep|> consumed: the call is done (possibly malformed())
    Rejected,  // the call was cut off by this marker, which it did not consume (now malformed())
  };

  XtmlCall();
  void text(std::string_view text);
  Step marker(int marker);

  bool malformed() const { return phase_ == Phase::Malformed; }
  const std::string& problem() const { return problem_; }  // why it is malformed
  const std::string& raw() const { return raw_; }          // every byte consumed, markers included
  const std::string& name() const { return name_; }
  // The arguments as a JSON object: a json block as written; typed arguments as {"key":VALUE,...} in
  // generated order, each VALUE the model's own JSON text (numbers keep their digits and spelling). Each
  // value that had to be coerced (bad JSON kept as a string, a type that does not match) adds a line to
  // `problems`.
  std::string arguments(std::vector<std::string>& problems) const;

 private:
  enum class Phase { Header, Body, ArgHeader, ArgValue, JsonHeader, JsonValue, Malformed };
  struct Argument {
    std::string key, type, value;
  };

  Step malformed_marker(int marker);
  Step value_marker(int marker, int close);
  void end_header();
  void fail(std::string problem);

  Phase phase_ = Phase::Header;
  std::string raw_;
  std::string header_;  // attribute text of the tag being opened
  std::string value_;   // body of the argument or json block being read
  std::string name_;
  std::string problem_;
  std::vector<Argument> args_;
  std::optional<std::string> json_block_;
};

}  // namespace rill::text::k3
