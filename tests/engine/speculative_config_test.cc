// --speculative-config parsing (vLLM's keys, errors naming the key or method) and the acceptance rule, on its
// own: greedy cases, and the point-mass speculative-sampling rule in closed form and through the sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/sampling.h"
#include "engine/spec/acceptance.h"
#include "engine/spec/speculative_config.h"

namespace rill::engine {
namespace {
TEST(SpeculativeConfig, ParsesVllmKeys) {
  auto c = spec::parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_EQ(c->prompt_lookup_min, 2);
  EXPECT_EQ(c->prompt_lookup_max, 4);
  auto only_max = spec::parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})");
  ASSERT_TRUE(only_max.ok());
  EXPECT_EQ(only_max->prompt_lookup_min, 3);
  auto suffix = spec::parse_speculative_config(
      R"({"method": "suffix", "num_speculative_tokens": 5, "suffix_decoding_max_tree_depth": 32,
          "suffix_decoding_max_cached_requests": 7, "suffix_decoding_min_token_prob": 0.25,
          "suffix_decoding_max_spec_factor": 2})");
  ASSERT_TRUE(suffix.ok()) << suffix.status().to_string();
  EXPECT_EQ(suffix->method, "suffix");
  EXPECT_EQ(suffix->suffix.max_tree_depth, 32);
  EXPECT_EQ(suffix->suffix.max_cached_requests, 7);
  EXPECT_EQ(suffix->suffix.min_token_prob, 0.25);
  EXPECT_EQ(suffix->suffix.max_spec_factor, 2.0);
  auto suffix_defaults = spec::parse_speculative_config(R"({"method": "suffix", "num_speculative_tokens": 3})");
  ASSERT_TRUE(suffix_defaults.ok()) << suffix_defaults.status().to_string();
  EXPECT_EQ(suffix_defaults->suffix.max_tree_depth, spec::SuffixDrafterOptions{}.max_tree_depth);
  auto neither = spec::parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 16})");
  ASSERT_TRUE(neither.ok());
  EXPECT_EQ(neither->prompt_lookup_min, 5);
  EXPECT_EQ(neither->prompt_lookup_max, 5);
  EXPECT_EQ(neither->kda_rollback, cache::KdaRollback::Records);  // the default
  // rill's own key: how a rejected draft's KDA state is rolled back.
  auto records = spec::parse_speculative_config(
      R"({"method": "suffix", "num_speculative_tokens": 3, "kda_rollback": "records"})");
  ASSERT_TRUE(records.ok()) << records.status().to_string();
  EXPECT_EQ(records->kda_rollback, cache::KdaRollback::Records);
  auto checkpoint = spec::parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 3, "kda_rollback": "checkpoint"})");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  EXPECT_EQ(checkpoint->kda_rollback, cache::KdaRollback::Checkpoint);
}

TEST(SpeculativeConfig, ErrorsNameTheKeyOrMethod) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"method": "ngram", "num_speculative_tokens": 4, "lookahead": 2})", "unknown key \"lookahead\""},
      {R"({"method": "ngram", "num_speculative_tokens": 0})",
       "\"num_speculative_tokens\" 0 must be in [1, 16]"},
      {R"({"method": "ngram", "num_speculative_tokens": 17})",
       "\"num_speculative_tokens\" 17 must be in [1, 16]"},
      {R"({"method": "ngram", "num_speculative_tokens": "4"})",
       "\"num_speculative_tokens\" must be an integer"},
      {R"({"method": "ngram"})", "\"num_speculative_tokens\" is required"},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "kda_rollback": "copy"})",
       "\"kda_rollback\" must be \"checkpoint\" or \"records\" (got \"copy\")"},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "kda_rollback": 1})",
       "\"kda_rollback\" must be \"checkpoint\" or \"records\" (got 1)"},
      {R"({"num_speculative_tokens": 4})", "\"method\" is required"},
      {R"({"method": "suffix", "num_speculative_tokens": 4, "prompt_lookup_max": 3})",
       "\"prompt_lookup_max\" does not apply to method \"suffix\""},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "suffix_decoding_min_token_prob": 0.2})",
       "\"suffix_decoding_min_token_prob\" does not apply to method \"ngram\""},
      {R"({"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_max_tree_depth": 1})",
       "\"suffix_decoding_max_tree_depth\" 1 must be in [2, 1024]"},
      {R"({"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_max_cached_requests": -1})",
       "\"suffix_decoding_max_cached_requests\" -1 must be at least 0"},
      {R"({"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_min_token_prob": "0.1"})",
       "\"suffix_decoding_min_token_prob\" must be a number"},
      {R"({"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_max_spec_factor": 0})",
       "\"suffix_decoding_max_spec_factor\" 0 must be positive"},
      {R"({"method": "suffix"})", "\"num_speculative_tokens\" is required"},
      {R"({"method": "draft_model", "num_speculative_tokens": 4, "model": "/m"})",
       "method \"draft_model\" is not built yet in this command"},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "model": "/m"})",
       "\"model\" does not apply to method \"ngram\""},
      {R"({"method": "mtp", "num_speculative_tokens": 4})", "method \"mtp\" is not built yet"},
      {R"({"method": "mtp", "num_speculative_tokens": 4})", "\"num_nextn_predict_layers\" > 0"},
      {R"({"method": "eagle", "num_speculative_tokens": 4})", "unknown method \"eagle\""},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 0})",
       "\"prompt_lookup_min\" 0 must be at least 1"},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 2})",
       "\"prompt_lookup_max\" 2 must be at least \"prompt_lookup_min\" 3"},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2.5})",
       "\"prompt_lookup_max\" must be an integer"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"method": )", "not valid JSON"},
  };
  for (const auto& [json, want] : cases) {
    auto c = spec::parse_speculative_config(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_NE(c.status().message().find(want), std::string::npos) << json << " -> " << c.status().message();
    EXPECT_NE(c.status().message().find("--speculative-config"), std::string::npos) << c.status().message();
  }
}

