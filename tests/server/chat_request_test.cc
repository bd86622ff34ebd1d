// parse_chat_request: what is accepted, what becomes a 400 and which parameter the error names.
#include <gtest/gtest.h>

#include "server/openai/chat_request.h"

namespace rill::server {
namespace {

const ParseLimits kLimits{1280, 16, 20};

Json minimal() {
  return Json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
}

Json weather_tool(const char* name = "get_weather") {
  return Json{
      {"type", "function"},
      {"function", {{"name", name}, {"parameters", {{"type", "object"}, {"properties", Json::object()}}}}}};
}

// The request with `patch` merged in (a null value removes the key).
Json with(Json patch) {
  Json body = minimal();
  body.merge_patch(patch);
  return body;
}

// Expects a 400 naming `param`.
void expect_400(const Json& body, const std::string& param) {
  auto r = parse_chat_request(body, kLimits);
  ASSERT_FALSE(r.ok()) << body.dump();
  EXPECT_EQ(r.error().http_status, 400) << body.dump();
  EXPECT_EQ(r.error().param, param) << r.error().message << "  for " << body.dump();
  EXPECT_FALSE(r.error().message.empty());
}

TEST(ChatRequest, MinimalDefaults) {
  auto r = parse_chat_request(minimal(), kLimits);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->sampling.n, 1);
  EXPECT_FALSE(r->sampling.stream);
  EXPECT_FALSE(r->sampling.max_tokens.has_value());  // chat: the room left in the context
  EXPECT_EQ(r->sampling.params.logprobs, -1);
  EXPECT_EQ(r->tool_choice, ToolChoice::None);
  EXPECT_FLOAT_EQ(r->sampling.params.temperature, 1.0f);
}

TEST(ChatRequest, SamplingFieldsAreRead) {
  auto r = parse_chat_request(with({{"temperature", 0},
                                    {"top_p", 0.5},
                                    {"top_k", -1},
                                    {"min_p", 0.1},
                                    {"seed", 7},
                                    {"presence_penalty", -2},
                                    {"frequency_penalty", 2},
                                    {"repetition_penalty", 1.1},
                                    {"stop", "###"},
                                    {"n", 3},
                                    {"max_completion_tokens", 5},
                                    {"logprobs", true},
                                    {"top_logprobs", 20},
                                    {"stream", true},
                                    {"stream_options", {{"include_usage", true}}}}),
                              kLimits);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& p = r->sampling.params;
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 0.5f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(*p.seed, 7u);
  EXPECT_EQ(p.stop, std::vector<std::string>{"###"});
  EXPECT_EQ(r->sampling.n, 3);
  EXPECT_EQ(*r->sampling.max_tokens, 5);
  EXPECT_EQ(p.logprobs, 20);
  EXPECT_TRUE(r->sampling.include_usage);
}

TEST(ChatRequest, MaxCompletionTokensWinsOverMaxTokens) {
  auto r = parse_chat_request(with({{"max_tokens", 9}, {"max_completion_tokens", 4}}), kLimits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->sampling.max_tokens, 4);
}

TEST(ChatRequest, NullFieldsMeanUnset) {
  auto r =
      parse_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}], "temperature": null,
      "stop": null, "tools": null, "tool_choice": null, "n": null, "seed": null})"),
                         kLimits);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->sampling.n, 1);
}

TEST(ChatRequest, UnknownFieldsAreIgnored) {
  EXPECT_TRUE(
      parse_chat_request(with({{"some_future_field", {1, 2}}, {"metadata", {{"a", "b"}}}}), kLimits).ok());
}

TEST(ChatRequest, DeveloperRoleBecomesSystem) {
  Json body = minimal();
  body["messages"] =
      Json::parse(R"([{"role": "developer", "content": "be brief"}, {"role": "user", "content": "x"}])");
  auto r = parse_chat_request(body, kLimits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body["messages"][0]["role"], "system");
}

