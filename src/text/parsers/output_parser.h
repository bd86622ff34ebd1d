// Streaming output parsers: split generated text (special tokens appear as their names) into the
// parts of an OpenAI assistant message — reasoning_content, content and tool_calls — while it streams.
//
// The server makes one parser per request with make_output_parser(), calls feed() with every piece
// of detokenized text and finish() once generation ends; each call returns the deltas it completed,
// in order, one delta per SSE frame. Whatever the split of the text into pieces (inside markers,
// inside UTF-8 sequences, one byte at a time), the deltas and result() are those of the whole text
// fed at once, modulo how text increments are grouped:
//   * concatenating the deltas of one field gives that field of result();
//   * no delta shows a partial marker, or cuts a UTF-8 sequence (text that could still become a
//     marker is held back until it is disambiguated or finish() is called);
//   * malformed tool-call markup never throws: it is reported in result().errors and its text is
//     emitted as content, except the arguments of a call whose header was already streamed (K2),
//     which stay in that call (README.md, Gotchas).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rill::text {

enum class ModelFamily {
  KimiK2,  // K2 / Kimi-Linear: <think>…</think>, <|tool_calls_section_begin|>…, stop <|im_end|>
  KimiK3,  // K3 XTML: <|open|>think<|sep|>…, <|open|>tools<|sep|>…, stop <|end_of_msg|>
};

enum class ToolCallIdStyle {
  FamilyDefault,  // KimiK2 for the K2 family, NameIndex for K3
  KimiK2,         // K2: the id the model wrote ("functions.NAME:IDX"); K3: "functions.NAME:<n>"
  NameIndex,      // "NAME_<n>", the Kimi stream spec's `<name>_<global_idx>` (serving.md §1.3)
};

struct ParserConfig {
  ModelFamily family = ModelFamily::KimiK2;
  // K2 only: "<think>…</think>" opens a reasoning channel. Off for Kimi-Linear-Instruct, which has
  // none; then the tags are plain content.
  bool k2_reasoning = true;
  // The prompt already opened the reasoning channel: K3 with thinking on (the generation prompt
  // ends in "<|open|>think<|sep|>"; off: "<|open|>response<|sep|>"), or a K2 template whose
  // prompt ends in "<think>". Requires k2_reasoning for K2.
  bool starts_in_reasoning = false;
  ToolCallIdStyle tool_call_ids = ToolCallIdStyle::FamilyDefault;
  // <n> of the first tool call of this response in synthesized ids: the number of tool calls
  // earlier in the conversation, so ids stay unique across turns ("global index").
  int first_tool_call_number = 0;
  // K3: false under tool_choice "none": a call the model writes anyway is not a tool call; its text goes to
  // content as written (vLLM returns the output unparsed when tool_choice is none).
  bool tool_calls = true;
  // false (ignore_eos): the end of the message does not end the output; its marker and everything after it
  // are content as written, instead of being dropped.
  bool stop_at_end_of_message = true;

  Status validate() const;
};

enum class DeltaKind {
  Reasoning,     // text: a reasoning_content increment
  ReasoningEnd,  // the reasoning channel closed: the stream spec's `reasoning_content: ""` frame
  Content,       // text: a content increment
  ToolCall,      // tool_index; tool_id + tool_name on the first delta of an index only; text: an
                 // arguments piece ("" on that first delta, as the stream spec requires)
};

struct OutputDelta {
  DeltaKind kind = DeltaKind::Content;
  std::string text{};
  int tool_index = -1;
  std::string tool_id{};
  std::string tool_name{};

  bool operator==(const OutputDelta&) const = default;
};

struct ToolCall {
  std::string id{};
  std::string name{};
  std::string arguments{};  // a JSON object as text, unless an error names this call

  bool operator==(const ToolCall&) const = default;
};

// A new kind goes last, with its name at the end of output_parser.cc's kParseErrorKindNames.
enum class ParseErrorKind {
  MalformedToolCall,        // unparseable call markup; its text was emitted as content
  TruncatedToolCall,        // a call cut off by the end of the text or by another marker
  InvalidArguments,         // arguments that are not the declared JSON (kept as written)
  UnterminatedToolSection,  // a tool-calls section that never closed
  UnexpectedText,           // text where only markup may stand (emitted as content)
  UnexpectedMarker,         // a marker that means nothing where it stands (emitted as text)
  TextAfterStop,            // text after the end of the message (dropped unless !stop_at_end_of_message)
};

