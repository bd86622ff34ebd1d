#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/moe/cublas_grouped.h"
#include "backend/cuda/moe/device.cuh"
#include "backend/cuda/moe/grouped_cublas_path.h"

namespace rill::cuda::moe {
namespace {

constexpr int kPointerThreads = 1024;  // one thread per expert (E <= kMaxExperts)
constexpr int kRowWarps = 8;

struct PointerParams {
  const int32_t* offsets;  // [E + 1]
  int E, I, Hx;
  bf16* xy;
  bf16* gate_up;
  const bf16* w_gate_up;  // [E, 2I, Hx]
  int64_t gu_expert_stride;
  const bf16* w_down;  // [E, Hx, I]
  int64_t dn_expert_stride;
  const void** gu_a;
  const void** gu_w;
  void** gu_c;
  const void** dn_a;
  const void** dn_w;
  void** dn_c;
};

// The device pointer arrays of both grouped calls, one entry per expert with slots, in expert order (the
// host lists the same experts' slot counts from the same offsets).
__global__ void __launch_bounds__(kPointerThreads) moe_cublas_pointers_kernel(const PointerParams p) {
  pdl_prologue();
  using Scan = cub::BlockScan<int, kPointerThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const int e = threadIdx.x;
  const int first = e < p.E ? p.offsets[e] : 0;
  const int used = e < p.E && p.offsets[e + 1] > first ? 1 : 0;
  int g = 0;
  Scan(scan_tmp).ExclusiveSum(used, g);
  if (!used) return;
  const int64_t I2 = 2 * int64_t(p.I);
  p.gu_a[g] = p.xy + int64_t(first) * p.Hx;
  p.gu_w[g] = p.w_gate_up + int64_t(e) * p.gu_expert_stride;
  p.gu_c[g] = p.gate_up + int64_t(first) * I2;
  p.dn_a[g] = p.gate_up + int64_t(first) * I2;  // the activation, in place in the first I columns
  p.dn_w[g] = p.w_down + int64_t(e) * p.dn_expert_stride;
  p.dn_c[g] = p.xy + int64_t(first) * p.Hx;
}

// xy[slot] = x[slot_token[slot]] for the valid slots: a warp per row, 16-byte chunks.
__global__ void __launch_bounds__(kRowWarps * 32)
    moe_gather_rows_kernel(const bf16* x, int64_t ldx, const int32_t* slot_token, const int32_t* offsets,
                           int E, int Hx, bf16* xy) {
  pdl_prologue();
  const int lane = threadIdx.x & 31;
  const int64_t slot = int64_t(blockIdx.x) * kRowWarps + (threadIdx.x >> 5);
  if (slot >= offsets[E]) return;
  const uint4* src = reinterpret_cast<const uint4*>(x + int64_t(slot_token[slot]) * ldx);
  uint4* dst = reinterpret_cast<uint4*>(xy + slot * Hx);
  for (int c = lane; c < Hx / 8; c += 32) dst[c] = src[c];
}

// gate_up[s, i] = bf16(act(gate_up[s, i], gate_up[s, I + i])) for the valid slots, 8 columns a thread; in
// place: each (s, i) is read and written by one thread, and column I + i is read by that thread only.
__global__ void moe_act_in_place_kernel(bf16* gate_up, const int32_t* offsets, int E, int I, Act act,
                                        float beta, float linear_beta) {
  pdl_prologue();
  const int64_t groups = int64_t(offsets[E]) * (I / 8);
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < groups;
       q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = q / (I / 8);
    const int i = int(q - s * (I / 8)) * 8;
    bf16* row = gate_up + s * 2 * int64_t(I);
    float g[8], u[8], h[8];
    load_bf16<8>(row + i, g);
    load_bf16<8>(row + I + i, u);
#pragma unroll
    for (int v = 0; v < 8; ++v) h[v] = expert_act(act, g[v], u[v], beta, linear_beta);
    store_bf16<8>(row + i, h);
  }
}

}  // namespace

