// Cross-backend tests of latent attention (src/backend/{cpu,cuda}/mla*): the paged cache write, and attention
// through the decode split-KV path (n_new <= 16), the prefill paths and mixed batches, against the CPU
// reference. Every step with a prefill sequence runs through both prefill attention paths (backend option
// mla_prefill): cuDNN's fused attention (mla_prefill=cudnn: cuDNN or a failed step, so a silent fallback cannot
// pass; skipped where the build has no cuDNN) and rill's flash kernel. Block tables are shuffled block ids;
// unwritten cache rows and outputs are NaN-poisoned, and the scratch is filled with NaN bytes so a read of
// anything the kernels did not write shows up.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backend/op_harness.h"
#include "backend/workspace_planner.h"
#include "test_backend_options.h"

namespace rill::testing {
namespace {

constexpr int kNope = 128, kRope = 64, kV = 128, kLora = 512, kWidth = kLora + kRope;
// bf16 operands (q_lat, P, lat, k/v) with fp32 accumulation and softmax: ~3e-3 expected.
constexpr double kAttnTol = 1e-2;

struct Seq {
  int start_pos, n_new;
};

// The step under test over `seqs`, and the step that wrote their history [0, start_pos); block tables are
// shuffled ids from a pool with spare blocks.
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
  size_t next = 0;
  for (const Seq& s : seqs) {
    model::SequenceStep st;
    st.start_pos = s.start_pos;
    st.n_new = s.n_new;
    for (int b = 0; b < (s.start_pos + s.n_new + block_size - 1) / block_size; ++b)
      st.block_table.push_back(ids[next++]);
    p.step.seqs.push_back(st);
    p.step.token_ids.resize(p.step.token_ids.size() + size_t(s.n_new), 0);
    if (s.start_pos > 0) {
      model::SequenceStep hs = st;
      hs.start_pos = 0;
      hs.n_new = s.start_pos;
      p.history.seqs.push_back(hs);
      p.history.token_ids.resize(p.history.token_ids.size() + size_t(s.start_pos), 0);
    }
  }
  return p;
}

struct Caches {
  BackendTensor cpu, dev;
};

// Writes `batch`'s latents (fresh N(0,1) ckv) into both caches.
void write_step(OpHarness& h, const model::StepBatch& batch, int block_size,
                const std::pair<BackendTensor, BackendTensor>& w, Caches& c) {
  const int64_t T = batch.n_tokens();
  auto ckv = h.put_both(h.randn(T * kWidth), DType::F32, DType::BF16, {T, kWidth});
  backend::BatchLayout lc, ld;
  h.layouts(batch, block_size, &lc, &ld);
  ASSERT_TRUE(h.cpu().mla_cache_write({ckv.first.view, w.first.view, 1e-6f, c.cpu.view, &lc}).ok());
  const Status st = h.dev().mla_cache_write({ckv.second.view, w.second.view, 1e-6f, c.dev.view, &ld});
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(h.dev().synchronize().ok());
}

// Runs `a` on the tested backend with a scratch arena sized by planning it (NaN-filled), checking that the op
// takes exactly what planning reserved and gives it back.
void run_dev_attention(OpHarness& h, backend::MlaAttentionArgs a) {
  backend::Backend& dev = h.dev();
  Arena measure;
  a.scratch = &measure;
  ASSERT_TRUE(backend::WorkspacePlanner(dev).mla_attention(a).ok());
  const size_t need = measure.high_water();
  auto buf = dev.allocate(std::max<size_t>(need, 256));
  ASSERT_TRUE(buf.ok());
  const std::vector<uint8_t> nan_bytes(buf.value().size(), 0xff);
  ASSERT_TRUE(dev.copy_to_device(buf.value().data(), nan_bytes.data(), nan_bytes.size()).ok());
  Arena arena(buf.value().data(), need, Device::Cuda);
  a.scratch = &arena;
  const Status st = dev.mla_attention(a);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(dev.synchronize().ok());
  EXPECT_EQ(arena.high_water(), need);
  EXPECT_EQ(arena.used(), 0u);
}

// The backend-option values mla_prefill takes in check_attention for a step with prefill sequences: cuDNN's
// fused attention where this build has it, and rill's flash kernel; a step without any runs once as it is.
std::vector<std::string> prefill_paths(OpHarness& h, const std::vector<Seq>& seqs) {
  const bool prefill = std::any_of(seqs.begin(), seqs.end(), [](const Seq& s) { return s.n_new > 16; });
  if (!prefill) return {""};
  std::vector<std::string> paths;
  if (h.dev().set_option("mla_prefill", "cudnn").ok())
    paths.push_back("cudnn");
  else
    std::printf("[ mla      ] no cuDNN in this build: rill's prefill kernel only\n");
  paths.push_back("rill");
  return paths;
}

// Back to this run's mla_prefill (test_backend_options.h) after a check set it.
void restore_prefill_path(OpHarness& h) {
  (void)h.dev().set_option("mla_prefill", backend::mla_prefill_name(cuda_backend_options().mla_prefill));
}

// History write, step write, then attention on both backends over identical latents (the CPU cache is
// overwritten with the CUDA cache, so only attention is compared; mla_cache_write has its own test). Steps
// with a prefill sequence run once per prefill path (prefill_paths).
void check_attention(OpHarness& h, const std::vector<Seq>& seqs, int heads, int block_size,
                     bool strided_q = false) {
  SCOPED_TRACE(::testing::Message() << "heads " << heads << " block " << block_size << " strided_q "
                                    << strided_q);
  const PagedSteps steps = make_steps(seqs, block_size, h.rng());
  const Shape cache_shape{steps.n_blocks, block_size, kWidth};
  Caches c{h.put(h.cpu(), std::vector<float>(size_t(cache_shape.numel()), 0.0f), DType::F32, cache_shape),
           h.empty(h.dev(), DType::BF16, cache_shape)};
  const auto norm_w = h.put_both(h.uniform(kLora, 0.8f, 1.2f), DType::F32, DType::F32, {kLora});
  if (!steps.history.seqs.empty()) write_step(h, steps.history, block_size, norm_w, c);
  write_step(h, steps.step, block_size, norm_w, c);
  const std::vector<float> dev_cache = h.get(h.dev(), c.dev.view);
  ASSERT_TRUE(
      h.cpu().copy_to_device(c.cpu.view.data, dev_cache.data(), dev_cache.size() * sizeof(float)).ok());

  const int64_t T = steps.step.n_tokens(), qw = int64_t(heads) * (kNope + kRope),
                q_ld = strided_q ? qw + 64 : qw;
  auto q_buf = h.put_both(h.randn(T * q_ld), DType::F32, DType::BF16, {T, q_ld});
  auto q_view = [&](const BackendTensor& b) {
    TensorView v = b.view;
    v.shape = Shape{T, heads, kNope + kRope};
    v.strides = {q_ld, kNope + kRope, 1, 0, 0};
    return v;
  };
  // kv_b ~ N(0, 1/128): q_lat ~ N(0, 1) and scores with std ~1.7, so the softmax is neither flat nor one-hot.
  auto kvb = h.put_both(h.randn(int64_t(heads) * (kNope + kV) * kLora, 1.0f / std::sqrt(128.0f)), DType::BF16,
                        DType::BF16, {int64_t(heads) * (kNope + kV), kLora});
  const backend::LinearWeight w_cpu{kvb.first.view}, w_dev{kvb.second.view};
  const BackendTensor out_cpu = h.empty(h.cpu(), DType::F32, {T, int64_t(heads) * kV});

  backend::BatchLayout lc, ld;
  h.layouts(steps.step, block_size, &lc, &ld);
  backend::MlaAttentionArgs a;
  a.n_heads = heads;
  a.nope = kNope;
  a.rope = kRope;
  a.v_dim = kV;
  a.kv_lora = kLora;
  a.scale = 1.0f / std::sqrt(float(kNope + kRope));
  backend::MlaAttentionArgs ac = a, ad = a;
  ac.q = q_view(q_buf.first);
  ac.cache = c.cpu.view;
  ac.kv_b = &w_cpu;
  ac.layout = &lc;
  ac.out = out_cpu.view;
  ad.q = q_view(q_buf.second);
  ad.cache = c.dev.view;
  ad.kv_b = &w_dev;
  ad.layout = &ld;
  ASSERT_TRUE(h.cpu().mla_attention(ac).ok());
  const std::vector<float> want = h.get(h.cpu(), out_cpu.view);
  for (const std::string& path : prefill_paths(h, seqs)) {
    SCOPED_TRACE("mla_prefill " + (path.empty() ? std::string("(no prefill)") : path));
    if (!path.empty()) {
      ASSERT_TRUE(h.dev().set_option("mla_prefill", path).ok());
    }
    const BackendTensor out_dev = h.empty(h.dev(), DType::BF16, {T, int64_t(heads) * kV});  // NaN-poisoned
    ad.out = out_dev.view;
    run_dev_attention(h, ad);
    const std::vector<float> got = h.get(h.dev(), out_dev.view);
    const double err = rel_l2(got, want);
    EXPECT_LE(err, kAttnTol) << "max |d| " << max_abs(got, want);
    std::printf("[ mla      ] %zu seqs, %lld tokens, heads %d%s%s: rel-L2 %.2e\n", seqs.size(), (long long)T,
                heads, path.empty() ? "" : ", prefill ", path.c_str(), err);
  }
  restore_prefill_path(h);
}

TEST(MlaCuda, CacheWriteShuffledBlocks) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  for (int bs : {64, 16}) {
    SCOPED_TRACE(::testing::Message() << "block " << bs);
    const PagedSteps steps = make_steps({{0, 37}, {100, 5}, {64, 64}, {3, 1}}, bs, h.rng());
    const Shape shape{steps.n_blocks, bs, kWidth};
    Caches c{h.put(h.cpu(), std::vector<float>(size_t(shape.numel()), 0.0f), DType::F32, shape),
             h.empty(h.dev(), DType::BF16, shape)};
    const auto norm_w = h.put_both(h.uniform(kLora, 0.5f, 1.5f), DType::F32, DType::F32, {kLora});
    write_step(h, steps.step, bs, norm_w, c);
    const std::vector<float> want = h.get(h.cpu(), c.cpu.view), got = h.get(h.dev(), c.dev.view);
    std::vector<float> want_c, got_c;
    std::vector<char> written(size_t(steps.n_blocks) * bs, 0);
    for (const auto& s : steps.step.seqs)
      for (int p = s.start_pos; p < s.start_pos + s.n_new; ++p) {
        const size_t row = size_t(s.block_table[size_t(p / bs)]) * bs + size_t(p % bs);
        written[row] = 1;
        for (int i = 0; i < kWidth; ++i) {
          const float wv = want[row * kWidth + size_t(i)], gv = got[row * kWidth + size_t(i)];
          if (i < kLora) {
            want_c.push_back(wv);
            got_c.push_back(gv);
          } else {
            ASSERT_EQ(gv, wv) << "k_pe must be copied exactly (row " << row << ", col " << i << ")";
          }
        }
      }
    // Normalised value and product are each rounded to bf16 on CUDA (KimiRMSNorm): <= ~2 bf16 ulps.
    EXPECT_LE(rel_l2(got_c, want_c), 5e-3);
    for (size_t row = 0; row < written.size(); ++row) {
      if (!written[row]) {
        ASSERT_TRUE(std::isnan(got[row * kWidth])) << "row " << row << " was not to be written";
      }
    }
  }
}

