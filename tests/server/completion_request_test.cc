// parse_completion_request: the four prompt forms, defaults, and the 400s.
#include <gtest/gtest.h>

#include "server/openai/completion_request.h"

namespace rill::server {
namespace {

const ParseLimits kLimits{1280, 16, 20};

ApiResult<CompletionRequest> parse(const char* json) {
  return parse_completion_request(Json::parse(json), kLimits);
}

void expect_400(const char* json, const std::string& param) {
  auto r = parse(json);
  ASSERT_FALSE(r.ok()) << json;
  EXPECT_EQ(r.error().http_status, 400);
  EXPECT_EQ(r.error().param, param) << r.error().message;
}

TEST(CompletionRequest, PromptForms) {
  auto r = parse(R"({"prompt": "hello"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt_texts, std::vector<std::string>{"hello"});
  EXPECT_EQ(*r->sampling.max_tokens, 16);  // OpenAI's default
  EXPECT_EQ(r->logprobs, -1);

  r = parse(R"({"prompt": ["a", "b"]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_prompts(), 2u);

  r = parse(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompt_ids.size(), 1u);
  EXPECT_EQ(r->prompt_ids[0], (std::vector<int32_t>{1, 2, 3}));

  r = parse(R"({"prompt": [[1], [2, 3]], "n": 2, "logprobs": 3, "max_tokens": 4})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_prompts(), 2u);
  EXPECT_EQ(r->logprobs, 3);
  EXPECT_EQ(r->sampling.params.logprobs, 3);
  EXPECT_EQ(r->sampling.n, 2);
}

TEST(CompletionRequest, Errors) {
  expect_400(R"({})", "prompt");
  expect_400(R"({"prompt": ""})", "prompt");
  expect_400(R"({"prompt": []})", "prompt");
  expect_400(R"({"prompt": 5})", "prompt");
  expect_400(R"({"prompt": [1, "a"]})", "prompt");
  expect_400(R"({"prompt": ["a", 1]})", "prompt");
  expect_400(R"({"prompt": [[1], []]})", "prompt");
  expect_400(R"({"prompt": [1280]})", "prompt");
  expect_400(R"({"prompt": [-1]})", "prompt");
  expect_400(R"({"prompt": "x", "suffix": "y"})", "suffix");
  expect_400(R"({"prompt": "x", "logprobs": 21})", "logprobs");
  expect_400(R"({"prompt": "x", "logprobs": true})", "logprobs");
  expect_400(R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo");
  expect_400(R"({"prompt": "x", "max_tokens": 0})", "max_tokens");
  expect_400(R"({"prompt": "x", "temperature": 3})", "temperature");
  expect_400(R"({"prompt": "x", "use_beam_search": true})", "use_beam_search");
  expect_400(R"({"prompt": "x", "model": 3})", "model");
  // The shared vLLM fields are read for completions too.
  expect_400(R"({"prompt": "x", "prompt_logprobs": 2})", "prompt_logprobs");
  expect_400(R"({"prompt": "x", "allowed_token_ids": [1280]})", "allowed_token_ids");
  expect_400(R"({"prompt": "x", "skip_special_tokens": "no"})", "skip_special_tokens");
}

// Issue #14: one request may not enqueue more than 128 sequences (OpenAI's n cap); 1023 filled the engine's
// queue and pushed every other user into 429s.
TEST(CompletionRequest, PromptsTimesNIsBounded) {
  auto prompts = [](int count, int n) {
    Json body{{"prompt", Json::array()}, {"n", n}};
    for (int i = 0; i < count; ++i) body["prompt"].push_back(fmt::format("p{}", i));
    return body;
  };
  auto status_of = [](const Json& body) -> std::pair<int, std::string> {
    auto r = parse_completion_request(body, kLimits);
    return r.ok() ? std::pair<int, std::string>{200, ""} : std::pair{r.error().http_status, r.error().param};
  };
  EXPECT_EQ(status_of(prompts(128, 1)), (std::pair<int, std::string>{200, ""}));
  EXPECT_EQ(status_of(prompts(129, 1)), (std::pair<int, std::string>{400, "prompt"}));
  EXPECT_EQ(status_of(prompts(8, 16)), (std::pair<int, std::string>{200, ""}));
  EXPECT_EQ(status_of(prompts(9, 15)), (std::pair<int, std::string>{400, "n"}));   // 135
  EXPECT_EQ(status_of(prompts(64, 16)), (std::pair<int, std::string>{400, "n"}));  // the issue's 1023 + 1
  Json ids = Json::array();  // token-id prompts count the same
  for (int i = 0; i < 129; ++i) ids.push_back(Json::array({i}));
  EXPECT_EQ(status_of(Json{{"prompt", ids}}), (std::pair<int, std::string>{400, "prompt"}));
}

// stop: at most 16 strings of at most 1024 bytes; stop_token_ids at most 1024; allowed_token_ids at most
// 262144 (more than any vocabulary has ids).
TEST(CompletionRequest, StopAndTokenListsAreBounded) {
  auto parse_with = [](const char* key, Json value) {
    return parse_completion_request(Json{{"prompt", "x"}, {key, std::move(value)}}, kLimits);
  };
  auto expect_ok = [&](const char* key, Json value) {
    auto r = parse_with(key, std::move(value));
    EXPECT_TRUE(r.ok()) << key << ": " << (r.ok() ? "" : r.error().message);
  };
  auto expect_refused = [&](const char* key, Json value) {
    auto r = parse_with(key, std::move(value));
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().http_status, 400);
    EXPECT_EQ(r.error().param, key) << r.error().message;
  };
  expect_ok("stop", std::string(1024, 'x'));
  expect_refused("stop", std::string(1025, 'x'));
  expect_ok("stop", Json::array({"a", std::string(1024, 'y')}));
  expect_refused("stop", Json::array({"a", std::string(1025, 'y')}));
  expect_ok("stop", Json(std::vector<std::string>(16, "s")));
  expect_refused("stop", Json(std::vector<std::string>(17, "s")));
  auto ids = [](size_t count) {
    std::vector<int> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = int(i % 1280);
    return Json(v);
  };
  expect_ok("stop_token_ids", ids(1024));
  expect_refused("stop_token_ids", ids(1025));
  expect_ok("allowed_token_ids", ids(262144));
  expect_refused("allowed_token_ids", ids(262145));
}

TEST(CompletionRequest, EmptySuffixAndEchoAlone) {
  auto r = parse(R"({"prompt": "x", "suffix": "", "echo": true, "seed": -5})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(*r->sampling.params.seed, uint64_t(int64_t(-5)));
}

}  // namespace
}  // namespace rill::server
