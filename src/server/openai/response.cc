#include "server/openai/response.h"

#include <chrono>
#include <mutex>
#include <random>

namespace rill::server {

Usage& Usage::operator+=(const Usage& o) {
  prompt_tokens += o.prompt_tokens;
  completion_tokens += o.completion_tokens;
  cached_tokens += o.cached_tokens;
  reasoning_tokens += o.reasoning_tokens;
  return *this;
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

std::string make_response_id(std::string_view prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = rng();
    b = rng();
  }
  return fmt::format("{}{:016x}{:08x}", prefix, a, uint32_t(b));
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

Json bytes_json(const std::string& bytes) {
  Json out = Json::array();
  for (unsigned char c : bytes) out.push_back(int(c));
  return out;
}

Json chat_logprob_entry(const LogprobEntry& e, bool with_top) {
  Json j{{"token", e.token}, {"logprob", e.logprob}, {"bytes", bytes_json(e.bytes)}};
  if (with_top) {
    Json top = Json::array();
    for (const LogprobEntry& t : e.top) top.push_back(chat_logprob_entry(t, false));
    j["top_logprobs"] = std::move(top);
  }
  return j;
}

Json header_json(const ResponseHeader& h, std::string_view object) {
  return Json{{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

// One choice, and `"usage": null` when the stream ends with a usage chunk (OpenAI).
Json stream_chunk(const ResponseHeader& header, std::string_view object, Json choice, bool usage_null) {
  Json j = header_json(header, object);
  j["choices"] = Json::array({std::move(choice)});
  if (usage_null) j["usage"] = nullptr;
  return j;
}

Json stream_usage_chunk(const ResponseHeader& header, std::string_view object, const Usage& usage) {
  Json j = header_json(header, object);
  j["choices"] = Json::array();
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace

Json chat_logprobs_json(const std::vector<LogprobEntry>& entries) {
  Json content = Json::array();
  for (const LogprobEntry& e : entries) content.push_back(chat_logprob_entry(e, true));
  return Json{{"content", std::move(content)}};
}

Json chat_delta_json(const text::OutputDelta& d) {
  switch (d.kind) {
    case text::DeltaKind::Reasoning:
    case text::DeltaKind::ReasoningEnd:
      return Json{{"reasoning_content", d.text}};
    case text::DeltaKind::Content:
      return Json{{"content", d.text}};
    case text::DeltaKind::ToolCall: {
      Json call{{"index", d.tool_index}};
      if (!d.tool_id.empty() || !d.tool_name.empty()) {
        call["id"] = d.tool_id;
        call["type"] = "function";
        call["function"] = Json{{"name", d.tool_name}, {"arguments", d.text}};
      } else {
        call["function"] = Json{{"arguments", d.text}};
      }
      return Json{{"tool_calls", Json::array({std::move(call)})}};
    }
  }
  return Json::object();
}

Json chat_chunk_choice(int index, Json delta, std::string_view finish_reason, Json logprobs) {
  Json c{{"index", index}, {"delta", std::move(delta)}};
  c["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  if (!logprobs.is_null()) c["logprobs"] = std::move(logprobs);
  return c;
}

Json chat_chunk(const ResponseHeader& header, Json choice, bool usage_null) {
  return stream_chunk(header, "chat.completion.chunk", std::move(choice), usage_null);
}

Json chat_usage_chunk(const ResponseHeader& header, const Usage& usage) {
  return stream_usage_chunk(header, "chat.completion.chunk", usage);
}

Json chat_completion_json(const ResponseHeader& header, const std::vector<ChatChoice>& choices,
                          const Usage& usage) {
  Json j = header_json(header, "chat.completion");
  Json list = Json::array();
  for (const ChatChoice& c : choices) {
    const text::ParseResult& p = c.parsed;
    Json message{{"role", "assistant"}};
    message["content"] = p.content.empty() && p.has_tool_calls() ? Json(nullptr) : Json(p.content);
    if (!p.reasoning.empty()) message["reasoning_content"] = p.reasoning;
    if (p.has_tool_calls()) {
      Json calls = Json::array();
      for (const text::ToolCall& t : p.tool_calls)
        calls.push_back(Json{{"id", t.id},
                             {"type", "function"},
                             {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      message["tool_calls"] = std::move(calls);
    }
    list.push_back(Json{{"index", c.index},
                        {"message", std::move(message)},
                        {"logprobs", c.logprobs},
                        {"finish_reason", c.finish_reason}});
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_json(usage);
  return j;
}

Json completion_logprobs_json(const std::vector<LogprobEntry>& entries, int64_t offset) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.token);
    lps.push_back(e.logprob);
    Json top = Json::object();
    for (const LogprobEntry& t : e.top) top[t.token] = t.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += int64_t(e.token.size());
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(lps)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

Json completion_choice_json(int index, std::string_view text, std::string_view finish_reason, Json logprobs) {
  Json c{{"index", index}, {"text", text}, {"logprobs", std::move(logprobs)}};
  c["finish_reason"] = finish_reason.empty() ? Json(nullptr) : Json(finish_reason);
  return c;
}

Json completion_json(const ResponseHeader& header, Json choices, const Usage* usage) {
  Json j = header_json(header, "text_completion");
  j["choices"] = std::move(choices);
  if (usage) j["usage"] = usage_json(*usage);
  return j;
}

Json completion_chunk(const ResponseHeader& header, Json choice, bool usage_null) {
  return stream_chunk(header, "text_completion", std::move(choice), usage_null);
}

Json completion_usage_chunk(const ResponseHeader& header, const Usage& usage) {
  return stream_usage_chunk(header, "text_completion", usage);
}

std::string dump_json(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string sse_data(const Json& value) {
  return "data: " + dump_json(value) + "\n\n";
}

}  // namespace rill::server