TEST(MlaCuda, DecodeSingleSequence) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  for (int ctx : {1, 17, 64, 65, 4096}) check_attention(h, {{ctx - 1, 1}}, 2, 64);
  check_attention(h, {{0, 1}}, 1, 64);
  check_attention(h, {{16, 1}}, 1, 16);
  check_attention(h, {{64, 1}}, 32, 64);
  check_attention(h, {{4095, 1}}, 32, 64);
}

TEST(MlaCuda, DecodeBatch16MixedContexts) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  std::vector<Seq> seqs;
  std::uniform_int_distribution<int> ctx(1, 3000);
  for (int i = 0; i < 16; ++i) seqs.push_back({ctx(h.rng()) - 1, 1});
  seqs[3] = {0, 1};
  seqs[7] = {4095, 1};
  check_attention(h, seqs, 32, 64);
}

// 40 sequences x 32 heads = 1280 combine rows: the warp-per-row combine (below 1024 rows it is block-per-row).
TEST(MlaCuda, DecodeBatch40TakesTheManyRowsCombine) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  std::vector<Seq> seqs;
  std::uniform_int_distribution<int> ctx(1, 2000);
  for (int i = 0; i < 40; ++i) seqs.push_back({ctx(h.rng()) - 1, 1});
  check_attention(h, seqs, 32, 64);
}

