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

TEST(CompletionRequest, EmptySuffixAndEchoAlone) {
  auto r = parse(R"({"prompt": "x", "suffix": "", "echo": true, "seed": -5})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(*r->sampling.params.seed, uint64_t(int64_t(-5)));
}

}  // namespace
}  // namespace rill::server
