// Response objects, SSE framing (serving.md §1.3 and the Kimi stream spec) and error envelopes.
#include <gtest/gtest.h>

#include <regex>

#include "server/openai/response.h"

namespace rill::server {
namespace {

const ResponseHeader kHeader{"chatcmpl-0123456789abcdef01234567", 1700000000, "tiny"};

Json parse_sse(const std::string& frame) {
  EXPECT_TRUE(frame.starts_with("data: ")) << frame;
  EXPECT_TRUE(frame.ends_with("\n\n")) << frame;
  EXPECT_EQ(frame.find('\n'), frame.size() - 2) << "one line per frame: " << frame;
  return Json::parse(frame.substr(6, frame.size() - 8));
}

TEST(Sse, FramesAndDone) {
  const std::string frame = sse_data(Json{{"a", "x\ny"}});
  EXPECT_EQ(frame, "data: {\"a\":\"x\\ny\"}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Sse, InvalidUtf8IsReplacedNotThrown) {
  const std::string frame = sse_data(Json{{"a", std::string("\xe2\x82", 2)}});
  EXPECT_NE(frame.find("\xef\xbf\xbd"), std::string::npos);
}

TEST(Ids, Format) {
  const std::regex chat("^chatcmpl-[0-9a-f]{24}$"), cmpl("^cmpl-[0-9a-f]{24}$");
  EXPECT_TRUE(std::regex_match(make_response_id("chatcmpl-"), chat));
  EXPECT_TRUE(std::regex_match(make_response_id("cmpl-"), cmpl));
  EXPECT_NE(make_response_id("x"), make_response_id("x"));
}

TEST(ChatChunk, RoleFrame) {
  Json role{{"role", "assistant"}, {"content", ""}};
  Json j = parse_sse(sse_data(chat_chunk(kHeader, chat_chunk_choice(0, role, ""), false)));
  EXPECT_EQ(j["id"], kHeader.id);
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  const Json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_TRUE(c.contains("finish_reason") && c["finish_reason"].is_null());
  EXPECT_FALSE(c.contains("logprobs"));
  EXPECT_EQ(c["delta"], role);
  EXPECT_FALSE(j.contains("usage"));
}

TEST(ChatChunk, DeltasCarryExactlyOneKey) {
  using text::DeltaKind;
  EXPECT_EQ(chat_delta_json({DeltaKind::Content, "hi"}), Json({{"content", "hi"}}));
  EXPECT_EQ(chat_delta_json({DeltaKind::Reasoning, "hm"}), Json({{"reasoning_content", "hm"}}));
  EXPECT_EQ(chat_delta_json({DeltaKind::ReasoningEnd, ""}), Json({{"reasoning_content", ""}}));
  const Json first = chat_delta_json({DeltaKind::ToolCall, "", 0, "functions.f:0", "f"});
  EXPECT_EQ(first, Json::parse(R"({"tool_calls":[{"index":0,"id":"functions.f:0","type":"function",
                                   "function":{"name":"f","arguments":""}}]})"));
  const Json more = chat_delta_json({DeltaKind::ToolCall, "{\"a\":", 0, "", ""});
  EXPECT_EQ(more, Json::parse(R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]})"));
}

// OpenAI's streaming usage: no usage inside a choice; `"usage": null` on every chunk and one last chunk with
// `choices: []` and the usage, only when the client asked (include_usage); no usage key otherwise.
TEST(ChatChunk, EndFrameAndUsageChunk) {
  Usage u{10, 3, 2, 1};
  Json end = chat_chunk(kHeader, chat_chunk_choice(1, Json::object(), "length"), true);
  const Json& c = end["choices"][0];
  EXPECT_EQ(c["delta"], Json::object());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_FALSE(c.contains("usage"));
  EXPECT_TRUE(end.contains("usage") && end["usage"].is_null());
  EXPECT_FALSE(chat_chunk(kHeader, chat_chunk_choice(1, Json::object(), "length"), false).contains("usage"));
  Json last = chat_usage_chunk(kHeader, u);
  EXPECT_EQ(last["object"], "chat.completion.chunk");
  EXPECT_EQ(last["choices"], Json::array());
  EXPECT_EQ(last["usage"], Json::parse(R"({"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,
      "prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":1}})"));
}

TEST(CompletionChunk, SameUsageRulesAsChat) {
  const Json choice = completion_choice_json(0, "hi", "", nullptr);
  Json with_usage = completion_chunk(kHeader, choice, true);
  EXPECT_EQ(with_usage["object"], "text_completion");
  EXPECT_EQ(with_usage["choices"], Json::array({choice}));
  EXPECT_TRUE(with_usage.contains("usage") && with_usage["usage"].is_null());
  EXPECT_FALSE(completion_chunk(kHeader, choice, false).contains("usage"));
  Json last = completion_usage_chunk(kHeader, Usage{4, 2, 0, 0});
  EXPECT_EQ(last["object"], "text_completion");
  EXPECT_EQ(last["choices"], Json::array());
  EXPECT_EQ(last["usage"]["total_tokens"], 6);
}