TEST(MlaCuda, DecodeMultiTokenCausal) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  check_attention(h, {{300, 4}}, 32, 64);         // speculative-decode shape: 4 rows of 32 heads
  check_attention(h, {{0, 8}, {130, 8}}, 2, 16);  // causal inside the step
  check_attention(h, {{300, 9}}, 32, 64);          // a verify step of k = 8
  check_attention(h, {{0, 16}, {130, 16}, {4000, 12}}, 2, 16);  // largest decode n_new (kDecodeMaxNew)
  check_attention(h, {{1000, 3}, {5, 2}, {63, 1}}, 32, 64);
}

TEST(MlaCuda, PrefillFromEmpty) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  for (int T : {7, 20, 64, 65, 300}) check_attention(h, {{0, T}}, 2, 64);
  check_attention(h, {{0, 130}}, 1, 64);
  check_attention(h, {{0, 300}}, 32, 64);
}

TEST(MlaCuda, PrefillContinuesFromCache) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  check_attention(h, {{100, 50}}, 2, 64);
  check_attention(h, {{100, 50}}, 32, 16);
  check_attention(h, {{128, 128}}, 2, 64);
}

TEST(MlaCuda, MixedDecodeAndPrefillBatch) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  const std::vector<Seq> seqs = {{999, 1}, {0, 130}, {36, 3}, {70, 90}};
  check_attention(h, seqs, 2, 16, /*strided_q=*/true);
  check_attention(h, seqs, 32, 64, /*strided_q=*/true);
  check_attention(h, seqs, 1, 64);
}