struct ParseError {
  ParseErrorKind kind = ParseErrorKind::MalformedToolCall;
  int tool_index = -1;    // the affected entry of ParseResult::tool_calls, or -1
  std::string message{};  // names the marker or quotes the offending text

  bool operator==(const ParseError&) const = default;
};

struct ParseResult {
  std::string reasoning{};
  std::string content{};
  std::vector<ToolCall> tool_calls{};
  std::vector<ParseError> errors{};
  bool reasoning_ended = false;  // a ReasoningEnd delta was emitted
  bool stop_seen = false;        // an end-of-message marker was parsed (<|im_end|>, <|end_of_msg|>, ...)

  // Finish hint: "tool_calls" when calls were produced; otherwise the caller's own reason.
  bool has_tool_calls() const { return !tool_calls.empty(); }
  bool operator==(const ParseResult&) const = default;
};

const char* parse_error_kind_name(ParseErrorKind kind);

class MarkerScanner;

// One request's parser. Not thread-safe; feed() after finish() is ignored.
class OutputParser {
 public:
  virtual ~OutputParser();
  OutputParser(const OutputParser&) = delete;
  OutputParser& operator=(const OutputParser&) = delete;

  std::vector<OutputDelta> feed(std::string_view text);
  std::vector<OutputDelta> finish();
  // Everything emitted so far; complete after finish().
  const ParseResult& result() const { return result_; }

 protected:
  // `markers`: the family's marker spellings (on_marker's index), alive as long as the parser; `is_stop`: its
  // end-of-message markers.
  OutputParser(const std::vector<std::string_view>& markers, bool (*is_stop)(int marker));

  // Emission helpers: each appends to result() and to the deltas of the current call together,
  // which is what makes "deltas concatenate to the result" hold by construction.
  void emit_reasoning(std::string_view text);
  void emit_reasoning_end();
  void emit_content(std::string_view text);
  int emit_tool_call_begin(std::string id, std::string name);  // returns the new call's index
  void emit_tool_call_arguments(int index, std::string_view piece);
  void report(ParseErrorKind kind, int tool_index, std::string message);
  // A marker that means nothing where it stands: reported as "{marker} in {where}, kept as text" (the
  // family then emits it as text).
  void report_unexpected_marker(int marker, std::string_view where);
  // The family's state machine reached the end of the message at `marker` (ParseResult::stop_seen). The end
  // state is this class's, the same for every family: everything after it — text, markers, the finish — is
  // counted and dropped when `drop` (ParserConfig::stop_at_end_of_message; a stop marker after it is not
  // counted: <|close|>message<|sep|> is normally followed by <|end_of_msg|>), with one TextAfterStop error at
  // the finish; else it is content as written, `marker` included. The family's on_text / on_marker /
  // on_finish are not called again.
  void end_message(int marker, bool drop);
  // Text between markers that the family does not expect there (`garbage`, then cleared): unless blank,
  // reported as "text {where}" and emitted as content.
  void flush_unexpected_text(std::string& garbage, std::string_view where);

 private:
  // The family's state machine, driven by the marker scanner in text order.
  virtual void on_text(std::string_view text) = 0;
  virtual void on_marker(int marker) = 0;  // index into the constructor's marker list
  virtual void on_finish() = 0;            // end of text: close whatever is open
  void drain(bool at_end);
  // After end_message: a piece of what follows (counted and dropped, or content).
  void after_end(std::string_view text);

  const std::vector<std::string_view>& markers_;
  bool (*is_stop_)(int marker);
  std::unique_ptr<MarkerScanner> scanner_;
  ParseResult result_;
  std::vector<OutputDelta> pending_;
  bool finished_ = false;
  bool ended_ = false;             // end_message was called
  bool drop_after_end_ = true;     // its `drop`
  size_t dropped_after_end_ = 0;  // bytes after the end that were dropped
};

// Builds the parser for one request; fails on a contradictory config.
Result<std::unique_ptr<OutputParser>> make_output_parser(const ParserConfig& config);

}  // namespace rill::text
