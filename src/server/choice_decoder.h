// One engine request's events -> the frames of one OpenAI choice: parser deltas (reasoning_content,
// content, tool_calls) with the logprobs of the tokens they came from, then a finish frame with the finish
// reason and usage. Used by both endpoints and by `rill chat`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/openai/response.h"
#include "text/parsers/output_parser.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::server {

struct ChoiceFrame {
  bool finish = false;
  text::OutputDelta delta;                     // !finish
  std::vector<engine::TokenLogprob> logprobs;  // the tokens this frame covers (may be empty)
  std::string finish_reason;  // finish: stop | length | tool_calls | server_interrupted | error
  Status error;               // finish_reason "error": what the engine reported
  Usage usage;                // finish
};

class ChoiceDecoder {
 public:
  // `parser` null: raw text, every piece is content (completions; chat without tool or reasoning parsing).
  // The engine's text already leaves out stop ids and skipped special tokens.
  ChoiceDecoder(std::unique_ptr<text::OutputParser> parser, bool starts_in_reasoning);

  // Text the prompt already holds on the generated side (a forced tool-call opening), parsed first.
  std::vector<ChoiceFrame> begin(std::string_view forced_prefix);
  std::vector<ChoiceFrame> on_event(const engine::StreamEvent& event);
  bool finished() const { return finished_; }
  // The whole message so far (complete after the finish frame).
  const text::ParseResult& result() const { return parser_ ? parser_->result() : raw_; }

 private:
  void emit(std::vector<text::OutputDelta> deltas, std::vector<ChoiceFrame>* out);

  std::unique_ptr<text::OutputParser> parser_;
  text::ParseResult raw_;
  std::vector<engine::TokenLogprob> pending_logprobs_;
  bool in_reasoning_;
  int64_t reasoning_tokens_ = 0;
  bool finished_ = false;
};

// Logprob entries with token text (U+FFFD for partial UTF-8) and raw bytes, for response.h.
std::vector<LogprobEntry> logprob_entries(const std::vector<engine::TokenLogprob>& logprobs,
                                          const text::Tokenizer& tokenizer);

}  // namespace rill::server
