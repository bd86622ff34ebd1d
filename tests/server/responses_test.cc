// The Responses API subset: a Responses request as the chat request it becomes (messages, tools, fields,
// refusals naming the field), and the Response object / stream events one choice's deltas make.
#include <gtest/gtest.h>

#include "server/openai/responses_object.h"
#include "server/openai/responses_request.h"

namespace rill::server {
namespace {

ChatRequest parsed(const Json& body) {
  auto r = parse_responses_request(body, ParseLimits{});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? r.value().chat : ChatRequest{};
}

std::string refused_param(const Json& body) {
  auto r = parse_responses_request(body, ParseLimits{});
  return r.ok() ? "(accepted)" : r.error().param;
}

TEST(ResponsesRequest, StringInputAndInstructions) {
  const ChatRequest c = parsed(Json{{"input", "hi"},
                                    {"instructions", "be brief"},
                                    {"max_output_tokens", 7},
                                    {"temperature", 0},
                                    {"store", false}});
  EXPECT_EQ(c.body["messages"],
            Json::parse(R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])"));
  EXPECT_EQ(c.sampling.max_tokens, 7);
  EXPECT_EQ(c.sampling.params.temperature, 0.0f);
  EXPECT_FALSE(c.sampling.stream);
}

TEST(ResponsesRequest, ItemsBecomeChatTurns) {
  const Json input = Json::parse(R"([
    {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
    {"type": "reasoning", "summary": []},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "calling"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"x\":1}"},
    {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "one"},
    {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}])");
  const Json tools = Json::parse(R"([{"type": "function", "name": "f", "parameters": {"type": "object"}},
                                     {"type": "function", "name": "g", "description": "G"}])");
  const ChatRequest c = parsed(
      Json{{"input", input}, {"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "g"}}}});
  EXPECT_EQ(c.body["messages"], Json::parse(R"([
    {"role": "user", "content": "ab"},
    {"role": "assistant", "content": "calling", "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}},
      {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "one"},
    {"role": "tool", "tool_call_id": "c2", "content": "two"}])"));
  EXPECT_EQ(c.body["tools"],
            Json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
                                             {"type": "function", "function": {"name": "g", "description": "G"}}])"));
  EXPECT_EQ(c.tool_choice, ToolChoice::Named);
  EXPECT_EQ(c.tool_choice_name, "g");
  EXPECT_EQ(c.n_prior_tool_calls, 2);
}

TEST(ResponsesRequest, RefusalsNameTheField) {
  EXPECT_EQ(refused_param(Json{{"input", "x"}, {"previous_response_id", "resp_1"}}), "previous_response_id");
  EXPECT_EQ(refused_param(Json{{"input", "x"}, {"background", true}}), "background");
  EXPECT_EQ(refused_param(Json{{"input", "x"}, {"tools", Json::parse(R"([{"type": "web_search"}])")}}),
            "tools[0].type");
  EXPECT_EQ(refused_param(
                Json{{"input", Json::parse(R"([{"role": "user", "content": [{"type": "input_image"}]}])")}}),
            "input[0].content[0].type");
  EXPECT_EQ(refused_param(Json{{"input", Json::parse(R"([{"type": "item_reference", "id": "x"}])")}}),
            "input[0].type");
  EXPECT_EQ(refused_param(Json{{"input", "x"}, {"max_output_tokens", 0}}), "max_output_tokens");
  EXPECT_EQ(refused_param(Json{{"instructions", "x"}}), "input");
  EXPECT_EQ(refused_param(Json{{"input", Json::array()}}), "input");
  EXPECT_EQ(refused_param(Json{{"input", "x"}, {"store", true}}),
            "(accepted)");  // nothing is stored either way
}

TEST(ResponsesRequest, EchoDefaults) {
  auto r = parse_responses_request(Json{{"input", "x"}, {"top_p", 0.5}}, ParseLimits{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->echo["top_p"], 0.5);
  EXPECT_EQ(r->echo["temperature"], 1.0);
  EXPECT_EQ(r->echo["tools"], Json::array());
  EXPECT_EQ(r->echo["tool_choice"], "auto");
  EXPECT_EQ(r->echo["instructions"], nullptr);
}

std::vector<std::string> types(const std::vector<Json>& events) {
  std::vector<std::string> out;
  for (const Json& e : events) out.push_back(e["type"]);
  return out;
}

TEST(ResponseBuilder, TextMessageEventsAndObject) {
  ResponseBuilder b("resp_1", 17, "tiny", Json{{"temperature", 0}});
  std::vector<Json> all = b.start();
  for (const char* piece : {"Hel", "lo"})
    for (Json& e : b.on_delta({text::DeltaKind::Content, piece})) all.push_back(e);
  for (Json& e : b.finish("stop", Usage{5, 2, 1, 0})) all.push_back(e);
  EXPECT_EQ(types(all), (std::vector<std::string>{"response.created", "response.in_progress",
                                                  "response.output_item.added", "response.content_part.added",
                                                  "response.output_text.delta", "response.output_text.delta",
                                                  "response.output_text.done", "response.content_part.done",
                                                  "response.output_item.done", "response.completed"}));
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]["sequence_number"], i);
  EXPECT_EQ(all[6]["text"], "Hello");
  const Json& r = b.response();
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["temperature"], 0);
  ASSERT_EQ(r["output"].size(), 1u);
  EXPECT_EQ(r["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(r["output"][0]["status"], "completed");
  EXPECT_EQ(r["usage"], Json::parse(R"({"input_tokens": 5, "input_tokens_details": {"cached_tokens": 1},
    "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7})"));
  EXPECT_EQ(all.back()["response"], r);
  EXPECT_EQ(sse_event(all[0]).substr(0, 24), "event: response.created\n");
}

TEST(ResponseBuilder, ReasoningThenCallsAndLength) {
  ResponseBuilder b("resp_2", 17, "tiny", Json::object());
  std::vector<Json> all;
  auto add = [&](std::vector<Json> events) { all.insert(all.end(), events.begin(), events.end()); };
  add(b.on_delta({text::DeltaKind::Reasoning, "hmm"}));
  add(b.on_delta({text::DeltaKind::ReasoningEnd, ""}));
  add(b.on_delta({text::DeltaKind::ToolCall, "", 0, "functions.f:0", "f"}));
  add(b.on_delta({text::DeltaKind::ToolCall, "{\"a\":", 0}));
  add(b.on_delta({text::DeltaKind::ToolCall, "1}", 0}));
  add(b.on_delta({text::DeltaKind::ToolCall, "", 1, "functions.g:1", "g"}));
  add(b.finish("length", Usage{1, 9, 0, 3}));
  const Json& out = b.response()["output"];
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["content"][0], Json::parse(R"({"type": "reasoning_text", "text": "hmm"})"));
  EXPECT_EQ(out[1]["type"], "function_call");
  EXPECT_EQ(out[1]["call_id"], "functions.f:0");
  EXPECT_EQ(out[1]["name"], "f");
  EXPECT_EQ(out[1]["arguments"], "{\"a\":1}");
  EXPECT_EQ(out[2]["arguments"], "");
  EXPECT_EQ(b.response()["status"], "incomplete");
  EXPECT_EQ(b.response()["incomplete_details"], Json::parse(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(all.back()["type"], "response.incomplete");
  int arg_deltas = 0;
  for (const Json& e : all) arg_deltas += e["type"] == "response.function_call_arguments.delta";
  EXPECT_EQ(arg_deltas, 2);
}

TEST(ResponseBuilder, NothingGeneratedIsAnEmptyMessage) {
  ResponseBuilder b("resp_3", 17, "tiny", Json::object());
  b.finish("stop", Usage{});
  ASSERT_EQ(b.response()["output"].size(), 1u);
  EXPECT_EQ(b.response()["output"][0]["type"], "message");
  EXPECT_EQ(b.response()["output"][0]["content"][0]["text"], "");
}

}  // namespace
}  // namespace rill::server
