#include "server/choice_decoder.h"

#include <algorithm>

namespace rill::server {

ChoiceDecoder::ChoiceDecoder(std::unique_ptr<text::OutputParser> parser, bool starts_in_reasoning)
    : parser_(std::move(parser)), in_reasoning_(starts_in_reasoning) {}

void ChoiceDecoder::emit(std::vector<text::OutputDelta> deltas, std::vector<ChoiceFrame>* out) {
  for (text::OutputDelta& d : deltas) {
    if (d.text.empty() && (d.kind == text::DeltaKind::Content || d.kind == text::DeltaKind::Reasoning))
      continue;
    ChoiceFrame f;
    f.delta = std::move(d);
    f.logprobs = std::move(pending_logprobs_);
    pending_logprobs_.clear();
    out->push_back(std::move(f));
  }
}

std::vector<ChoiceFrame> ChoiceDecoder::begin(std::string_view forced_prefix) {
  std::vector<ChoiceFrame> out;
  if (parser_ && !forced_prefix.empty()) emit(parser_->feed(forced_prefix), &out);
  return out;
}

std::vector<ChoiceFrame> ChoiceDecoder::on_event(const engine::StreamEvent& ev) {
  std::vector<ChoiceFrame> out;
  if (finished_) return out;
  pending_logprobs_.insert(pending_logprobs_.end(), ev.logprobs.begin(), ev.logprobs.end());
  std::vector<text::OutputDelta> deltas;
  if (parser_) {
    deltas = parser_->feed(ev.text);
  } else {
    raw_.content += ev.text;
    deltas.push_back(text::OutputDelta{text::DeltaKind::Content, ev.text});
  }
  // Reasoning tokens: an event's tokens count as reasoning when the parser was in the reasoning channel
  // before them or routed any of their text there (an event straddling the boundary counts whole).
  bool reasoning = in_reasoning_;
  for (const text::OutputDelta& d : deltas) {
    if (d.kind == text::DeltaKind::Reasoning) reasoning = in_reasoning_ = true;
    if (d.kind == text::DeltaKind::ReasoningEnd || d.kind == text::DeltaKind::Content ||
        d.kind == text::DeltaKind::ToolCall)
      in_reasoning_ = false;
  }
  if (reasoning) reasoning_tokens_ += int64_t(ev.token_ids.size());
  emit(std::move(deltas), &out);
  if (!ev.finish) return out;

  if (parser_) emit(parser_->finish(), &out);
  finished_ = true;
  ChoiceFrame f;
  f.finish = true;
  f.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  switch (*ev.finish) {
    case engine::FinishReason::Stop:
      f.finish_reason = result().has_tool_calls() ? "tool_calls" : "stop";
      break;
    case engine::FinishReason::Length:
      f.finish_reason = "length";
      break;
    case engine::FinishReason::Cancelled:
      f.finish_reason = "server_interrupted";
      break;
    case engine::FinishReason::Error:
      f.finish_reason = "error";
      f.error = ev.error.ok() ? internal_error("the engine failed this request") : ev.error;
      break;
  }
  f.usage.prompt_tokens = ev.prompt_tokens;
  f.usage.completion_tokens = ev.completion_tokens;
  f.usage.cached_tokens = ev.cached_tokens;
  f.usage.reasoning_tokens = std::min<int64_t>(reasoning_tokens_, ev.completion_tokens);
  out.push_back(std::move(f));
  return out;
}

std::vector<LogprobEntry> logprob_entries(const std::vector<engine::TokenLogprob>& logprobs,
                                          const text::Tokenizer& tokenizer) {
  auto entry = [&](int32_t id, float lp) {
    LogprobEntry e;
    e.logprob = lp;
    if (id >= 0 && id < tokenizer.vocab_size()) {
      e.bytes = std::string(tokenizer.token_bytes(id));
      const int32_t one[1] = {id};
      auto text = tokenizer.decode(one);
      e.token = text.ok() ? *text : e.bytes;
    }
    return e;
  };
  std::vector<LogprobEntry> out;
  out.reserve(logprobs.size());
  for (const engine::TokenLogprob& t : logprobs) {
    LogprobEntry e = entry(t.id, t.logprob);
    for (const auto& [id, lp] : t.top) e.top.push_back(entry(id, lp));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace rill::server
