// Diagnostic tests of the MLA prefill attention's cuDNN graph alone (src/backend/cuda/mla/cudnn_sdpa.h),
// without the rest of mla_attention: random bf16 Q, K and V in the layouts rill hands cuDNN (q [T, H, 192]; K
// [rows, H, 192]; V inside a kvx-like [rows, H, 256] buffer at +128; out [T, H * 128]) against a float
// reference of causal attention with bottom-right alignment (query i of a sequence with n new tokens and ctx
// context rows sees keys j <= i + ctx - n). Each test turns one more feature of the graph on, so a GPU run
// tells which one breaks: no ragged offsets and no padding mask (exact lengths), then the padding mask with
// sequence lengths, then ragged offsets for one sequence, then several sequences with a padded (empty) batch
// entry. The softmax statistics cuDNN writes go to a buffer of their own. Every buffer has 256 zeroed rows
// past its end, so a tile read past the last row finds finite data (the backend's own scratch gives K and V
// the same, params.h kSdpaTailRows). Skipped without a GPU or without cuDNN in the build. Each test runs in
// its own process under ctest, so an illegal access in one does not hide the others.
#if __has_include(<cuda_runtime_api.h>)

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/mla/cudnn_sdpa.h"

namespace rill::testing {
namespace {

using cuda::mla::CudnnSdpa;
using cuda::mla::SdpaArgs;
using cuda::mla::SdpaShape;

constexpr int kQk = 192, kV = 128, kKvb = 256, kPadRows = 256;

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A device buffer freed at scope exit.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
    if (p) cudaMemset(p, 0, bytes);
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

struct Seq {
  int n_new, ctx;  // queries and context rows (ctx >= n_new: the last n_new context rows are the new tokens)
};

// Runs the graph over `seqs` (packed one after another) with the given features and compares to the
// reference.
void check_sdpa(const std::vector<Seq>& seqs, int heads, bool ragged, bool padding) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) GTEST_SKIP() << "no CUDA device";
  auto made = CudnnSdpa::create(0);
  if (!made.ok()) GTEST_SKIP() << made.status().message();
  std::unique_ptr<CudnnSdpa> sdpa = std::move(made).value();