Status launch_gather_rows(const backend::MoeExpertsArgs& a, const int32_t* slot_token, const int32_t* offsets,
                          int E, int Hx, int64_t pairs, bf16* xy, cudaStream_t stream) {
  return launch("moe_gather_rows",
                {dim3(unsigned((pairs + kRowWarps - 1) / kRowWarps)), dim3(kRowWarps * 32)}, stream,
                moe_gather_rows_kernel, static_cast<const bf16*>(a.x.data), a.x.stride(0), slot_token,
                offsets, E, Hx, xy);
}

Status run_expert_gemms_cublas(const CublasExpertsArgs& c, const CudaContext& cx) {
  const backend::MoeExpertsArgs& a = *c.args;
  const backend::ExpertWeights& ex = *a.experts;
  PointerParams pp{};
  pp.offsets = c.expert_offsets;
  pp.E = c.E;
  pp.I = c.I;
  pp.Hx = c.Hx;
  pp.xy = c.xy;
  pp.gate_up = c.gate_up;
  pp.w_gate_up = static_cast<const bf16*>(ex.gate_up.data);
  pp.gu_expert_stride = ex.gate_up.stride(0);
  pp.w_down = static_cast<const bf16*>(ex.down.data);
  pp.dn_expert_stride = ex.down.stride(0);
  void** q = c.pointers;
  pp.gu_a = const_cast<const void**>(q);
  pp.gu_w = const_cast<const void**>(q + c.E);
  pp.gu_c = q + 2 * c.E;
  pp.dn_a = const_cast<const void**>(q + 3 * c.E);
  pp.dn_w = const_cast<const void**>(q + 4 * c.E);
  pp.dn_c = q + 5 * c.E;
  RILL_TRY(launch("moe_cublas_pointers", {dim3(1), dim3(kPointerThreads)}, cx.stream,
                  moe_cublas_pointers_kernel, pp));
  // The host needs the slot counts: the copy goes first, the gather runs while the host waits for it.
  RILL_TRY(cx.moe_grouped_gemm->copy_offsets(c.expert_offsets, c.E, cx.stream));
  RILL_TRY(launch_gather_rows(a, c.slot_token, c.expert_offsets, c.E, c.Hx, c.pairs, c.xy, cx.stream));
  RILL_ASSIGN_OR_RETURN(const int32_t* offsets, cx.moe_grouped_gemm->wait_offsets());
  std::vector<int> m;
  m.reserve(size_t(c.E));
  for (int e = 0; e < c.E; ++e)
    if (const int n = offsets[size_t(e) + 1] - offsets[size_t(e)]; n > 0) m.push_back(n);
  if (m.empty()) return {};
  CublasGroupedGemm& gemm = *cx.moe_grouped_gemm;
  RILL_TRY(gemm.run(m.data(), int(m.size()), 2 * c.I, c.Hx, q, c.Hx, q + c.E, ex.gate_up.stride(1),
                    q + 2 * c.E, 2 * int64_t(c.I), cx.stream));
  const int64_t items = int64_t(offsets[size_t(c.E)]) * (c.I / 8);
  const unsigned blocks = unsigned(std::min<int64_t>((items + 255) / 256, int64_t(cx.sm_count) * 8));
  RILL_TRY(launch("moe_act_in_place", {dim3(std::max(blocks, 1u)), dim3(256)}, cx.stream,
                  moe_act_in_place_kernel, c.gate_up, c.expert_offsets, c.E, c.I,
                  a.activation == backend::Activation::Silu ? Act::Silu : Act::Situ, a.beta, a.linear_beta));
  RILL_TRY(gemm.run(m.data(), int(m.size()), c.Hx, c.I, q + 3 * c.E, 2 * int64_t(c.I), q + 4 * c.E,
                    ex.down.stride(1), q + 5 * c.E, c.Hx, cx.stream));
  return {};
}

}  // namespace rill::cuda::moe
