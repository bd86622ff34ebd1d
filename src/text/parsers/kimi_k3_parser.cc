#include "text/parsers/kimi_k3_parser.h"

#include <optional>
#include <string>
#include <vector>

#include "text/parsers/marker_scanner.h"
#include "text/parsers/xtml_call.h"

namespace rill::text {
namespace {

using namespace k3;  // NOLINT: the marker names are this file's vocabulary

class KimiK3Parser final : public OutputParser {
 public:
  explicit KimiK3Parser(const ParserConfig& config)
      : OutputParser(k3::markers(), k3::is_stop),
        config_(config),
        state_(config.starts_in_reasoning ? State::Think : State::Response) {}

 private:
  // Body: inside the message, between channels. Call: inside one <|open|>call element.
  // The end of the message is OutputParser's (end_message).
  enum class State { Think, Response, Body, Tools, Call };

  void on_text(std::string_view text) override;
  void on_marker(int marker) override;
  void on_finish() override;

  void think_marker(int marker);
  void response_marker(int marker);
  void body_marker(int marker);
  void tools_marker(int marker);
  void call_marker(int marker);
  void stop(int marker) { end_message(marker, config_.stop_at_end_of_message); }
  void finish_call(bool cut_off);
  void flush_garbage();

  ParserConfig config_;
  State state_;
  std::string garbage_;  // Body / Tools: text since the last marker, checked when the next one arrives
  std::optional<XtmlCall> call_;
};

void KimiK3Parser::on_text(std::string_view text) {
  switch (state_) {
    case State::Think:
      emit_reasoning(text);
      return;
    case State::Response:
      emit_content(text);
      return;
    case State::Body:
    case State::Tools:
      garbage_.append(text);
      return;
    case State::Call:
      call_->text(text);
      return;
  }
}

void KimiK3Parser::on_marker(int marker) {
  switch (state_) {
    case State::Think:
      think_marker(marker);
      return;
    case State::Response:
      response_marker(marker);
      return;
    case State::Body:
      body_marker(marker);
      return;
    case State::Tools:
      tools_marker(marker);
      return;
    case State::Call:
      call_marker(marker);
      return;
  }
}

void KimiK3Parser::think_marker(int marker) {
  if (marker == kThinkClose) {
    emit_reasoning_end();
    state_ = State::Body;
  } else if (marker == kResponseOpen || marker == kToolsOpen) {
    // The model skipped <|close|>think<|sep|>: route on, but say so.
    report_unexpected_marker(marker, "the think channel (before <|close|>think<|sep|>)");
    emit_reasoning_end();
    state_ = marker == kResponseOpen ? State::Response : State::Tools;
  } else if (marker == kMessageClose || is_stop(marker)) {
    stop(marker);
  } else {
    report_unexpected_marker(marker, "the think channel");
    emit_reasoning(spelling(marker));
  }
}

void KimiK3Parser::response_marker(int marker) {
  if (marker == kResponseClose) {
    state_ = State::Body;
  } else if (marker == kToolsOpen) {
    report_unexpected_marker(marker, "the response channel (before <|close|>response<|sep|>)");
    state_ = State::Tools;
  } else if (marker == kMessageClose || is_stop(marker)) {
    stop(marker);
  } else {
    report_unexpected_marker(marker, "the response channel");
    emit_content(spelling(marker));
  }
}

void KimiK3Parser::body_marker(int marker) {
  // A think channel may only come first: reasoning after its end boundary, or after content, would
  // break the stream spec's order, so a late one is stray text like any unknown tag.
  bool think_allowed = !result().reasoning_ended && result().content.empty() && result().tool_calls.empty() &&
                       is_blank(garbage_);  // stray text before it becomes content
  bool structural = (marker == kThinkOpen && think_allowed) || marker == kResponseOpen ||
                    marker == kToolsOpen || marker == kMessageClose || is_stop(marker);
  if (!structural) {
    garbage_.append(spelling(marker));  // unknown tags between channels count as stray text
    return;
  }
  flush_garbage();
  if (marker == kThinkOpen) {
    state_ = State::Think;
  } else if (marker == kResponseOpen) {
    state_ = State::Response;
  } else if (marker == kToolsOpen) {
    state_ = State::Tools;
  } else {
    stop(marker);
  }
}

void KimiK3Parser::tools_marker(int marker) {
  if (marker == kCallOpen) {
    flush_garbage();
    call_.emplace();
    state_ = State::Call;
  } else if (marker == kToolsClose) {
    flush_garbage();
    state_ = State::Body;
  } else if (marker == kMessageClose || is_stop(marker)) {
    flush_garbage();
    report(ParseErrorKind::UnterminatedToolSection, -1, "message ended before <|close|>tools<|sep|>");
    stop(marker);
  } else {
    garbage_.append(spelling(marker));
  }
}

void KimiK3Parser::call_marker(int marker) {
  switch (call_->marker(marker)) {
    case XtmlCall::Step::Consumed:
      return;
    case XtmlCall::Step::Complete:
      finish_call(false);
      state_ = State::Tools;
      return;
    case XtmlCall::Step::Rejected:
      finish_call(true);
      state_ = State::Tools;
      tools_marker(marker);
      return;
  }
}

void KimiK3Parser::finish_call(bool cut_off) {
  // Calls are emitted whole, once closed (as TRT-LLM does): K3 argument values are typed text that
  // only becomes JSON once complete, and the section ends the message, so buffering costs little.
  if (!config_.tool_calls) {
    emit_content(call_->raw());  // tool_choice "none": not a call, just text
  } else if (cut_off) {
    // Cut off (max_tokens, the end of the message): dropped, so no protocol markup reaches content. Calls are
    // buffered until closed, so nothing of it was streamed either (vLLM drops incomplete calls too).
    report(ParseErrorKind::TruncatedToolCall, -1,
           fmt::format("tool call {} dropped: {}", quote_excerpt(call_->raw()),
                       call_->problem().empty() ? "the text ended inside it" : call_->problem()));
  } else if (call_->malformed()) {
    report(ParseErrorKind::MalformedToolCall, -1,
           fmt::format("tool call {} emitted as content: {}", quote_excerpt(call_->raw()), call_->problem()));
    emit_content(call_->raw());
  } else {
    int number = config_.first_tool_call_number + static_cast<int>(result().tool_calls.size());
    std::string id = config_.tool_call_ids == ToolCallIdStyle::KimiK2
                         ? fmt::format("functions.{}:{}", call_->name(), number)
                         : fmt::format("{}_{}", call_->name(), number);
    int index = emit_tool_call_begin(std::move(id), call_->name());
    std::vector<std::string> problems;
    emit_tool_call_arguments(index, call_->arguments(problems));
    for (std::string& problem : problems) report(ParseErrorKind::InvalidArguments, index, std::move(problem));
  }
  call_.reset();
}

void KimiK3Parser::flush_garbage() {
  flush_unexpected_text(garbage_, "outside the XTML channels");
}

void KimiK3Parser::on_finish() {
  switch (state_) {
    case State::Think:  // cut off while thinking: no end boundary
    case State::Response:
      return;
    case State::Body:
      flush_garbage();
      return;
    case State::Tools:
      flush_garbage();
      report(ParseErrorKind::UnterminatedToolSection, -1, "text ended before <|close|>tools<|sep|>");
      return;
    case State::Call:
      finish_call(true);
      return;
  }
}

}  // namespace

std::unique_ptr<OutputParser> make_kimi_k3_parser(const ParserConfig& config) {
  return std::make_unique<KimiK3Parser>(config);
}

}  // namespace rill::text
