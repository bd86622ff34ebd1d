// MoE routing on the CPU backend (moe_route in src/backend/cpu/moe.cc) against an fp64 oracle written here
// from spec §3.5 by brute force: fp64 logits, sigmoid (or softmax) scores, the correction bias for selection
// only, group scores as the sum of each group's two best biased scores with the topk_group best groups kept,
// then a full sort of every remaining expert; weights from the unbiased scores, renormalised (+1e-20) when
// asked and top_k > 1, times the scaling factor. Inputs are tie-free: a token whose selection has two
// candidates within kTieMargin at a decision boundary is drawn again, so fp32 vs fp64 cannot flip a choice.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_op_helpers.h"

namespace rill::testing {
namespace {

// fp32 logits over H <= 2304 products are within ~1e-7 of fp64; a boundary gap of 1e-5 cannot flip.
constexpr double kTieMargin = 1e-5;
// Weights: a sigmoid or softmax, a sum of <= 16 and a division in fp32: ~1e-7 relative, bounded at 1e-5.
constexpr double kWeightTol = 1e-5;

struct RouteCase {
  int64_t T, H, E;
  int top_k, n_groups = 1, topk_group = 1;
  bool softmax = false, renormalize = true, bias = true;
  float scaling = 2.446f;
  bool grouped() const { return n_groups > 1 && topk_group < n_groups; }
};

// The selected experts (by id) with their weights, and the smallest gap at any decision the selection made.
struct Routed {
  std::vector<std::pair<int, double>> experts;
  double margin = INFINITY;
};

// Indices of v sorted by decreasing value (full sort).
std::vector<int> order_desc(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
  return idx;
}

Routed route_reference(const RouteCase& c, const float* x, const std::vector<float>& w,
                       const std::vector<float>& bias, bool use_groups, bool use_bias) {
  std::vector<double> s(size_t(c.E));
  for (int64_t e = 0; e < c.E; ++e) {
    double acc = 0;
    for (int64_t i = 0; i < c.H; ++i) acc += double(x[i]) * w[size_t(e * c.H + i)];
    s[size_t(e)] = acc;
  }
  if (c.softmax) {
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& v : s) sum += (v = std::exp(v - mx));
    for (double& v : s) v /= sum;
  } else {
    for (double& v : s) v = 1.0 / (1.0 + std::exp(-v));
  }
  std::vector<double> sel(s);
  if (use_bias)
    for (int64_t e = 0; e < c.E; ++e) sel[size_t(e)] += bias[size_t(e)];
  Routed r;
  std::vector<char> allowed(size_t(c.E), 1);
  if (use_groups && c.grouped()) {
    const int64_t per = c.E / c.n_groups;
    std::vector<double> group_score(size_t(c.n_groups));
    for (int g = 0; g < c.n_groups; ++g) {
      std::vector<double> members(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      const std::vector<int> best = order_desc(members);
      group_score[size_t(g)] = members[size_t(best[0])] + members[size_t(best[1])];
    }
    const std::vector<int> groups = order_desc(group_score);
    r.margin = group_score[size_t(groups[size_t(c.topk_group - 1)])] -
               group_score[size_t(groups[size_t(c.topk_group)])];
    for (int i = c.topk_group; i < c.n_groups; ++i)
      for (int64_t e = 0; e < per; ++e) allowed[size_t(groups[size_t(i)] * per + e)] = 0;
  }
  std::vector<int> ranked;
  for (int e : order_desc(sel))
    if (allowed[size_t(e)]) ranked.push_back(e);
  if (int(ranked.size()) > c.top_k)
    r.margin =
        std::min(r.margin, sel[size_t(ranked[size_t(c.top_k - 1)])] - sel[size_t(ranked[size_t(c.top_k)])]);
  double sum = 0;
  for (int j = 0; j < c.top_k; ++j) sum += s[size_t(ranked[size_t(j)])];
  for (int j = 0; j < c.top_k; ++j) {
    double weight = s[size_t(ranked[size_t(j)])];  // the unbiased score (spec §8.1)
    if (c.renormalize && c.top_k > 1) weight /= sum + 1e-20;
    r.experts.emplace_back(ranked[size_t(j)], weight * c.scaling);
  }
  std::sort(r.experts.begin(), r.experts.end());
  return r;
}

std::vector<int> ids_of(const Routed& r) {
  std::vector<int> ids;
  for (const auto& [id, weight] : r.experts) ids.push_back(id);
  return ids;
}

void run_route(OpHarness& h, const RouteCase& c) {
  SCOPED_TRACE(::testing::Message() << "T " << c.T << " H " << c.H << " E " << c.E << " top_k " << c.top_k
                                    << " groups " << c.n_groups << "/" << c.topk_group
                                    << (c.softmax ? " softmax" : " sigmoid") << (c.bias ? " bias" : "")
                                    << (c.renormalize ? " renormalised" : "") << " scaling " << c.scaling);
  const std::vector<float> w = h.randn(c.E * c.H, 1.5f / std::sqrt(float(c.H)));  // logits with std ~1.5
  // Bias comparable to the spread of the top scores, so both decide the selection.
  const std::vector<float> bias = h.uniform(c.E, c.softmax ? -0.02f : -0.1f, c.softmax ? 0.02f : 0.1f, false);
  std::vector<float> x(size_t(c.T * c.H));
  std::vector<Routed> want;
  int by_groups = 0, by_bias = 0;  // tokens whose selection the group mask / the bias changes
  for (int64_t t = 0; t < c.T; ++t) {
    for (int draw = 0;; ++draw) {
      ASSERT_LT(draw, 100) << "no tie-free token after 100 draws";
      const std::vector<float> row = h.randn(c.H);
      const Routed r = route_reference(c, row.data(), w, bias, true, c.bias);
      if (r.margin < kTieMargin) continue;
      std::copy(row.begin(), row.end(), x.begin() + t * c.H);
      want.push_back(r);
      by_groups += ids_of(route_reference(c, row.data(), w, bias, false, c.bias)) != ids_of(r);
      by_bias += ids_of(route_reference(c, row.data(), w, bias, true, false)) != ids_of(r);
      break;
    }
  }
  EXPECT_TRUE(!c.grouped() || by_groups > 0)
      << "the group mask changes no selection: the inputs test nothing";
  EXPECT_TRUE(!c.bias || by_bias > 0) << "the bias changes no selection: the inputs test nothing";

  const BackendTensor x_t = h.put(h.cpu(), x, DType::F32, {c.T, c.H});
  const BackendTensor w_t = h.put(h.cpu(), w, DType::BF16, {c.E, c.H});  // bf16-exact values, as checkpoints
  const BackendTensor bias_t = h.put(h.cpu(), bias, DType::F32, {c.E});
  const BackendTensor ids = h.empty(h.cpu(), DType::I32, {c.T, c.top_k}),
                      weights = h.empty(h.cpu(), DType::F32, {c.T, c.top_k});
  const Status st =
      h.cpu().moe_route({x_t.view, w_t.view, c.bias ? bias_t.view : TensorView{}, c.top_k, c.n_groups,
                         c.topk_group, c.renormalize, c.softmax, c.scaling, ids.view, weights.view});
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<float> got_ids = h.get(h.cpu(), ids.view), got_w = h.get(h.cpu(), weights.view);
  for (int64_t t = 0; t < c.T; ++t) {
    // The order of the top_k slots is not part of the contract: compare (id, weight) sets.
    std::vector<std::pair<int, float>> got;
    for (int j = 0; j < c.top_k; ++j)
      got.emplace_back(int(got_ids[size_t(t * c.top_k + j)]), got_w[size_t(t * c.top_k + j)]);
    std::sort(got.begin(), got.end());
    const Routed& r = want[size_t(t)];
    for (int j = 0; j < c.top_k; ++j) {
      ASSERT_EQ(got[size_t(j)].first, r.experts[size_t(j)].first)
          << "token " << t << ", selected expert " << j;
      ASSERT_NEAR(got[size_t(j)].second, r.experts[size_t(j)].second,
                  kWeightTol * r.experts[size_t(j)].second)
          << "token " << t << ", weight of expert " << got[size_t(j)].first;
    }
  }
  std::printf("[ route    ] E %lld top-%d groups %d/%d: %d tokens changed by the groups, %d by the bias\n",
              (long long)c.E, c.top_k, c.n_groups, c.topk_group, by_groups, by_bias);
}

TEST(MoeRouteCpu, UngroupedSigmoidWithBias) {
  OpHarness h(kCpuOnly);
  run_route(h, {20, 2304, 256, 8});  // Kimi Linear's router
  run_route(h, {64, 64, 16, 4});
}

TEST(MoeRouteCpu, GroupedTopKKeepsTheBestGroups) {
  OpHarness h(kCpuOnly);
  run_route(h, {20, 256, 256, 8, 8, 4});  // DeepSeek-V3-style grouping
  run_route(h, {64, 64, 16, 4, 4, 2});
  run_route(h, {64, 64, 16, 4, 4, 1});  // one group left: the top-4 of its 4 experts
  run_route(h, {64, 64, 16, 4, 4, 4});  // topk_group == n_groups: no mask, the ungrouped selection
  run_route(h, {64, 64, 32, 3, 8, 3, false, false});
}

TEST(MoeRouteCpu, RenormalisationAndScaling) {
  OpHarness h(kCpuOnly);
  run_route(h, {64, 64, 16, 3, 1, 1, false, false});  // raw scores times 2.446
  run_route(h, {64, 64, 16, 1, 1, 1, false, true});   // top-1: never renormalised
  run_route(h, {64, 64, 16, 4, 1, 1, false, true, true, 1.0f});
  run_route(h, {64, 64, 16, 4, 4, 2, false, false, true, 0.5f});
}

TEST(MoeRouteCpu, WithoutBias) {
  OpHarness h(kCpuOnly);
  run_route(h, {64, 64, 16, 4, 1, 1, false, true, false});
  run_route(h, {64, 64, 16, 4, 4, 2, false, true, false});
}

TEST(MoeRouteCpu, SoftmaxScores) {
  OpHarness h(kCpuOnly);
  run_route(h, {64, 64, 16, 4, 1, 1, true});
  run_route(h, {64, 64, 16, 2, 1, 1, true, false, false, 1.0f});
  run_route(h, {20, 256, 64, 6, 8, 3, true});
}

}  // namespace
}  // namespace rill::testing
