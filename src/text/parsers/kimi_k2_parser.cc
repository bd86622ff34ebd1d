#include "text/parsers/kimi_k2_parser.h"

#include <string>
#include <vector>

#include "text/parsers/json_text.h"
#include "text/parsers/marker_scanner.h"

namespace rill::text {
namespace {

enum K2Marker : int {
  kThinkOpen,
  kThinkClose,
  kSectionBegin,
  kSectionEnd,
  kCallBegin,
  kArgBegin,
  kCallEnd,
  kImEnd,
  kEos,
  kEot,
};

const std::vector<std::string_view>& k2_markers() {
  static const std::vector<std::string_view> markers = {
      "<think>",
      "</think>",
      "<|tool_calls_section_begin|>",
      "<|tool_calls_section_end|>",
      "<|tool_call_begin|>",
      "<|tool_call_argument_begin|>",
      "<|tool_call_end|>",
      "<|im_end|>",
      "[EOS]",
      "[EOT]",  // not a K2 stop id, but serving stops on it defensively (serving.md §2.1)
  };
  return markers;
}

bool is_stop(int marker) {
  return marker == kImEnd || marker == kEos || marker == kEot;
}
std::string_view spelling(int marker) {
  return k2_markers()[static_cast<size_t>(marker)];
}

bool is_name_byte(char c) {
  auto b = static_cast<unsigned char>(c);
  return b >= 0x80 || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
         c == '_' || c == '.' || c == '-';
}

// The id regex of serving.md §2.3, `^(?:functions\.)?(?P<name>[\w\.]+):(?P<index>\d+)$`, with two
// widenings: '-' is a name character (OpenAI function names may hold it) and so is every non-ASCII
// byte (Python's \w is Unicode-aware). Returns the name, or "" when `id` does not match.
std::string parse_call_id(std::string_view id) {
  size_t colon = id.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == id.size()) return "";
  for (char c : id.substr(colon + 1)) {
    if (c < '0' || c > '9') return "";
  }
  std::string_view name = id.substr(0, colon);
  constexpr std::string_view kPrefix = "functions.";
  if (name.starts_with(kPrefix) && name.size() > kPrefix.size()) name.remove_prefix(kPrefix.size());
  if (name.empty()) return "";
  for (char c : name) {
    if (!is_name_byte(c)) return "";
  }
  return std::string(name);
}

class KimiK2Parser final : public OutputParser {
 public:
  explicit KimiK2Parser(const ParserConfig& config) : OutputParser(k2_markers(), is_stop), config_(config) {}

 private:
  // The end of the message is OutputParser's (end_message).
  enum class State { Start, Reasoning, Content, Section, CallId, CallArgs };

  void on_text(std::string_view text) override;
  void on_marker(int marker) override;
  void on_finish() override;

  void leave_start() { state_ = config_.starts_in_reasoning ? State::Reasoning : State::Content; }
  void reasoning_marker(int marker);
  void content_marker(int marker);
  void section_marker(int marker);
  void call_id_marker(int marker);
  void call_args_marker(int marker);
  void stop(int marker) { end_message(marker, config_.stop_at_end_of_message); }

  void open_call(std::string name);
  void args_text(std::string_view text);
  void close_call(bool complete);
  void flush_garbage();
  void flush_bad_call(ParseErrorKind kind, std::string_view reason);

