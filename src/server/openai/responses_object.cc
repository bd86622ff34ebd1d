#include "server/openai/responses_object.h"

#include <algorithm>

namespace rill::server {

Json responses_usage_json(const Usage& u) {
  return Json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

std::string sse_event(const Json& event) {
  return "event: " + event.value("type", std::string("message")) + "\ndata: " + dump_json(event) + "\n\n";
}

ResponseBuilder::ResponseBuilder(std::string id, int64_t created_at, std::string model, const Json& echo) {
  response_ = Json{{"id", std::move(id)},
                   {"object", "response"},
                   {"created_at", created_at},
                   {"status", "in_progress"},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"model", std::move(model)},
                   {"output", Json::array()},
                   {"previous_response_id", nullptr},
                   {"store", false},
                   {"usage", nullptr}};
  for (const auto& [key, value] : echo.items()) response_[key] = value;
}

Json ResponseBuilder::event(std::string_view type, Json fields) {
  Json e{{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [key, value] : fields.items()) e[key] = std::move(value);
  return e;
}

Json ResponseBuilder::snapshot(std::string_view status) const {
  Json r = response_;
  r["status"] = status;
  r["output"] = output_;
  return r;
}

std::vector<Json> ResponseBuilder::start() {
  std::vector<Json> out;
  out.push_back(event("response.created", Json{{"response", snapshot("in_progress")}}));
  out.push_back(event("response.in_progress", Json{{"response", snapshot("in_progress")}}));
  return out;
}

void ResponseBuilder::open_item(Open kind, Json item, std::vector<Json>* out) {
  close_item(out);
  open_ = kind;
  text_.clear();
  const int index = int(output_.size());
  output_.push_back(item);
  out->push_back(
      event("response.output_item.added", Json{{"output_index", index}, {"item", std::move(item)}}));
  if (kind == Open::Message || kind == Open::Reasoning) {
    Json part = kind == Open::Message
                    ? Json{{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}
                    : Json{{"type", "reasoning_text"}, {"text", ""}};
    out->push_back(event("response.content_part.added", Json{{"item_id", output_.back()["id"]},
                                                             {"output_index", index},
                                                             {"content_index", 0},
                                                             {"part", std::move(part)}}));
  }
}

void ResponseBuilder::close_item(std::vector<Json>* out) {
  if (open_ == Open::None) return;
  const int index = int(output_.size()) - 1;
  Json& item = output_.back();
  const Json id = item["id"];
  if (open_ == Open::Message || open_ == Open::Reasoning) {
    const bool message = open_ == Open::Message;
    Json part = message ? Json{{"type", "output_text"}, {"text", text_}, {"annotations", Json::array()}}
                        : Json{{"type", "reasoning_text"}, {"text", text_}};
    Json done{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}};
    if (message) done["logprobs"] = Json::array();
    out->push_back(
        event(message ? "response.output_text.done" : "response.reasoning_text.done", std::move(done)));
    out->push_back(
        event("response.content_part.done",
              Json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
    if (message) part["logprobs"] = Json::array();
    item["content"] = Json::array({std::move(part)});
  } else {
    out->push_back(
        event("response.function_call_arguments.done",
              Json{{"item_id", id}, {"output_index", index}, {"name", item["name"]}, {"arguments", text_}}));
    item["arguments"] = text_;
  }
  item["status"] = "completed";
  out->push_back(event("response.output_item.done", Json{{"output_index", index}, {"item", item}}));
  open_ = Open::None;
}

std::vector<Json> ResponseBuilder::on_delta(const text::OutputDelta& d) {
  std::vector<Json> out;
  switch (d.kind) {
    case text::DeltaKind::Reasoning:
      if (open_ != Open::Reasoning)
        open_item(Open::Reasoning,
                  Json{{"id", make_response_id("rs_")},
                       {"type", "reasoning"},
                       {"summary", Json::array()},
                       {"content", Json::array()},
                       {"status", "in_progress"}},
                  &out);
      break;
    case text::DeltaKind::ReasoningEnd:
      if (open_ == Open::Reasoning) close_item(&out);
      return out;
    case text::DeltaKind::Content:
      if (open_ != Open::Message)
        open_item(Open::Message,
                  Json{{"id", make_response_id("msg_")},
                       {"type", "message"},
                       {"status", "in_progress"},
                       {"role", "assistant"},
                       {"content", Json::array()}},
                  &out);
      break;
    case text::DeltaKind::ToolCall:
      if (open_ != Open::Call || !d.tool_id.empty() || !d.tool_name.empty())
        open_item(Open::Call,
                  Json{{"id", make_response_id("fc_")},
                       {"type", "function_call"},
                       {"status", "in_progress"},
                       {"call_id", d.tool_id},
                       {"name", d.tool_name},
                       {"arguments", ""}},
                  &out);
      break;
  }
  if (d.text.empty()) return out;
  text_ += d.text;
  const int index = int(output_.size()) - 1;
  const Json id = output_.back()["id"];
  if (open_ == Open::Call) {
    out.push_back(event("response.function_call_arguments.delta",
                        Json{{"item_id", id}, {"output_index", index}, {"delta", d.text}}));
  } else {
    Json e{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"delta", d.text}};
    if (open_ == Open::Message) e["logprobs"] = Json::array();
    out.push_back(
        event(open_ == Open::Message ? "response.output_text.delta" : "response.reasoning_text.delta",
              std::move(e)));
  }
  return out;
}

std::vector<Json> ResponseBuilder::finish(std::string_view finish_reason, const Usage& usage) {
  std::vector<Json> out;
  // A reply with no text and no call still has its (empty) message, as OpenAI's do.
  const bool answered = std::any_of(output_.begin(), output_.end(), [](const Json& item) {
    return item["type"] == "message" || item["type"] == "function_call";
  });
  if (!answered) out = on_delta(text::OutputDelta{text::DeltaKind::Content, ""});
  close_item(&out);
  const bool incomplete = finish_reason == "length";
  response_["usage"] = responses_usage_json(usage);
  if (incomplete) response_["incomplete_details"] = Json{{"reason", "max_output_tokens"}};
  response_["status"] = incomplete ? "incomplete" : "completed";
  response_["output"] = output_;
  out.push_back(
      event(incomplete ? "response.incomplete" : "response.completed", Json{{"response", response_}}));
  return out;
}

Json ResponseBuilder::error_event(const ApiError& error) {
  const Json body = error_body(error)["error"];
  return event("error", Json{{"code", body["type"]}, {"message", body["message"]}, {"param", body["param"]}});
}

}  // namespace rill::server