TEST(ChatRequest, MessagesAreChecked) {
  expect_400(with({{"messages", Json::array()}}), "messages");
  expect_400(with({{"messages", "hello"}}), "messages");
  expect_400(with({{"messages", nullptr}}), "messages");
  expect_400(with({{"messages", {"hi"}}}), "messages[0]");
  expect_400(with({{"messages", {{{"content", "x"}}}}}), "messages[0].role");
  expect_400(with({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}), "messages[0].role");
  expect_400(with({{"messages", {{{"role", 3}, {"content", "x"}}}}}), "messages[0].role");
  expect_400(with({{"messages", {{{"role", "user"}}}}}), "messages[0].content");
  expect_400(with({{"messages", {{{"role", "user"}, {"content", 5}}}}}), "messages[0].content");
  expect_400(
      with({{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}}}),
      "messages[0].content[0].type");
  expect_400(with({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}}}}}}}}),
             "messages[0].content[0].text");
  expect_400(with({{"messages", {{{"role", "user"}, {"content", {{{"type", "bogus"}}}}}}}}),
             "messages[0].content[0].type");
  expect_400(with({{"messages", {{{"role", "tool"}, {"content", "42"}}}}}), "messages[0].tool_call_id");
  expect_400(with({{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"type", "function"}}}}}}}}),
             "messages[0].tool_calls[0].function");
  expect_400(with({{"messages", {{{"role", "user"}, {"content", "x"}, {"name", 1}}}}}), "messages[0].name");
}

TEST(ChatRequest, AssistantMayHaveNullContentWithToolCalls) {
  Json body = minimal();
  body["messages"] = Json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "functions.f:0", "type": "function",
       "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "functions.f:0", "content": "ok"}])");
  auto r = parse_chat_request(body, kLimits);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->n_prior_tool_calls, 1);
}