// The rule on a hand-built distribution: the standard speculative-sampling rule with a point-mass q at the
// draft, in closed form (accept with min(1, p(d)/q(d)), else the residual norm(max(0, p - q))), emits each
// token with probability p; and sampling from p with the backend's sampler and accepting while the draw
// equals the draft (accept_drafts) emits each token with that frequency (5 sigma) and accepts with
// frequency p(d).
TEST(SpeculativeAcceptance, PointMassRuleOnAHandBuiltDistribution) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -3.0f};
  const int V = int(logits.size());
  std::vector<double> p(static_cast<size_t>(V));
  double z = 0;
  for (int i = 0; i < V; ++i) z += (p[size_t(i)] = std::exp(double(logits[size_t(i)])));
  for (double& x : p) x /= z;
  for (int32_t d = 0; d < V; ++d) {
    SCOPED_TRACE("draft " + std::to_string(d));
    // Closed form: P(emit x) = [x == d] min(1, p(d)) + (1 - min(1, p(d))) r(x), r = norm(max(0, p - q)).
    std::vector<double> r(static_cast<size_t>(V));
    double rz = 0;
    for (int x = 0; x < V; ++x) rz += (r[size_t(x)] = std::max(0.0, p[size_t(x)] - (x == d ? 1.0 : 0.0)));
    const double accept = std::min(1.0, p[size_t(d)]);
    for (int x = 0; x < V; ++x)
      EXPECT_NEAR((x == d ? accept : 0.0) + (1 - accept) * r[size_t(x)] / rz, p[size_t(x)], 1e-12);
    // The sampler and accept_drafts: a draw per (seed, counter), as the verify rows make them.
    constexpr int kDraws = 20000;
    std::vector<int> emitted(static_cast<size_t>(V));
    int accepted = 0;
    for (int i = 0; i < kDraws; ++i) {
      backend::SamplingRow row{1.0f, 1.0f, 0.0f, 0, uint64_t(i) * 7919u + uint64_t(d), uint64_t(i % 13)};
      const int32_t x = backend::sample_row(logits.data(), V, row);
      const spec::Acceptance a = spec::accept_drafts(std::vector<int32_t>{d}, std::vector<int32_t>{x, 0});
      accepted += a.n_accepted;
      emitted[size_t(a.emitted[0])]++;
    }
    for (int x = 0; x < V; ++x) {
      const double sigma = std::sqrt(p[size_t(x)] * (1 - p[size_t(x)]) / kDraws);
      EXPECT_NEAR(double(emitted[size_t(x)]) / kDraws, p[size_t(x)], 5 * sigma) << "token " << x;
    }
    const double sigma = std::sqrt(p[size_t(d)] * (1 - p[size_t(d)]) / kDraws);
    EXPECT_NEAR(double(accepted) / kDraws, p[size_t(d)], 5 * sigma);
  }
}

TEST(SpeculativeAcceptance, GreedyRule) {
  using spec::accept_drafts;
  const std::vector<int32_t> d = {5, 6, 7};
  auto a = accept_drafts(d, std::vector<int32_t>{5, 6, 7, 8});  // all accepted, bonus 8
  EXPECT_EQ(a.n_accepted, 3);
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{5, 6, 7, 8}));
  a = accept_drafts(d, std::vector<int32_t>{5, 9, 7, 8});  // the first mismatch is replaced by the argmax
  EXPECT_EQ(a.n_accepted, 1);
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{5, 9}));
  a = accept_drafts(d, std::vector<int32_t>{4, 6, 7, 8});
  EXPECT_EQ(a.n_accepted, 0);
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{4}));
  a = accept_drafts({}, std::vector<int32_t>{3});  // no drafts: a plain decode step
  EXPECT_EQ(a.n_accepted, 0);
  EXPECT_EQ(a.emitted, (std::vector<int32_t>{3}));
}

}  // namespace
}  // namespace rill::engine
