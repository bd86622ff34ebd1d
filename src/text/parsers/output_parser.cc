#include "text/parsers/output_parser.h"

#include <array>
#include <utility>

#include "text/parsers/kimi_k2_parser.h"
#include "text/parsers/kimi_k3_parser.h"
#include "text/parsers/marker_scanner.h"

namespace rill::text {

Status ParserConfig::validate() const {
  if (family == ModelFamily::KimiK2 && starts_in_reasoning && !k2_reasoning) {
    return invalid_argument("output parser: starts_in_reasoning needs k2_reasoning for the K2 family");
  }
  if (first_tool_call_number < 0) {
    return invalid_argument("output parser: first_tool_call_number must be >= 0, got {}",
                            first_tool_call_number);
  }
  return Status::ok_status();
}

namespace {
// Indexed by ParseErrorKind, in its order.
constexpr std::array<const char*, 7> kParseErrorKindNames = {
    "malformed tool call",
    "truncated tool call",
    "invalid tool call arguments",
    "unterminated tool-calls section",
    "unexpected text",
    "unexpected marker",
    "text after end of message",
};
static_assert(kParseErrorKindNames.size() == size_t(ParseErrorKind::TextAfterStop) + 1,
              "a name for every ParseErrorKind");
}  // namespace

const char* parse_error_kind_name(ParseErrorKind kind) {
  return size_t(kind) < kParseErrorKindNames.size() ? kParseErrorKindNames[size_t(kind)] : "unknown";
}

OutputParser::OutputParser(const std::vector<std::string_view>& markers, bool (*is_stop)(int marker))
    : markers_(markers), is_stop_(is_stop), scanner_(std::make_unique<MarkerScanner>(markers)) {}

OutputParser::~OutputParser() = default;

std::vector<OutputDelta> OutputParser::feed(std::string_view text) {
  if (finished_) return {};
  scanner_->feed(text);
  drain(false);
  return std::exchange(pending_, {});
}

std::vector<OutputDelta> OutputParser::finish() {
  if (finished_) return {};
  finished_ = true;
  // A marker cut off by the end of the text (max_tokens mid-marker: K3's "<|close|>re") is dropped, never
  // released as content or reasoning.
  scanner_->drop_cut_marker();
  drain(true);
  if (!ended_) {
    on_finish();
  } else if (dropped_after_end_ > 0) {
    report(ParseErrorKind::TextAfterStop, -1,
           fmt::format("{} bytes after the end of the message were dropped", dropped_after_end_));
  }
  return std::exchange(pending_, {});
}

void OutputParser::drain(bool at_end) {
  MarkerScanner::Token token;
  while (scanner_->next(token, at_end)) {
    if (ended_) {  // the end state is this class's (end_message)
      if (!token.is_marker)
        after_end(token.text);
      else if (!drop_after_end_ || !is_stop_(token.marker))
        after_end(markers_[static_cast<size_t>(token.marker)]);
    } else if (token.is_marker) {
      on_marker(token.marker);
    } else {
      on_text(token.text);
    }
  }
}

void OutputParser::end_message(int marker, bool drop) {
  result_.stop_seen = true;
  ended_ = true;
  drop_after_end_ = drop;
  if (!drop) emit_content(markers_[static_cast<size_t>(marker)]);
}

void OutputParser::after_end(std::string_view text) {
  if (drop_after_end_)
    dropped_after_end_ += text.size();
  else
    emit_content(text);
}

void OutputParser::emit_reasoning(std::string_view text) {
  if (text.empty()) return;
  result_.reasoning.append(text);
  // One delta per run of the same field keeps the SSE frame count down.
  if (!pending_.empty() && pending_.back().kind == DeltaKind::Reasoning) {
    pending_.back().text.append(text);
  } else {
    pending_.push_back({.kind = DeltaKind::Reasoning, .text = std::string(text)});
  }
}

void OutputParser::emit_reasoning_end() {
  result_.reasoning_ended = true;
  pending_.push_back({.kind = DeltaKind::ReasoningEnd});
}

void OutputParser::emit_content(std::string_view text) {
  if (text.empty()) return;
  result_.content.append(text);
  if (!pending_.empty() && pending_.back().kind == DeltaKind::Content) {
    pending_.back().text.append(text);
  } else {
    pending_.push_back({.kind = DeltaKind::Content, .text = std::string(text)});
  }
}

int OutputParser::emit_tool_call_begin(std::string id, std::string name) {
  int index = static_cast<int>(result_.tool_calls.size());
  result_.tool_calls.push_back({.id = id, .name = name, .arguments = ""});
  pending_.push_back({.kind = DeltaKind::ToolCall,
                      .text = "",
                      .tool_index = index,
                      .tool_id = std::move(id),
                      .tool_name = std::move(name)});
  return index;
}

void OutputParser::emit_tool_call_arguments(int index, std::string_view piece) {
  if (piece.empty()) return;
  result_.tool_calls.at(static_cast<size_t>(index)).arguments.append(piece);
  // The first delta of a call stays arguments-free (stream spec); later pieces of one call merge.
  if (!pending_.empty() && pending_.back().kind == DeltaKind::ToolCall &&
      pending_.back().tool_index == index && pending_.back().tool_id.empty()) {
    pending_.back().text.append(piece);
  } else {
    pending_.push_back({.kind = DeltaKind::ToolCall, .text = std::string(piece), .tool_index = index});
  }
}

void OutputParser::report(ParseErrorKind kind, int tool_index, std::string message) {
  result_.errors.push_back({.kind = kind, .tool_index = tool_index, .message = std::move(message)});
}

void OutputParser::report_unexpected_marker(int marker, std::string_view where) {
  report(ParseErrorKind::UnexpectedMarker, -1,
         fmt::format("{} in {}, kept as text", markers_[static_cast<size_t>(marker)], where));
}

void OutputParser::flush_unexpected_text(std::string& garbage, std::string_view where) {
  if (!is_blank(garbage)) {
    report(ParseErrorKind::UnexpectedText, -1,
           fmt::format("text {}, emitted as content: {}", where, quote_excerpt(garbage)));
    emit_content(garbage);
  }
  garbage.clear();
}

Result<std::unique_ptr<OutputParser>> make_output_parser(const ParserConfig& config) {
  RILL_TRY(config.validate());
  switch (config.family) {
    case ModelFamily::KimiK2:
      return make_kimi_k2_parser(config);
    case ModelFamily::KimiK3:
      return make_kimi_k3_parser(config);
  }
  return invalid_argument("output parser: unknown model family {}", static_cast<int>(config.family));
}

}  // namespace rill::text
