// Latent attention on the CPU backend (src/backend/cpu/mla.cc) against an fp64 oracle written here from spec
// §3.4 in the naive form: mla_cache_write (KimiRMSNorm of the latent with eps 1e-6, k_pe copied raw, into the
// paged cache through shuffled block tables) and mla_attention, with the oracle expanding every head's keys
// and values from kv_b and running plain causal softmax attention without RoPE (the CPU runs the absorbed
// form, so the two share no arithmetic). Fresh and continued prefill, decode, a mixed batch, strided q.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_op_helpers.h"

namespace rill::testing {
namespace {

constexpr int kNope = 128, kRope = 64, kV = 128, kLora = 512, kWidth = kLora + kRope;
constexpr float kEps = 1e-6f;  // kv_a_layernorm is built without eps (spec §3.0, §7.1)
// fp32 op vs fp64 oracle: an RMSNorm and, for attention, sums of 512-576 products and a softmax over at most
// a thousand positions: ~1e-7 expected, bounded at 1e-5.
constexpr double kTol = 1e-5;

struct Seq {
  int start_pos, n_new;
};

// The step under test and the earlier step that wrote its sequences' history [0, start_pos), both over block
// tables of shuffled ids from a pool with spare blocks.
struct PagedSteps {
  model::StepBatch history, step;
  int n_blocks = 0;
};

PagedSteps make_steps(const std::vector<Seq>& seqs, int block_size, std::mt19937& rng) {
  PagedSteps p;
  int need = 0;
  for (const Seq& s : seqs) need += (s.start_pos + s.n_new + block_size - 1) / block_size;
  p.n_blocks = need + 5;
  std::vector<int32_t> ids(static_cast<size_t>(p.n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<StepSeq> history, step;
  size_t next = 0;
  for (const Seq& s : seqs) {
    StepSeq st{s.start_pos, s.n_new};
    for (int b = 0; b < (s.start_pos + s.n_new + block_size - 1) / block_size; ++b)
      st.blocks.push_back(ids[next++]);
    step.push_back(st);
    if (s.start_pos > 0) history.push_back({0, s.start_pos, 0, st.blocks});
  }
  p.history = make_step(history, block_size);
  p.step = make_step(step, block_size);
  return p;
}

// Cache row of position `pos` of sequence `seq` in a [n_blocks, block_size, width] cache, flattened.
size_t cache_row(const model::StepBatch& b, size_t seq, int pos, int block_size) {
  return size_t(b.seqs[seq].block_table[size_t(pos / block_size)]) * size_t(block_size) +
         size_t(pos % block_size);
}

// Token rows of N(0, 1) ckv, every third scaled by 1e-3 (mean square 1e-6: eps then matters as much as the
// data) and every third by 30.
std::vector<float> make_ckv(OpHarness& h, int64_t T) {
  std::vector<float> ckv = h.randn(T * kWidth, 1.0f, false);
  for (int64_t t = 0; t < T; ++t) {
    const float scale = t % 3 == 1 ? 1e-3f : t % 3 == 2 ? 30.0f : 1.0f;
    for (int i = 0; i < kWidth; ++i) ckv[size_t(t * kWidth + i)] *= scale;
  }
  return ckv;
}

// mla_cache_write of `batch` with fresh latents; returns them.
std::vector<float> write_latents(OpHarness& h, const model::StepBatch& batch, int block_size,
                                 const BackendTensor& norm_w, const BackendTensor& cache) {
  const int64_t T = batch.n_tokens();
  const std::vector<float> ckv = make_ckv(h, T);
  const BackendTensor ckv_t = h.put(h.cpu(), ckv, DType::F32, {T, kWidth});
  const backend::BatchLayout l = cpu_layout(h, batch, block_size);
  const Status st = h.cpu().mla_cache_write({ckv_t.view, norm_w.view, kEps, cache.view, &l});
  EXPECT_TRUE(st.ok()) << st.message();
  return ckv;
}

TEST(MlaCpu, CacheWriteNormalisesTheLatentIntoShuffledBlocks) {
  OpHarness h(kCpuOnly);
  for (int bs : {64, 16}) {
    SCOPED_TRACE(::testing::Message() << "block size " << bs);
    const PagedSteps steps = make_steps({{0, 37}, {100, 5}, {64, 64}, {3, 1}}, bs, h.rng());
    const BackendTensor cache = h.empty(h.cpu(), DType::F32, {steps.n_blocks, bs, kWidth});  // NaN
    const std::vector<float> w = h.uniform(kLora, 0.5f, 1.5f, false);
    const BackendTensor norm_w = h.put(h.cpu(), w, DType::F32, {kLora});
    const std::vector<float> ckv = write_latents(h, steps.step, bs, norm_w, cache);
    const std::vector<float> got = h.get(h.cpu(), cache.view);

    std::vector<char> written(size_t(steps.n_blocks) * size_t(bs), 0);
    size_t t = 0;
    for (size_t s = 0; s < steps.step.seqs.size(); ++s) {
      const model::SequenceStep& seq = steps.step.seqs[s];
      for (int p = seq.start_pos; p < seq.start_pos + seq.n_new; ++p, ++t) {
        const size_t row = cache_row(steps.step, s, p, bs);
        written[row] = 1;
        const float* x = &ckv[t * kWidth];
        double ms = 0;
        for (int i = 0; i < kLora; ++i) ms += double(x[i]) * x[i];
        ms /= kLora;
        std::vector<double> want(kWidth);
        for (int i = 0; i < kLora; ++i) want[size_t(i)] = double(w[size_t(i)]) * x[i] / std::sqrt(ms + kEps);
        for (int i = kLora; i < kWidth; ++i) want[size_t(i)] = x[i];  // k_pe: neither normalised nor rotated
        const std::vector<float> got_row = slice(got, row * kWidth, kWidth);
        ASSERT_TRUE(elementwise_near(got_row, want, kTol, 1e-3)) << "sequence " << s << " position " << p;
        ASSERT_EQ(slice(got_row, kLora, kRope), slice(ckv, t * kWidth + kLora, kRope))
            << "k_pe is copied exactly";
      }
    }
    for (size_t row = 0; row < written.size(); ++row) {
      if (!written[row]) {
        ASSERT_TRUE(std::isnan(got[row * kWidth])) << "cache row " << row << " belongs to no new token";
      }
    }
  }
}

// A position past the end of its sequence's block-table row is refused, naming it (the table is not read past
// the end of the row).
TEST(MlaCpu, CacheWriteRefusesAPositionOutsideTheBlockTable) {
  OpHarness h(kCpuOnly);
  const int bs = 16;
  const PagedSteps steps = make_steps({{0, 37}}, bs, h.rng());
  const BackendTensor cache = h.empty(h.cpu(), DType::F32, {steps.n_blocks, bs, kWidth});  // NaN
  const BackendTensor norm_w = h.put(h.cpu(), h.uniform(kLora, 0.5f, 1.5f, false), DType::F32, {kLora});
  const BackendTensor ckv = h.put(h.cpu(), make_ckv(h, 37), DType::F32, {37, kWidth});
  backend::BatchLayout l = cpu_layout(h, steps.step, bs);
  l.max_blocks_per_seq = 2;  // positions 32..36 have no block
  const Status st = h.cpu().mla_cache_write({ckv.view, norm_w.view, kEps, cache.view, &l});
  EXPECT_EQ(st.code(), StatusCode::Internal);
  EXPECT_NE(st.message().find("position 32 of sequence 0"), std::string::npos) << st.message();
}

// One head's keys [W_UK,h c_u ; k_pe_u] (192) and values W_UV,h c_u (128) for the positions u whose cache
// rows are `rows`, expanded in double from the cache the op wrote (spec §3.4, naive form).
struct HeadKeysValues {
  std::vector<double> k, v;  // [n, nope + rope], [n, v]
};

HeadKeysValues expand_head(const std::vector<float>& kvb, const std::vector<float>& cache,
                           const std::vector<size_t>& rows, int head) {
  const size_t n = rows.size(), head0 = size_t(head) * (kNope + kV);
  HeadKeysValues kv{std::vector<double>(n * (kNope + kRope)), std::vector<double>(n * kV)};
  for (size_t u = 0; u < n; ++u) {
    const float* c = &cache[rows[u] * kWidth];
    for (int i = 0; i < kNope + kV; ++i) {
      double acc = 0;
      for (int r = 0; r < kLora; ++r) acc += double(kvb[(head0 + size_t(i)) * kLora + size_t(r)]) * c[r];
      if (i < kNope)
        kv.k[u * (kNope + kRope) + size_t(i)] = acc;
      else
        kv.v[u * kV + size_t(i - kNope)] = acc;
    }
    for (int i = 0; i < kRope; ++i)
      kv.k[u * (kNope + kRope) + size_t(kNope + i)] = c[kLora + i];  // not rotated
  }
  return kv;
}

// softmax(q K^T * scale) V over the first n_visible positions (causal), in double.
void attend_reference(const float* q, const HeadKeysValues& kv, size_t n_visible, double scale, double* out) {
  std::vector<double> score(n_visible);
  for (size_t u = 0; u < n_visible; ++u) {
    double dot = 0;
    for (int i = 0; i < kNope + kRope; ++i) dot += double(q[i]) * kv.k[u * (kNope + kRope) + size_t(i)];
    score[u] = dot * scale;
  }
  const double mx = *std::max_element(score.begin(), score.end());
  double sum = 0;
  for (double& s : score) sum += (s = std::exp(s - mx));
  for (int j = 0; j < kV; ++j) {
    double acc = 0;
    for (size_t u = 0; u < n_visible; ++u) acc += score[u] / sum * kv.v[u * kV + size_t(j)];
    out[j] = acc;
  }
}

// History write, step write, then mla_attention over the step against the oracle, sequence by sequence.
void check_attention(OpHarness& h, const std::vector<Seq>& seqs, int heads, int block_size,
                     bool strided_q = false) {
  SCOPED_TRACE(::testing::Message() << heads << " heads, block size " << block_size
                                    << (strided_q ? ", strided q" : ""));
  const PagedSteps steps = make_steps(seqs, block_size, h.rng());
  const BackendTensor cache = h.empty(h.cpu(), DType::F32, {steps.n_blocks, block_size, kWidth});
  const BackendTensor norm_w = h.put(h.cpu(), h.uniform(kLora, 0.8f, 1.2f, false), DType::F32, {kLora});
  if (!steps.history.seqs.empty()) write_latents(h, steps.history, block_size, norm_w, cache);
  write_latents(h, steps.step, block_size, norm_w, cache);

  const int64_t T = steps.step.n_tokens(), qw = int64_t(heads) * (kNope + kRope),
                q_ld = strided_q ? qw + 64 : qw;
  const std::vector<float> q = h.randn(T * q_ld, 1.0f, false);
  const BackendTensor q_t = h.put(h.cpu(), q, DType::F32, {T, q_ld});
  TensorView q_view = q_t.view;
  q_view.shape = Shape{T, heads, kNope + kRope};
  q_view.strides = {q_ld, kNope + kRope, 1, 0, 0};
  // kv_b ~ N(0, 1/128), bf16 as in a checkpoint (the values are bf16-exact, so the oracle reads the same):
  // scores with std ~1.7, a softmax neither flat nor one-hot.
  const std::vector<float> kvb = h.randn(int64_t(heads) * (kNope + kV) * kLora, 1.0f / std::sqrt(128.0f));
  const BackendTensor kvb_t = h.put(h.cpu(), kvb, DType::BF16, {int64_t(heads) * (kNope + kV), kLora});
  const backend::LinearWeight kv_b{kvb_t.view};
  const BackendTensor out = h.empty(h.cpu(), DType::F32, {T, int64_t(heads) * kV});

  const backend::BatchLayout l = cpu_layout(h, steps.step, block_size);
  backend::MlaAttentionArgs a;
  a.q = q_view;
  a.cache = cache.view;
  a.kv_b = &kv_b;
  a.n_heads = heads;
  a.nope = kNope;
  a.rope = kRope;
  a.v_dim = kV;
  a.kv_lora = kLora;
  a.scale = 1.0f / std::sqrt(float(kNope + kRope));
  a.layout = &l;
  a.out = out.view;
  const Status st = h.cpu().mla_attention(a);
  ASSERT_TRUE(st.ok()) << st.message();
  const std::vector<float> got = h.get(h.cpu(), out.view), cached = h.get(h.cpu(), cache.view);

  std::vector<double> want(size_t(T * heads * kV));
  const double scale = 1.0 / std::sqrt(double(kNope + kRope));
  size_t t_begin = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int end = seqs[s].start_pos + seqs[s].n_new;
    std::vector<size_t> rows;
    for (int u = 0; u < end; ++u) rows.push_back(cache_row(steps.step, s, u, block_size));
    for (int hh = 0; hh < heads; ++hh) {
      const HeadKeysValues kv = expand_head(kvb, cached, rows, hh);
      for (int i = 0; i < seqs[s].n_new; ++i) {
        const size_t t = t_begin + size_t(i);  // at position start_pos + i: sees [0, start_pos + i]
        attend_reference(&q[t * size_t(q_ld) + size_t(hh * (kNope + kRope))], kv,
                         size_t(seqs[s].start_pos + i + 1), scale,
                         &want[(t * size_t(heads) + size_t(hh)) * kV]);
      }
    }
    const size_t t = t_begin + size_t(seqs[s].n_new);
    const size_t o0 = t_begin * size_t(heads) * kV, on = (t - t_begin) * size_t(heads) * kV;
    EXPECT_LE(rel_l2(slice(got, o0, on), slice(want, o0, on)), kTol)
        << "sequence " << s << " (start " << seqs[s].start_pos << ", " << seqs[s].n_new << " new)";
    t_begin = t;
  }
  std::printf("[ mla      ] %zu seqs, %lld tokens, %d heads: rel-L2 %.1e\n", seqs.size(), (long long)T, heads,
              rel_l2(got, want));
}

TEST(MlaCpu, PrefillFromEmptyIsCausal) {
  OpHarness h(kCpuOnly);
  check_attention(h, {{0, 1}}, 2, 64);
  check_attention(h, {{0, 70}}, 2, 16);
  check_attention(h, {{0, 130}}, 1, 64);
}

TEST(MlaCpu, PrefillContinuesOverCachedHistory) {
  OpHarness h(kCpuOnly);
  check_attention(h, {{100, 50}}, 2, 16);
  check_attention(h, {{128, 64}}, 2, 64);
}

TEST(MlaCpu, DecodeReadsTheWholeContext) {
  OpHarness h(kCpuOnly);
  for (int ctx : {2, 17, 64, 65, 400}) check_attention(h, {{ctx - 1, 1}}, 2, 64);
  check_attention(h, {{300, 4}}, 2, 16);  // several new tokens: causal inside the step
}

TEST(MlaCpu, MixedBatchWithStridedQ) {
  OpHarness h(kCpuOnly);
  check_attention(h, {{299, 1}, {0, 70}, {36, 3}, {70, 40}}, 3, 16, /*strided_q=*/true);
}

}  // namespace
}  // namespace rill::testing