TEST(ChatRequest, SamplingRanges) {
  expect_400(with({{"temperature", 2.5}}), "temperature");
  expect_400(with({{"temperature", -0.1}}), "temperature");
  expect_400(with({{"temperature", "hot"}}), "temperature");
  expect_400(with({{"top_p", 0}}), "top_p");
  expect_400(with({{"top_p", 1.5}}), "top_p");
  expect_400(with({{"top_k", -2}}), "top_k");
  expect_400(with({{"top_k", 1.5}}), "top_k");
  expect_400(with({{"min_p", 1.5}}), "min_p");
  expect_400(with({{"presence_penalty", 3}}), "presence_penalty");
  expect_400(with({{"frequency_penalty", -2.5}}), "frequency_penalty");
  expect_400(with({{"repetition_penalty", 0}}), "repetition_penalty");
  expect_400(with({{"n", 0}}), "n");
  expect_400(with({{"n", 17}}), "n");
  expect_400(with({{"max_tokens", 0}}), "max_tokens");
  expect_400(with({{"max_completion_tokens", -1}}), "max_completion_tokens");
  expect_400(with({{"seed", "x"}}), "seed");
  expect_400(with({{"stop", 5}}), "stop");
  expect_400(with({{"stop", {"a", 1}}}), "stop");
  expect_400(with({{"stream", "yes"}}), "stream");
  expect_400(with({{"stream_options", {{"include_usage", true}}}}), "stream_options");
  expect_400(with({{"stream", true}, {"stream_options", {{"include_usage", 1}}}}),
             "stream_options.include_usage");
  expect_400(with({{"logprobs", 1}}), "logprobs");
  expect_400(with({{"top_logprobs", 2}}), "top_logprobs");
  expect_400(with({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs");
  expect_400(with({{"logit_bias", {{"5", 10}}}}), "logit_bias");
  expect_400(with({{"stop_token_ids", {1280}}}), "stop_token_ids");
  expect_400(with({{"best_of", 2}}), "best_of");
  expect_400(with({{"chat_template_kwargs", "x"}}), "chat_template_kwargs");
}

// vLLM's output fields are honoured or refused, never accepted and ignored (issue #13).
TEST(ChatRequest, VllmOutputFields) {
  auto r = parse_chat_request(minimal(), kLimits);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->sampling.params.skip_special_tokens);  // vLLM's default
  EXPECT_FALSE(r->sampling.params.include_stop_str_in_output);
  EXPECT_TRUE(r->sampling.params.allowed_token_ids.empty());
  r = parse_chat_request(with({{"skip_special_tokens", false},
                               {"include_stop_str_in_output", true},
                               {"allowed_token_ids", {3, 1279}},
                               {"echo", false},
                               {"stream", true},
                               {"stream_options", {{"continuous_usage_stats", false}}}}),
                         kLimits);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->sampling.params.skip_special_tokens);
  EXPECT_TRUE(r->sampling.params.include_stop_str_in_output);
  EXPECT_EQ(r->sampling.params.allowed_token_ids, (std::vector<int32_t>{3, 1279}));

  expect_400(with({{"skip_special_tokens", 0}}), "skip_special_tokens");
  expect_400(with({{"include_stop_str_in_output", "yes"}}), "include_stop_str_in_output");
  expect_400(with({{"allowed_token_ids", Json::array()}}), "allowed_token_ids");
  expect_400(with({{"allowed_token_ids", {1280}}}), "allowed_token_ids");
  expect_400(with({{"allowed_token_ids", {-1}}}), "allowed_token_ids");
  expect_400(with({{"allowed_token_ids", 5}}), "allowed_token_ids");
  expect_400(with({{"prompt_logprobs", 1}}), "prompt_logprobs");
  expect_400(with({{"prompt_logprobs", 0}}), "prompt_logprobs");
  expect_400(with({{"stream", true}, {"stream_options", {{"continuous_usage_stats", true}}}}),
             "stream_options.continuous_usage_stats");
  expect_400(with({{"echo", true}}), "echo");
}

TEST(ChatRequest, Tools) {
  auto r = parse_chat_request(with({{"tools", {weather_tool()}}}), kLimits);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tool_choice, ToolChoice::Auto);
  EXPECT_EQ(r->n_tools, 1);
  r = parse_chat_request(with({{"tools", {weather_tool()}}, {"tool_choice", "none"}}), kLimits);
  EXPECT_EQ(r->tool_choice, ToolChoice::None);
  r = parse_chat_request(with({{"tools", {weather_tool()}}, {"tool_choice", "required"}}), kLimits);
  EXPECT_EQ(r->tool_choice, ToolChoice::Required);
  r = parse_chat_request(
      with({{"tools", {weather_tool()}},
            {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}),
      kLimits);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tool_choice, ToolChoice::Named);
  EXPECT_EQ(r->tool_choice_name, "get_weather");

  expect_400(with({{"tools", weather_tool()}}), "tools");
  expect_400(with({{"tools", {"x"}}}), "tools[0]");
  expect_400(with({{"tools", {{{"type", "retrieval"}, {"function", {{"name", "f"}}}}}}}), "tools[0].type");
  expect_400(with({{"tools", {{{"type", "function"}}}}}), "tools[0].function");
  expect_400(with({{"tools", {weather_tool("1bad")}}}), "tools[0].function.name");
  expect_400(with({{"tools", {weather_tool("bad@name")}}}), "tools[0].function.name");
  expect_400(with({{"tools", {weather_tool("")}}}), "tools[0].function.name");
  expect_400(with({{"tools", {weather_tool(std::string(257, 'a').c_str())}}}), "tools[0].function.name");
  expect_400(with({{"tools", {weather_tool(), weather_tool()}}}), "tools[1].function.name");
  expect_400(with({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}}}}),
             "tools[0].function.parameters");
  expect_400(with({{"tool_choice", "required"}}), "tool_choice");
  expect_400(with({{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}), "tool_choice");
  expect_400(with({{"tools", {weather_tool()}}, {"tool_choice", "sometimes"}}), "tool_choice");
  expect_400(with({{"tools", {weather_tool()}},
                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "other"}}}}}}),
             "tool_choice");
  expect_400(with({{"tools", {weather_tool()}}, {"tool_choice", 3}}), "tool_choice");
}

