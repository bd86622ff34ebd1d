// CudnnSdpa: MLA prefill attention through cuDNN 9's fused attention (the SDPA forward graph of its C backend
// API: Q K^T, scale, padding mask, bottom-right causal mask, softmax, P V), one call per batch of up to
// kSdpaMaxBatch prefill sequences in ragged (packed) layout. Execution plans are built once per shape bucket
// (batch, longest query and context rounded up to powers of two; strides) and cached; the real lengths are
// device tensors, so one plan serves every step of its bucket. Host-only header: no cuDNN types, so the
// backend compiles the same with and without cuDNN (create() answers Unavailable where the build has none).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace rill::cuda::mla {

// What a plan is built for. batch / max_q / max_kv are the bucketed sizes (sdpa_bucket), never the exact
// ones. `ragged` and `padding` are on for every call rill makes; the diagnostic tests (tests/backend/
// mla_cudnn_test.cc) turn them off to tell which feature of the graph a failure comes from: without `ragged`,
// Q / K / V / O carry no ragged offsets (batch entry b starts max_q (max_kv) rows after entry b - 1); without
// `padding`, no sequence-length tensors and no padding mask (every entry has exactly max_q queries and max_kv
// keys, which must then be equal: the causal mask is row >= col).
struct SdpaShape {
  int n_heads = 0, batch = 0, max_q = 0, max_kv = 0;
  int64_t q_row = 0, q_head = 0, out_row = 0;  // element strides of q (rows, heads) and out (rows)
  bool ragged = true, padding = true;
  bool operator==(const SdpaShape& o) const {
    return n_heads == o.n_heads && batch == o.batch && max_q == o.max_q && max_kv == o.max_kv &&
           q_row == o.q_row && q_head == o.q_head && out_row == o.out_row && ragged == o.ragged &&
           padding == o.padding;
  }
};

// Powers of two, at least `floor`: few plans, and a bucket's padding only adds early-exiting CTAs. (Past
// 2^30, n itself: no overflow.)
inline int sdpa_bucket(int n, int floor) {
  int b = floor;
  while (b < n) {
    if (b >= (1 << 30)) return n;
    b *= 2;
  }
  return b;
}

struct SdpaArgs {
  const void* q;  // bf16 [T, H, 192], strides q_row / q_head
  const void* k;  // bf16 [rows, H, 192] contiguous (launch_k_build)
  const void* v;  // bf16 [rows, H, 128] = kvx + 128: rows H * 256, heads 256 apart
  void* out;      // bf16 [T, H * 128], row stride out_row
  float* stats;   // fp32 [T, H]: the softmax statistics cuDNN writes (unused by rill), ragged like q
  // Device arrays (params.h SdpaBatch), 16-byte aligned: int32 [batch] lengths (`padding`) and int64
  // [batch + 1] ragged element offsets of Q, K, V, out and stats from the pointers above (`ragged`).
  const int32_t* seq_q;
  const int32_t* seq_kv;
  const int64_t* off_q;
  const int64_t* off_k;
  const int64_t* off_v;
  const int64_t* off_o;
  const int64_t* off_stats;
  float scale;  // softmax scale (MlaAttentionArgs::scale)
};

class CudnnSdpa {
 public:
  // No cuDNN call yet: the handle is made by the first prepare() (cuDNN's start-up costs only runs that use
  // it).
  static Result<std::unique_ptr<CudnnSdpa>> create(int device);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // The plan for `s`, built on first use (host work only: heuristics, engine finalisation; the first plan of
  // an engine may compile kernels, hundreds of ms). Unimplemented when cuDNN has no engine for the graph (the
  // caller may take rill's kernel); other errors name the cuDNN call and status.
  Status prepare(const SdpaShape& s);
  // Enqueues the fused attention on `stream` (prepare() first). The plan's workspace is held here, grown on
  // demand outside any capture (SDPA inference plans usually need none).
  Status run(const SdpaShape& s, const SdpaArgs& a, cudaStream_t stream);
  // "cuDNN 9.x.y (n plans)" for logs and the benchmark's notes.
  std::string describe() const;

 private:
  CudnnSdpa();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rill::cuda::mla
