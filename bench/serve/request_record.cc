#include "bench/serve/request_record.h"

#include <nlohmann/json.hpp>

namespace rill::bench::serve {
namespace {

using Json = nlohmann::json;

// The output text a choice frame carries: completions' `text`, or chat's delta (content, reasoning, tool-call
// arguments), empty for the role frame and the finish frame.
std::string choice_text(const Json& choice) {
  std::string out;
  auto add = [&](const Json& obj, const char* key) {
    const auto v = obj.find(key);
    if (v != obj.end() && v->is_string()) out += v->get<std::string>();
  };
  add(choice, "text");
  const auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return out;
  add(*delta, "content");
  add(*delta, "reasoning_content");
  const auto calls = delta->find("tool_calls");
  if (calls != delta->end() && calls->is_array()) {
    for (const Json& c : *calls) {
      const auto fn = c.find("function");
      if (fn == c.end() || !fn->is_object()) continue;
      add(*fn, "name");
      add(*fn, "arguments");
    }
  }
  return out;
}

}  // namespace

void SseRecorder::feed(std::string_view bytes, double t) {
  pending_.append(bytes);
  size_t begin = 0;
  for (size_t nl; (nl = pending_.find('\n', begin)) != std::string::npos; begin = nl + 1) {
    std::string_view l(pending_.data() + begin, nl - begin);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    line(l, t);
  }
  pending_.erase(0, begin);
}

void SseRecorder::line(std::string_view l, double t) {
  if (!l.starts_with("data:")) return;  // blank separators, comments, event:/id: fields
  l.remove_prefix(5);
  if (l.starts_with(' ')) l.remove_prefix(1);
  frame(l, t);
}

void SseRecorder::frame(std::string_view data, double t) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  const Json j = Json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    if (r_.error.empty())
      r_.error = "a stream frame that is not a JSON object: " + std::string(data.substr(0, 200));
    return;
  }
  if (const auto e = j.find("error"); e != j.end() && !e->is_null()) {
    if (r_.error.empty())
      r_.error =
          "error frame: " + (e->is_object() && e->contains("message") ? e->at("message").dump() : e->dump());
    return;
  }
  if (const auto c = j.find("choices"); c != j.end() && c->is_array()) {
    std::string text;
    for (const Json& choice : *c) text += choice_text(choice);
    if (!text.empty()) {
      if (!seen_output_)
        r_.ttft_s = t;
      else
        r_.itl_s.push_back(t - last_output_);
      seen_output_ = true;
      last_output_ = t;
      r_.text += text;
    }
  }
  if (const auto u = j.find("usage"); u != j.end() && u->is_object()) {
    r_.prompt_tokens = u->value("prompt_tokens", int64_t(-1));
    r_.completion_tokens = u->value("completion_tokens", int64_t(-1));
  }
}

void SseRecorder::finish(double t) {
  if (!pending_.empty()) {
    line(pending_, t);
    pending_.clear();
  }
  r_.latency_s = t;
  if (!seen_output_) r_.ttft_s = t;  // no text at all (every token decoded to nothing): first byte = last
  if (r_.error.empty() && !done_) r_.error = "the stream ended without data: [DONE]";
  if (r_.error.empty() && (r_.prompt_tokens < 0 || r_.completion_tokens < 0))
    r_.error = "no usage chunk in the stream (the server ignored stream_options.include_usage)";
  r_.ok = r_.error.empty();
}

}  // namespace rill::bench::serve