// Several prefill sequences with cached prefixes: the context expansion runs in groups of sequences (one
// group under the default cap; the ctest variant backend_tests(mla_expand_rows=64) sets that option, so every
// group holds as few sequences as fit the longest one's rows).
TEST(MlaCuda, PrefillSequencesExpandedInGroups) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  const std::vector<Seq> seqs = {{0, 20}, {50, 30}, {5, 12}, {3, 1}, {200, 40}, {64, 9}, {0, 70}};
  check_attention(h, seqs, 2, 16);
  check_attention(h, seqs, 32, 64, /*strided_q=*/true);
}

// Prefill shapes at the edges of the cuDNN path's buckets and batching (cudnn_sdpa.h): a 17-token chunk (the
// smallest prefill) from empty and after a long cached prefix, lengths either side of the 64-row bucket floor
// and of a power of two in one batch (padding entries), and a query block much shorter than its context.
TEST(MlaCuda, PrefillOddShapes) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  check_attention(h, {{0, 17}}, 2, 64);
  check_attention(h, {{1000, 17}}, 32, 64);
  check_attention(h, {{4000, 33}}, 2, 16);
  check_attention(h, {{0, 63}, {0, 64}, {0, 65}, {1, 127}, {0, 129}}, 2, 64);
  check_attention(h, {{63, 65}, {2047, 18}, {5, 200}}, 32, 64, /*strided_q=*/true);
}

// More prefill sequences than one cuDNN call takes (kSdpaMaxBatch = 64): 70 chunks of 17..48 tokens after
// cached prefixes, with decode sequences between them, in one step (two calls per group; a 6-sequence call
// padded to 8).
TEST(MlaCuda, PrefillManySequences) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  std::vector<Seq> seqs;
  std::uniform_int_distribution<int> n_new(17, 48), start(0, 90);
  for (int i = 0; i < 70; ++i) {
    seqs.push_back({start(h.rng()), n_new(h.rng())});
    if (i % 20 == 7) seqs.push_back({start(h.rng()) + 10, 1});
  }
  check_attention(h, seqs, 2, 16);
}

TEST(MlaCuda, PrefillPathOption) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  EXPECT_FALSE(h.dev().set_option("mla_prefill", "fast").ok());
  EXPECT_TRUE(h.dev().set_option("mla_prefill", "rill").ok());
  EXPECT_TRUE(h.dev().set_option("mla_prefill", "auto").ok());
  restore_prefill_path(h);
}

TEST(MlaCuda, K3HeadCount) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  check_attention(h, {{299, 1}, {40, 2}, {0, 70}}, 96, 64);
}

TEST(MlaCuda, RejectsUnsupportedHeadDims) {
  OpHarness h("cuda");
  RILL_REQUIRE_BACKEND(h);
  model::StepBatch b;
  model::SequenceStep st;
  st.n_new = 1;
  st.block_table = {0};
  b.seqs.push_back(st);
  b.token_ids = {0};
  backend::BatchLayout lc, ld;
  h.layouts(b, 64, &lc, &ld);
  const int nope = 64;  // Kimi uses 128; the kernels are built for it
  const BackendTensor q = h.put(h.dev(), h.randn(nope + kRope), DType::BF16, {1, 1, nope + kRope});
  const BackendTensor cache = h.put(h.dev(), h.randn(64 * kWidth), DType::BF16, {1, 64, kWidth});
  const BackendTensor kvb = h.put(h.dev(), h.randn((nope + kV) * kLora), DType::BF16, {nope + kV, kLora});
  const BackendTensor out = h.empty(h.dev(), DType::BF16, {1, kV});
  const backend::LinearWeight w{kvb.view};
  backend::MlaAttentionArgs a;
  a.q = q.view;
  a.cache = cache.view;
  a.kv_b = &w;
  a.n_heads = 1;
  a.nope = nope;
  a.rope = kRope;
  a.v_dim = kV;
  a.kv_lora = kLora;
  a.scale = 0.1f;
  a.layout = &ld;
  a.out = out.view;
  Arena none;
  a.scratch = &none;
  const Status st_run = h.dev().mla_attention(a);
  EXPECT_FALSE(st_run.ok());
  EXPECT_NE(st_run.message().find("qk_nope_head_dim 64"), std::string::npos) << st_run.message();
}

}  // namespace
}  // namespace rill::testing