TEST(ChatCompletion, MessageShape) {
  ChatChoice a;
  a.parsed.content = "hello";
  a.parsed.reasoning = "think";
  a.finish_reason = "stop";
  ChatChoice b;
  b.index = 1;
  b.parsed.tool_calls.push_back({"functions.f:0", "f", "{}"});
  b.finish_reason = "tool_calls";
  Json j = chat_completion_json(kHeader, {a, b}, Usage{5, 7, 0, 0});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"],
            Json::parse(R"({"role":"assistant","content":"hello","reasoning_content":"think"})"));
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(j["choices"][1]["message"]["content"].is_null());
  EXPECT_EQ(j["choices"][1]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
}

TEST(Logprobs, ChatAndCompletionShapes) {
  LogprobEntry e{"he", "he", -0.5f, {{"he", "he", -0.5f, {}}, {"lo", "lo", -1.5f, {}}}};
  LogprobEntry f{"\xef\xbf\xbd", "\xe2", -2.0f, {}};
  Json chat = chat_logprobs_json({e, f});
  EXPECT_EQ(chat["content"][0]["token"], "he");
  EXPECT_EQ(chat["content"][0]["bytes"], Json::array({104, 101}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_FALSE(chat["content"][0]["top_logprobs"][0].contains("top_logprobs"));
  EXPECT_EQ(chat["content"][1]["bytes"], Json::array({226}));
  Json cmpl = completion_logprobs_json({e, f}, 4);
  EXPECT_EQ(cmpl["tokens"], Json::array({"he", "\xef\xbf\xbd"}));
  EXPECT_EQ(cmpl["text_offset"], Json::array({4, 6}));
  EXPECT_EQ(cmpl["top_logprobs"][0]["lo"], -1.5f);
}

TEST(Completion, Shapes) {
  Json choice = completion_choice_json(0, "abc", "", nullptr);
  EXPECT_TRUE(choice["finish_reason"].is_null());
  EXPECT_TRUE(choice["logprobs"].is_null());
  Json j = completion_json({"cmpl-x", 1, "m"}, Json::array({choice}), nullptr);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_FALSE(j.contains("usage"));
  Usage u{1, 2, 0, 0};
  EXPECT_EQ(completion_json({"cmpl-x", 1, "m"}, Json::array(), &u)["usage"]["total_tokens"], 3);
}

TEST(Errors, Envelope) {
  Json j = error_body(bad_request("temperature", "temperature: must be in [0, 2], got {}", 3));
  EXPECT_EQ(j, Json::parse(R"({"error":{"message":"temperature: must be in [0, 2], got 3",
      "type":"invalid_request_error","param":"temperature","code":400}})"));
  Json nf = error_body(model_not_found("gpt-4"));
  EXPECT_EQ(nf["error"]["message"], "The model `gpt-4` does not exist.");
  EXPECT_EQ(nf["error"]["code"], 404);
  EXPECT_TRUE(error_body(ApiError{503, "Loading model"})["error"]["param"].is_null());
  EXPECT_EQ(error_body(ApiError{503, "Loading model"})["error"]["type"], "unavailable_error");
  EXPECT_EQ(error_body(ApiError{401, "no"})["error"]["type"], "authentication_error");
  EXPECT_EQ(error_body(ApiError{429, "full"})["error"]["type"], "rate_limit_error");
  EXPECT_EQ(error_body(ApiError{500, "bug"})["error"]["type"], "server_error");
}

TEST(Errors, StatusMapping) {
  EXPECT_EQ(error_from_status(invalid_argument("x")).http_status, 400);
  EXPECT_EQ(error_from_status(out_of_range("x")).http_status, 400);
  EXPECT_EQ(error_from_status(unimplemented("x")).http_status, 400);
  EXPECT_EQ(error_from_status(not_found("x")).http_status, 404);
  EXPECT_EQ(error_from_status(resource_exhausted("x")).http_status, 429);
  EXPECT_EQ(error_from_status(unavailable("x")).http_status, 503);
  EXPECT_EQ(error_from_status(internal_error("x")).http_status, 500);
  EXPECT_EQ(error_from_status(invalid_argument("bad"), "messages").param, "messages");
}

// Issue #32: a range error from the engine's validation names its parameter (it answered `param: null`).
TEST(Errors, RangeErrorsNameTheirParameter) {
  EXPECT_EQ(error_from_status(invalid_argument("temperature: must be in [0, 100]")).param, "temperature");
  EXPECT_EQ(error_from_status(invalid_argument("tokens[3]: must be a token id")).param, "tokens[3]");
  EXPECT_EQ(error_from_status(out_of_range("min_tokens: must be in [0, max_tokens]")).param, "min_tokens");
  EXPECT_EQ(error_from_status(invalid_argument("temperature: x"), "messages").param, "messages");  // given wins
  EXPECT_EQ(error_from_status(invalid_argument("The prompt is too long: 5 tokens")).param, "");  // no prefix
  EXPECT_EQ(error_from_status(unavailable("engine: stopped")).param, "");  // only 400s
}

}  // namespace
}  // namespace rill::server