  ParserConfig config_;
  State state_ = State::Start;
  std::string garbage_;     // Section: text since the last marker, checked when the next one arrives
  std::string raw_;         // CallId: the call's text from <|tool_call_begin|> on
  std::string bad_reason_;  // CallId: why the call can no longer be parsed ("" while it still can)
  int call_ = -1;           // CallArgs: index of the open call
  bool args_started_ = false;
  std::string args_space_;     // CallArgs: whitespace held back; dropped if <|tool_call_end|> follows
};

void KimiK2Parser::on_text(std::string_view text) {
  switch (state_) {
    case State::Start:
      leave_start();
      on_text(text);
      return;
    case State::Reasoning:
      emit_reasoning(text);
      return;
    case State::Content:
      emit_content(text);
      return;
    case State::Section:
      garbage_.append(text);
      return;
    case State::CallId:
      raw_.append(text);
      return;
    case State::CallArgs:
      args_text(text);
      return;
  }
}

void KimiK2Parser::on_marker(int marker) {
  switch (state_) {
    case State::Start:
      // "<think>" opens reasoning only as the very first thing generated.
      if (marker == kThinkOpen && config_.k2_reasoning) {
        state_ = State::Reasoning;
        return;
      }
      leave_start();
      on_marker(marker);
      return;
    case State::Reasoning:
      reasoning_marker(marker);
      return;
    case State::Content:
      content_marker(marker);
      return;
    case State::Section:
      section_marker(marker);
      return;
    case State::CallId:
      call_id_marker(marker);
      return;
    case State::CallArgs:
      call_args_marker(marker);
      return;
  }
}

void KimiK2Parser::reasoning_marker(int marker) {
  if (marker == kThinkClose || marker == kSectionBegin) {
    // A tool-calls section ends reasoning implicitly, as in vLLM's kimi_k2 reasoning parser.
    emit_reasoning_end();
    state_ = marker == kThinkClose ? State::Content : State::Section;
  } else if (is_stop(marker)) {
    stop(marker);
  } else {
    report_unexpected_marker(marker, "reasoning");
    emit_reasoning(spelling(marker));
  }
}

void KimiK2Parser::content_marker(int marker) {
  if (marker == kSectionBegin) {
    state_ = State::Section;
  } else if (is_stop(marker)) {
    stop(marker);
  } else {
    // Without a reasoning channel (Kimi-Linear-Instruct) the think tags are ordinary text.
    bool plain = !config_.k2_reasoning && (marker == kThinkOpen || marker == kThinkClose);
    if (!plain) report_unexpected_marker(marker, "content");
    emit_content(spelling(marker));
  }
}

void KimiK2Parser::section_marker(int marker) {
  if (marker == kCallBegin) {
    flush_garbage();
    raw_ = spelling(marker);
    bad_reason_.clear();
    state_ = State::CallId;
  } else if (marker == kSectionEnd) {
    flush_garbage();
    state_ = State::Content;
  } else if (is_stop(marker)) {
    flush_garbage();
    report(ParseErrorKind::UnterminatedToolSection, -1, "message ended before <|tool_calls_section_end|>");
    stop(marker);
  } else {
    garbage_.append(spelling(marker));
  }
}

void KimiK2Parser::call_id_marker(int marker) {
  if (marker == kArgBegin && bad_reason_.empty()) {
    std::string_view id = trim_json_space(std::string_view(raw_).substr(spelling(kCallBegin).size()));
    std::string name = parse_call_id(id);
    if (!name.empty()) {
      open_call(std::move(name));
      return;
    }
    bad_reason_ = fmt::format("id {} is not functions.NAME:IDX", quote_excerpt(id));
  }
  if (marker == kCallEnd) {
    raw_.append(spelling(marker));
    flush_bad_call(ParseErrorKind::MalformedToolCall,
                   bad_reason_.empty() ? "no <|tool_call_argument_begin|>" : std::string_view(bad_reason_));
    state_ = State::Section;
  } else if (marker == kCallBegin || marker == kSectionEnd || is_stop(marker)) {
    flush_bad_call(ParseErrorKind::TruncatedToolCall, fmt::format("cut off by {}", spelling(marker)));
    state_ = State::Section;
    section_marker(marker);
  } else {
    raw_.append(spelling(marker));
  }
}

void KimiK2Parser::call_args_marker(int marker) {
  if (marker == kCallEnd) {
    close_call(true);
    state_ = State::Section;
  } else if (marker == kCallBegin || marker == kSectionEnd || is_stop(marker)) {
    close_call(false);
    state_ = State::Section;
    section_marker(marker);
  } else {
    args_text(spelling(marker));  // text inside the JSON; validation at <|tool_call_end|> judges it
  }
}

void KimiK2Parser::open_call(std::string name) {
  std::string id;
  if (config_.tool_call_ids == ToolCallIdStyle::NameIndex) {
    id = fmt::format("{}_{}", name,
                     config_.first_tool_call_number + static_cast<int>(result().tool_calls.size()));
  } else {  // FamilyDefault and KimiK2: the id the model wrote, which history replays verbatim
    id = std::string(trim_json_space(std::string_view(raw_).substr(spelling(kCallBegin).size())));
  }
  call_ = emit_tool_call_begin(std::move(id), std::move(name));
  raw_.clear();
  args_started_ = false;
  args_space_.clear();
  state_ = State::CallArgs;
}

void KimiK2Parser::args_text(std::string_view text) {
  // Stream the arguments as they come, minus surrounding whitespace: leading whitespace is
  // skipped, trailing whitespace is held until more JSON follows.
  if (!args_started_) {
    while (!text.empty() && is_json_space(text.front())) text.remove_prefix(1);
    if (text.empty()) return;
    args_started_ = true;
  }
  size_t last = text.find_last_not_of(" \t\n\r");
  if (last == std::string_view::npos) {
    args_space_.append(text);
    return;
  }
  emit_tool_call_arguments(call_, args_space_);
  emit_tool_call_arguments(call_, text.substr(0, last + 1));
  args_space_.assign(text.substr(last + 1));
}

void KimiK2Parser::close_call(bool complete) {
  const ToolCall& call = result().tool_calls.at(static_cast<size_t>(call_));
  if (!complete) {
    report(ParseErrorKind::TruncatedToolCall, call_,
           fmt::format("arguments of {} ended before <|tool_call_end|>", call.id));
    return;
  }
  auto json = parse_json(call.arguments);
  if (!json || !json->is_object()) {
    report(ParseErrorKind::InvalidArguments, call_,
           fmt::format("arguments of {} are not a JSON object: {}", call.id, quote_excerpt(call.arguments)));
  }
}

void KimiK2Parser::flush_garbage() {
  flush_unexpected_text(garbage_, "between tool calls");
}

void KimiK2Parser::flush_bad_call(ParseErrorKind kind, std::string_view reason) {
  // A call cut off before its id was complete (max_tokens, a stop) is dropped: no protocol markup reaches
  // content, and nothing of it was streamed (vLLM's kimi_k2 parser streams a call only once its name is
  // known, and drops incomplete calls). A malformed id is the model's text, kept as content.
  if (kind == ParseErrorKind::TruncatedToolCall) {
    report(kind, -1, fmt::format("tool call {} dropped: {}", quote_excerpt(raw_), reason));
  } else {
    report(kind, -1, fmt::format("tool call {} emitted as content: {}", quote_excerpt(raw_), reason));
    emit_content(raw_);
  }
  raw_.clear();
}

void KimiK2Parser::on_finish() {
  switch (state_) {
    case State::Start:
    case State::Reasoning:  // cut off while thinking: no end boundary, no content
    case State::Content:
      return;
    case State::Section:
      flush_garbage();
      report(ParseErrorKind::UnterminatedToolSection, -1, "text ended before <|tool_calls_section_end|>");
      return;
    case State::CallId:
      flush_bad_call(ParseErrorKind::TruncatedToolCall, "the text ended inside it");
      return;
    case State::CallArgs:
      close_call(false);
      return;
  }
}

}  // namespace

std::unique_ptr<OutputParser> make_kimi_k2_parser(const ParserConfig& config) {
  return std::make_unique<KimiK2Parser>(config);
}

}  // namespace rill::text