TEST(ChatRequest, ResponseFormat) {
  EXPECT_TRUE(parse_chat_request(with({{"response_format", {{"type", "json_object"}}}}), kLimits).ok());
  EXPECT_TRUE(
      parse_chat_request(
          with({{"response_format",
                 {{"type", "json_schema"},
                  {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}}}, {"strict", true}}}}}}),
          kLimits)
          .ok());
  expect_400(with({{"response_format", "json"}}), "response_format");
  expect_400(with({{"response_format", {{"type", "yaml"}}}}), "response_format.type");
  expect_400(with({{"response_format", {{"type", "json_schema"}}}}), "response_format.json_schema");
  expect_400(
      with({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", Json::object()}}}}}}),
      "response_format.json_schema.name");
  expect_400(with({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}),
             "response_format.json_schema.schema");
  expect_400(with({{"response_format",
                    {{"type", "json_schema"},
                     {"json_schema", {{"name", "x"}, {"schema", Json::object()}, {"strict", "y"}}}}}}),
             "response_format.json_schema.strict");
}

// A schema whose compact JSON is exactly `bytes` long: {"type":"object","description":"xxx..."}.
Json schema_of_bytes(size_t bytes) {
  const std::string frame = R"({"type":"object","description":""})";
  return Json{{"type", "object"}, {"description", std::string(bytes - frame.size(), 'x')}};
}

Json tool_with_schema(const std::string& name, Json schema) {
  return Json{{"type", "function"}, {"function", {{"name", name}, {"parameters", std::move(schema)}}}};
}

std::pair<int, std::string> status_of(const Json& body) {
  auto r = parse_chat_request(body, kLimits);
  return r.ok() ? std::pair<int, std::string>{200, ""} : std::pair{r.error().http_status, r.error().param};
}

// Issue #14: OpenAI's 128 tools; a tool schema of at most 128 KiB, all tools at most 512 KiB, a
// response_format schema at most 128 KiB (sizes as compact JSON; 413 naming the field).
TEST(ChatRequest, ToolsAndSchemasAreBounded) {
  using Status = std::pair<int, std::string>;
  auto tools = [](int count) {
    Json list = Json::array();
    for (int i = 0; i < count; ++i) list.push_back(weather_tool(fmt::format("t{}", i).c_str()));
    return list;
  };
  EXPECT_EQ(status_of(with({{"tools", tools(128)}})), (Status{200, ""}));
  EXPECT_EQ(status_of(with({{"tools", tools(129)}})), (Status{400, "tools"}));

  EXPECT_EQ(status_of(with({{"tools", {tool_with_schema("a", schema_of_bytes(128 * 1024))}}})),
            (Status{200, ""}));
  EXPECT_EQ(status_of(with({{"tools", {tool_with_schema("a", schema_of_bytes(128 * 1024 + 1))}}})),
            (Status{413, "tools[0].function.parameters"}));
  Json five = Json::array();  // 5 x 110 KiB: each within its bound, together over 512 KiB
  for (int i = 0; i < 5; ++i)
    five.push_back(tool_with_schema(fmt::format("t{}", i), schema_of_bytes(110 * 1024)));
  EXPECT_EQ(status_of(with({{"tools", five}})), (Status{413, "tools"}));
  five.erase(4);
  EXPECT_EQ(status_of(with({{"tools", five}})), (Status{200, ""}));

  auto response_format = [](Json schema) {
    return Json{{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", std::move(schema)}}}};
  };
  EXPECT_EQ(status_of(with({{"response_format", response_format(schema_of_bytes(128 * 1024))}})),
            (Status{200, ""}));
  EXPECT_EQ(status_of(with({{"response_format", response_format(schema_of_bytes(128 * 1024 + 1))}})),
            (Status{413, "response_format.json_schema.schema"}));
}

TEST(ChatRequest, StopIsBoundedOnChatToo) {
  EXPECT_EQ(status_of(with({{"stop", std::string(1025, 'x')}})), (std::pair<int, std::string>{400, "stop"}));
  EXPECT_EQ(status_of(with({{"n", 17}})), (std::pair<int, std::string>{400, "n"}));
}

TEST(ChatRequest, BodyMustBeAnObject) {
  auto r = parse_chat_request(Json::array(), kLimits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().http_status, 400);
}

}  // namespace
}  // namespace rill::server