  const int H = heads, n = int(seqs.size());
  int T = 0, rows = 0, max_q = 0, max_kv = 0;
  for (const Seq& s : seqs) {
    T += s.n_new;
    rows += s.ctx;
    max_q = std::max(max_q, s.n_new);
    max_kv = std::max(max_kv, s.ctx);
  }
  SdpaShape shape{.n_heads = H,
                  .batch = ragged ? cuda::mla::sdpa_bucket(n, 1) : n,
                  .max_q = padding ? cuda::mla::sdpa_bucket(max_q, 64) : max_q,
                  .max_kv = padding ? cuda::mla::sdpa_bucket(max_kv, 64) : max_kv,
                  .q_row = int64_t(H) * kQk,
                  .q_head = kQk,
                  .out_row = int64_t(H) * kV,
                  .ragged = ragged,
                  .padding = padding};
  if (!ragged) {
    // Without ragged offsets entry b starts max_q (max_kv) rows after entry b - 1: every sequence must fill
    // it.
    for (const Seq& s : seqs) ASSERT_TRUE(padding || (s.n_new == shape.max_q && s.ctx == shape.max_kv));
    if (padding) {
      T = n * shape.max_q;
      rows = n * shape.max_kv;
    }
  }

  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](std::vector<uint16_t>& v) {
    for (auto& x : v) x = to_bf16(nd(rng));
  };
  std::vector<uint16_t> q(size_t(T) * H * kQk), k(size_t(rows) * H * kQk), kvx(size_t(rows) * H * kKvb);
  fill(q);
  fill(k);
  fill(kvx);
  // Where each sequence's queries and context rows start.
  std::vector<int> tok0(size_t(n) + 1), row0(size_t(n) + 1);
  for (int b = 0; b < n; ++b) {
    tok0[size_t(b) + 1] = tok0[size_t(b)] + (ragged ? seqs[size_t(b)].n_new : shape.max_q);
    row0[size_t(b) + 1] = row0[size_t(b)] + (ragged ? seqs[size_t(b)].ctx : shape.max_kv);
  }

  // Reference (float over the bf16 values).
  const float scale = 1.0f / std::sqrt(float(kQk));
  std::vector<float> want(size_t(T) * H * kV, 0.0f);
  for (int b = 0; b < n; ++b) {
    const Seq& s = seqs[size_t(b)];
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < s.n_new; ++i) {
        const int keys = i + s.ctx - s.n_new + 1;
        std::vector<float> p(static_cast<size_t>(keys));
        float mx = -INFINITY;
        for (int j = 0; j < keys; ++j) {
          float dot = 0;
          for (int d = 0; d < kQk; ++d)
            dot += from_bf16(q[(size_t(tok0[size_t(b)] + i) * H + h) * kQk + d]) *
                   from_bf16(k[(size_t(row0[size_t(b)] + j) * H + h) * kQk + d]);
          p[size_t(j)] = dot * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        float sum = 0;
        for (float& x : p) sum += (x = std::exp(x - mx));
        for (int j = 0; j < keys; ++j)
          for (int d = 0; d < kV; ++d)
            want[(size_t(tok0[size_t(b)] + i) * H + h) * kV + d] +=
                p[size_t(j)] / sum * from_bf16(kvx[(size_t(row0[size_t(b)] + j) * H + h) * kKvb + kV + d]);
      }
  }

  // Device buffers (kPadRows zeroed rows past each end), lengths and offsets.
  DevBuf dq((size_t(T) + kPadRows) * H * kQk * 2), dk((size_t(rows) + kPadRows) * H * kQk * 2),
      dkvx((size_t(rows) + kPadRows) * H * kKvb * 2), dout((size_t(T) + kPadRows) * H * kV * 2),
      dstats((size_t(T) + kPadRows) * H * 4);
  const int B = shape.batch;
  DevBuf dlen(size_t(2) * (B + 2) * 4 + 64), doff(size_t(5) * (B + 2) * 8 + 64);
  ASSERT_TRUE(dq.p && dk.p && dkvx.p && dout.p && dstats.p && dlen.p && doff.p);
  ASSERT_EQ(cudaMemcpy(dq.p, q.data(), q.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dk.p, k.data(), k.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dkvx.p, kvx.data(), kvx.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  const std::vector<uint16_t> nan_out(size_t(T) * H * kV, 0x7fc0);  // unwritten outputs show up as NaN
  ASSERT_EQ(cudaMemcpy(dout.p, nan_out.data(), nan_out.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  const int stride = B + 2;  // (kept even: every int64 array 16-byte aligned)
  std::vector<int32_t> len(size_t(2) * stride, 0);
  std::vector<int64_t> off(size_t(5) * stride, 0);
  for (int b = 0; b <= B; ++b) {
    const int bb = std::min(b, n);  // padded entries: empty, at the end
    if (b < B) {
      len[size_t(b)] = b < n ? seqs[size_t(b)].n_new : 0;
      len[size_t(stride + b)] = b < n ? seqs[size_t(b)].ctx : 0;
    }
    off[size_t(b)] = int64_t(tok0[size_t(bb)]) * H * kQk;
    off[size_t(stride + b)] = int64_t(row0[size_t(bb)]) * H * kQk;
    off[size_t(2 * stride + b)] = int64_t(row0[size_t(bb)]) * H * kKvb;
    off[size_t(3 * stride + b)] = int64_t(tok0[size_t(bb)]) * H * kV;
    off[size_t(4 * stride + b)] = int64_t(tok0[size_t(bb)]) * H;
  }
  ASSERT_EQ(cudaMemcpy(dlen.p, len.data(), len.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(doff.p, off.data(), off.size() * 8, cudaMemcpyHostToDevice), cudaSuccess);

  const Status st = sdpa->prepare(shape);
  ASSERT_TRUE(st.ok()) << st.message();
  const auto* l32 = static_cast<const int32_t*>(dlen.p);
  const auto* o64 = static_cast<const int64_t*>(doff.p);
  const SdpaArgs args{.q = dq.p,
                      .k = dk.p,
                      .v = static_cast<const uint16_t*>(dkvx.p) + kV,
                      .out = dout.p,
                      .stats = static_cast<float*>(dstats.p),
                      .seq_q = l32,
                      .seq_kv = l32 + stride,
                      .off_q = o64,
                      .off_k = o64 + stride,
                      .off_v = o64 + 2 * stride,
                      .off_o = o64 + 3 * stride,
                      .off_stats = o64 + 4 * stride,
                      .scale = scale};
  const Status run = sdpa->run(shape, args, nullptr);
  ASSERT_TRUE(run.ok()) << run.message();
  const cudaError_t sync = cudaDeviceSynchronize();
  ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  std::vector<uint16_t> got16(size_t(T) * H * kV);
  ASSERT_EQ(cudaMemcpy(got16.data(), dout.p, got16.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);

  double num = 0, den = 0, max_d = 0;
  int64_t compared = 0;
  for (int b = 0; b < n; ++b)
    for (int i = 0; i < seqs[size_t(b)].n_new; ++i)
      for (int c = 0; c < H * kV; ++c) {
        const size_t at = size_t(tok0[size_t(b)] + i) * H * kV + size_t(c);
        const double g = from_bf16(got16[at]), w = want[at];
        const double d = std::isfinite(g) ? std::fabs(g - w) : INFINITY;
        num += d * d;
        den += w * w;
        max_d = std::max(max_d, d);
        ++compared;
      }
  const double rel = std::sqrt(num / std::max(den, 1e-30));
  std::printf(
      "[ sdpa     ] %d seqs, heads %d, ragged %d, padding %d (B %d, max_q %d, max_kv %d): rel-L2 %.2e\n", n,
      H, int(ragged), int(padding), B, shape.max_q, shape.max_kv, rel);
  EXPECT_GT(compared, 0);
  EXPECT_LE(rel, 1e-2) << "max |d| " << max_d;
}

// Plain causal attention: no ragged offsets, no padding mask, exact lengths (128: a multiple of cuDNN's
// tiles, so no masking at all beyond the causal one).
TEST(MlaCudnn, SdpaNoRaggedNoPadding) {
  check_sdpa({{128, 128}}, 2, /*ragged=*/false, /*padding=*/false);
}

// The padding mask with sequence-length tensors (20 of 64 queries and keys, then 20 queries over 50 keys:
// the bottom-right causal alignment), no ragged offsets.
TEST(MlaCudnn, SdpaPaddingNoRagged) {
  check_sdpa({{20, 20}}, 2, /*ragged=*/false, /*padding=*/true);
  check_sdpa({{20, 50}}, 2, /*ragged=*/false, /*padding=*/true);
}

// Ragged offsets (int64 elements) for one sequence: the first MlaCuda.PrefillFromEmpty case.
TEST(MlaCudnn, SdpaRaggedSingleSequence) {
  check_sdpa({{20, 20}}, 2, /*ragged=*/true, /*padding=*/true);
}

// Three packed sequences (a fourth, empty batch entry pads the batch to a power of two).
TEST(MlaCudnn, SdpaRaggedSequencesWithEmptyEntry) {
  check_sdpa({{20, 20}, {33, 90}, {17, 17}}, 2, /*ragged=*/true, /*padding=*/true);
}

}  // namespace
}  // namespace rill::testing

#endif  // __has_include(<cuda_runtime_api.h>)
