// MoE router (spec §3.5) exactly as CpuBackend::moe_route: fp32 logits from bf16 x and bf16 W (products of
// bf16 values are exact in fp32; only the summation order differs from the CPU), sigmoid (or softmax with an
// fp64 sum), + bias for selection only, grouped top-k (group score = sum of its two best biased scores, keep
// the topk_group best groups), top-k with ties to the lower index, weights from the unbiased scores,
// renormalised (+1e-20) when asked and top_k > 1, times the routed scaling factor.
//
// Decode (T <= kGemvMaxRows): the logits come from the split GEMV (gemm/gemv.cuh, F32 out, the router rows
// spread over every SM) into CudaContext::route_logits, and the last of its CTAs to finish selects every
// token's experts (RouteTail, one warp per token): one launch instead of one cluster kernel whose 8 SMs read
// the whole 1.2 MB router (19 us). With decode_fusion off (the default) the selection is a second kernel:
// moe_select_wide_kernel for routers of at most 256 experts choosing at most 8 by sigmoid scores without a
// group limit (Kimi Linear's), a CTA of 256 threads a token; moe_select_kernel (one warp a token) for the
// rest. All of them choose the same experts in the same order with the same weights from the same logits.
//
// Prefill (T >= options.moe_route_gemm_min_tokens): the logits as one cuBLASLt GEMM (fp32 accumulate and
// output) per chunk of tokens into CudaContext::route_logits, then moe_select_rows_kernel, a warp per token:
// the router is read once per chunk instead of once per 8 tokens (0.96 ms at 8K tokens on the H100).
//
// Mid-sized steps: clusters of kRouteTokens CTAs, one cluster per kRouteTokens tokens. CTA r loads the
// cluster's token rows into shared memory and computes the logits of expert slice r (a warp per expert,
// 16-byte loads of the weight row, fp32 accumulation for every token of the tile), so W is read once per
// token tile and spread over 8 SMs (the decode case: a 1.2 MB router would take one SM ~10 us). After a
// cluster barrier, CTA r gathers token r's full logit row through distributed shared memory and one warp
// selects its experts.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/smem.h"
#include "backend/cuda/gemm/gemm_runner.h"
#include "backend/cuda/gemm/gemv.cuh"
#include "backend/cuda/moe/device.cuh"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/params.h"
#include "backend/cuda/moe/select_network.h"

namespace rill::cuda {
namespace {

namespace cg = cooperative_groups;
using moe::bf16;
using moe::kRouteThreads;
using moe::kRouteTokens;

constexpr unsigned kFull = 0xffffffffu;

struct RouteParams {
  const bf16* x;  // [T, H]
  int64_t ldx;
  const bf16* w;  // [E, H]
  int64_t ldw;
  const float* bias;  // [E] or nullptr
  int T, H, E, top_k, n_groups, topk_group;
  bool renormalize, softmax;
  float scaling;
  int32_t* ids;  // [T, top_k]
  int64_t ld_ids;
  float* weights;  // [T, top_k]
  int64_t ld_weights;
  int expert_begin, n_local;  // expert parallelism: ids written local to this rank (-1 elsewhere); 0: global
};

// The id moe_experts sees (backend::MoeRouteArgs::n_local).
__device__ __forceinline__ int local_id(const RouteParams& p, int id) {
  if (p.n_local == 0) return id;
  const int local = id - p.expert_begin;
  return local >= 0 && local < p.n_local ? local : -1;
}

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return moe::select_better(v, i, bv, bi);
}

__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int oi = __shfl_xor_sync(kFull, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
}

// The top-k of one token's selection scores, written as ids and weights (the unbiased scores s, renormalised
// and scaled). Lane l holds its experts l + 32q (q < kPerLane) in registers, sorted best first by `better` (an
// odd-even transposition network, unrolled); then each round's winner is the warp argmax of the lanes' heads,
// and the winning lane pops its head. A warp argmax per round instead of a rescan of every lane's experts per
// round: the selection is one warp's serial work in the decode step (15 us per layer on the H100 before).
// NaN scores and ids past E become (-inf, INT_MAX), which never beats an expert (as the rescan treated NaN);
// if only those are left, expert 0 is taken, as before.
template <int kPerLane, typename Selection>
__device__ __forceinline__ void select_top_k(const RouteParams& p, const float* s, int t, int lane,
                                             Selection selection) {
  float v[kPerLane];
  int id[kPerLane];
#pragma unroll
  for (int q = 0; q < kPerLane; ++q) {
    const int e = lane + 32 * q;
    const float x = e < p.E ? selection(e) : NAN;
    const bool ok = !isnan(x);
    v[q] = ok ? x : -INFINITY;
    id[q] = ok ? e : INT_MAX;
  }
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
#pragma unroll
    for (int q = r & 1; q + 1 < kPerLane; q += 2) {
      if (better(v[q + 1], id[q + 1], v[q], id[q])) {
        const float tv = v[q];
        const int ti = id[q];
        v[q] = v[q + 1], id[q] = id[q + 1];
        v[q + 1] = tv, id[q + 1] = ti;
      }
    }
  }
  int32_t* ids = p.ids + int64_t(t) * p.ld_ids;
  float* w = p.weights + int64_t(t) * p.ld_weights;
  // Lane j keeps the j-th choice in registers (top_k <= 32): reading the weights back from global memory
  // for the normalisation cost a dependent L2 round trip per expert.
  float my_w = 0.0f;
  int my_id = 0;
  for (int j = 0; j < p.top_k; ++j) {
    float bv = v[0];
    int bi = id[0];
    warp_argmax(bv, bi);
    if (bi < p.E && (bi & 31) == lane) {  // the winner's lane moves to its next candidate
#pragma unroll
      for (int q = 0; q + 1 < kPerLane; ++q) v[q] = v[q + 1], id[q] = id[q + 1];
      v[kPerLane - 1] = -INFINITY;
      id[kPerLane - 1] = INT_MAX;
    }
    if (bi >= p.E) bi = 0;  // only NaN selections left: any in-range id
    if (p.top_k <= 32) {
      if (lane == j) my_w = s[bi], my_id = bi;  // unbiased score (spec §8.1)
    } else if (lane == 0) {
      ids[j] = local_id(p, bi);
      w[j] = s[bi];
    }
  }
  if (p.top_k <= 32) {
    float wsum = 0.0f;  // in order j = 0, 1, ... as the reference adds them
    for (int j = 0; j < p.top_k; ++j) wsum += __shfl_sync(kFull, my_w, j);
    if (lane < p.top_k) {
      float x = my_w;
      if (p.renormalize && p.top_k > 1) x /= (wsum + 1e-20f);
      ids[lane] = local_id(p, my_id);
      w[lane] = x * p.scaling;
    }
    return;
  }
  __syncwarp();  // lane 0 rereads what it wrote
  if (lane == 0) {
    float wsum = 0.0f;
    for (int j = 0; j < p.top_k; ++j) wsum += w[j];
    for (int j = 0; j < p.top_k; ++j) {
      float x = w[j];
      if (p.renormalize && p.top_k > 1) x /= (wsum + 1e-20f);
      w[j] = x * p.scaling;
    }
  }
}

// One warp routes token t from its fp32 logit row s[E] (overwritten with the scores).
__device__ void route_select(const RouteParams& p, float* s, int t, int lane) {
  const int E = p.E;
  if (p.softmax) {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, s[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
    double sum = 0.0;
    for (int e = lane; e < E; e += 32) {
      const float ex = expf(s[e] - mx);
      s[e] = ex;
      sum += ex;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
    for (int e = lane; e < E; e += 32) s[e] = float(double(s[e]) / sum);
  } else {
    for (int e = lane; e < E; e += 32) s[e] = 1.0f / (1.0f + expf(-s[e]));
  }
  __syncwarp();
  auto biased = [&](int e) { return s[e] + (p.bias ? p.bias[e] : 0.0f); };

  // Grouped selection: lane g holds group g's score (n_groups <= 32, checked on the host).
  const bool grouped = p.n_groups > 1 && p.topk_group < p.n_groups;
  const int per = E / p.n_groups;
  unsigned keep_groups = 0;
  if (grouped) {
    float gscore = -INFINITY;
    for (int g = 0; g < p.n_groups; ++g) {
      float b1 = -INFINITY, b2 = -INFINITY;  // the two largest biased scores (a multiset, as partial_sort)
      for (int e = g * per + lane; e < (g + 1) * per; e += 32) {
        const float v = biased(e);
        if (v > b1)
          b2 = b1, b1 = v;
        else if (v > b2)
          b2 = v;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float o1 = __shfl_xor_sync(kFull, b1, o), o2 = __shfl_xor_sync(kFull, b2, o);
        const float hi = fmaxf(b1, o1), lo = fminf(b1, o1);
        b2 = fmaxf(lo, fmaxf(b2, o2));
        b1 = hi;
      }
      if (lane == g) gscore = b1 + b2;
    }
    bool taken = lane >= p.n_groups;
    for (int r = 0; r < p.topk_group; ++r) {
      float v = taken ? -INFINITY : gscore;
      int i = taken ? INT_MAX : lane;
      warp_argmax(v, i);
      if (i >= 32) break;  // only NaN scores left
      keep_groups |= 1u << i;
      if (lane == i) taken = true;
    }
  }
  auto selection = [&](int e) {
    return !grouped || ((keep_groups >> (e / per)) & 1u) ? biased(e) : -INFINITY;
  };

  if (E <= 32 * 8)
    select_top_k<8>(p, s, t, lane, selection);
  else
    select_top_k<32>(p, s, t, lane, selection);  // E <= moe::kMaxExperts = 32 x 32
}

template <int kVec>
__global__ void __cluster_dims__(kRouteTokens, 1, 1) __launch_bounds__(kRouteThreads)
    moe_route_kernel(const RouteParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* xs = reinterpret_cast<bf16*>(smem_raw);  // [kRouteTokens, H]
  float* logits =
      reinterpret_cast<float*>(smem_raw + (size_t(kRouteTokens) * p.H * 2 + 15) / 16 * 16);  // [8, E]
  float* row = logits + kRouteTokens * p.E;  // [E]: the full logit row of this CTA's token
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int t0 = blockIdx.y * kRouteTokens, nt = min(kRouteTokens, p.T - t0);

  const int per_row = p.H / kVec;
  for (int idx = threadIdx.x; idx < kRouteTokens * per_row; idx += kRouteThreads) {
    const int tt = idx / per_row, c = (idx - tt * per_row) * kVec;
    bf16* dst = xs + tt * p.H + c;
    const bf16* src = p.x + int64_t(t0 + tt) * p.ldx + c;
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(dst) =
          tt < nt ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
    } else {
      dst[0] = tt < nt ? src[0] : __float2bfloat16_rn(0.0f);
    }
  }
  __syncthreads();

  const int slice = (p.E + kRouteTokens - 1) / kRouteTokens;
  const int e_end = min(p.E, (rank + 1) * slice);
  for (int e = rank * slice + warp; e < e_end; e += kRouteThreads / 32) {
    const bf16* we = p.w + int64_t(e) * p.ldw;
    float acc[kRouteTokens];
#pragma unroll
    for (int tt = 0; tt < kRouteTokens; ++tt) acc[tt] = 0.0f;
    // Four weight chunks are loaded before any is used: at decode the router is latency-bound, and a load per
    // iteration left each warp waiting on memory for every 16 bytes.
    constexpr int kInFlight = 4;
    for (int c0 = lane * kVec; c0 < p.H; c0 += 32 * kVec * kInFlight) {
      float wv[kInFlight][kVec];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int c = c0 + u * 32 * kVec;
        if (c < p.H) {
          moe::load_bf16<kVec>(we + c, wv[u]);
        } else {
#pragma unroll
          for (int v = 0; v < kVec; ++v) wv[u][v] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int c = c0 + u * 32 * kVec;
        if (c >= p.H) break;
#pragma unroll
        for (int tt = 0; tt < kRouteTokens; ++tt) {
          if (tt >= nt) break;
          float xv[kVec];
          moe::load_bf16<kVec>(xs + tt * p.H + c, xv);
#pragma unroll
          for (int v = 0; v < kVec; ++v) acc[tt] = fmaf(wv[u][v], xv[v], acc[tt]);
        }
      }
    }
#pragma unroll
    for (int tt = 0; tt < kRouteTokens; ++tt) {
      const float sum = moe::warp_sum_f(acc[tt]);
      if (lane == 0) logits[tt * p.E + e] = sum;
    }
  }
  cluster.sync();  // every slice of every token's logits is written
  for (int e = threadIdx.x; e < p.E; e += kRouteThreads) {
    const float* remote = cluster.map_shared_rank(logits, unsigned(e / slice));
    row[e] = remote[rank * p.E + e];
  }
  cluster.sync();  // no CTA leaves while another still reads its shared memory
  if (rank < nt && warp == 0) route_select(p, row, t0 + rank, lane);
}

// Copies n floats from global memory to shared memory, kBatch loads in flight per thread before any store:
// a loop of load-then-store left one dependent round trip per element per thread (the generic shared
// pointer may alias the global one), 15 us for a decode token's 256 logits and 256 biases on the H100.
// kCg: read past L1 (rows other CTAs of the same launch wrote).
template <bool kCg>
__device__ __forceinline__ void stage_floats(float* __restrict__ dst, const float* __restrict__ src, int n) {
  constexpr int kBatch = 8;
  const int step = int(blockDim.x);
  for (int i0 = int(threadIdx.x); i0 < n; i0 += step * kBatch) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = i0 + u * step;
      v[u] = i < n ? (kCg ? __ldcg(src + i) : __ldg(src + i)) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (i0 + u * step < n) dst[i0 + u * step] = v[u];
  }
}

// The selection rereads each biased score once per round: the bias goes to shared memory first (`bias` [E]).
// A weight, so a kernel may stage it before its pdl_wait.
__device__ __forceinline__ void stage_bias(RouteParams& p, float* bias) {
  if (!p.bias) return;
  stage_floats<false>(bias, p.bias, p.E);
  p.bias = bias;
}

// Routes tokens [t0, t0 + n) from their logit rows in `logits` ([T, E], row stride E), warp w of the calling
// threads token t0 + w. The rows and the bias (unless stage_bias ran: p.bias then points at shared memory
// already) are copied to shared memory first (`rows` [n, E], `bias` [E]): the selection rereads every score
// once per chosen expert (from global memory this took 15 us). The rows are read past L1 (__ldcg): in the
// GEMV's tail other CTAs wrote them.
__device__ void select_tokens(RouteParams p, const float* logits, int t0, int n, float* rows, float* bias) {
  if (p.bias != bias) stage_bias(p, bias);
  stage_floats<true>(rows, logits + int64_t(t0) * p.E, n * p.E);
  __syncthreads();
  const int w = int(threadIdx.x >> 5);
  if (w < n) route_select(p, rows + w * p.E, t0 + w, int(threadIdx.x & 31));
}

// Unfused decode selection (decode_fusion off): one warp per token (blockIdx.x) after the logits GEMV.
__global__ void __launch_bounds__(32) moe_select_kernel(RouteParams p, const float* logits) {
  __shared__ float row[moe::kMaxExperts], bias[moe::kMaxExperts];
  stage_bias(p, bias);  // while the logits GEMV finishes
  pdl_prologue();
  select_tokens(p, logits, int(blockIdx.x), 1, row, bias);
}

// The decode selection of Kimi Linear's router shape (E <= 256, top_k <= 8, sigmoid scores, no group limit):
// a CTA of 256 threads a token, one expert a thread, instead of moe_select_kernel's one warp (on the H100 it
// took 10.9 us a token: 21k cycles at 11 cycles an instruction, every dependent step paying its latency with
// no other warp to hide it). Each warp sorts its 32 keys (score + bias, id) by `better` with a bitonic
// network of shuffles; the eight warps' best eight go to shared memory and warp 0 merges them in three rounds
// (the best eight of two sorted lists: the elementwise better of one and the other reversed, a bitonic eight,
// then sorted by a bitonic merge). `better` orders the keys totally (NaN scores and ids past E become (-inf,
// INT_MAX), as in select_top_k), so the choices, their order and their weights (the unbiased scores of the
// chosen experts, summed in choice order) are select_top_k's. The networks' lane arithmetic is
// moe/select_network.h's (tested on the host).
using moe::kSelectWideCandidates;
using moe::kSelectWideThreads;
using moe::kSelectWideTopK;

// One compare-exchange of a bitonic network across lanes at distance j: keep the better of the pair, or the
// other one.
__device__ __forceinline__ void bitonic_exchange(float& v, int& i, int j, bool keep_better) {
  const float pv = __shfl_xor_sync(kFull, v, j);
  const int pi = __shfl_xor_sync(kFull, i, j);
  if (keep_better ? better(pv, pi, v, i) : better(v, i, pv, pi)) v = pv, i = pi;
}

// Sorts a bitonic sequence of eight in each group of eight lanes, best first.
__device__ __forceinline__ void bitonic_merge8(float& v, int& i, int lane) {
#pragma unroll
  for (int j = 4; j > 0; j >>= 1) bitonic_exchange(v, i, j, moe::merge8_keeps_better(lane, j));
}

bool select_wide_fits(const RouteParams& p) {
  const bool grouped = p.n_groups > 1 && p.topk_group < p.n_groups;
  return p.E <= kSelectWideThreads && p.top_k >= 1 && p.top_k <= kSelectWideTopK && !p.softmax && !grouped;
}

__global__ void __launch_bounds__(kSelectWideThreads)
    moe_select_wide_kernel(RouteParams p, const float* logits) {
  __shared__ float score[kSelectWideThreads];  // the unbiased scores (the chosen experts' weights)
  __shared__ float cand_v[kSelectWideCandidates];
  __shared__ int cand_i[kSelectWideCandidates];
  const int e = int(threadIdx.x), lane = e & 31, warp = e >> 5, t = int(blockIdx.x);
  const float bias = p.bias && e < p.E ? __ldg(p.bias + e) : 0.0f;  // a weight: read before the wait
  pdl_prologue();
  float s = NAN;
  if (e < p.E) s = 1.0f / (1.0f + expf(-__ldcg(logits + int64_t(t) * p.E + e)));  // route_select's sigmoid
  score[e] = s;
  const float x = s + bias;  // route_select's biased score (+ 0.0f without a bias, as there)
  const bool ok = e < p.E && !isnan(x);
  float v = ok ? x : -INFINITY;
  int id = ok ? e : INT_MAX;
#pragma unroll
  for (int k = 2; k <= 32; k <<= 1)  // the warp's 32 keys sorted, best at lane 0
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) bitonic_exchange(v, id, j, moe::sort32_keeps_better(lane, k, j));
  if (lane < kSelectWideTopK) {
    cand_v[warp * kSelectWideTopK + lane] = v;
    cand_i[warp * kSelectWideTopK + lane] = id;
  }
  __syncthreads();
  if (warp != 0) return;
  // Lane l: element l % 8 of list l / 8 (warp l / 8's best eight) against its first partner in list l / 8
  // + 4.
  v = cand_v[lane];
  id = cand_i[lane];
  {
    const int o = moe::select_first_partner(lane);
    if (better(cand_v[o], cand_i[o], v, id)) v = cand_v[o], id = cand_i[o];
  }
  bitonic_merge8(v, id, lane);
  // The lists of lane groups g = lane / 8 and g ^ m (m = 1, then 2): both end with the best eight of the two.
#pragma unroll
  for (int m = 1; m <= 2; m <<= 1) {
    const int src = moe::select_merge_partner(lane, m);
    const float ov = __shfl_sync(kFull, v, src);
    const int oi = __shfl_sync(kFull, id, src);
    if (better(ov, oi, v, id)) v = ov, id = oi;
    bitonic_merge8(v, id, lane);
  }
  // Lane j < top_k holds the j-th choice (only NaN keys left: expert 0, as select_top_k).
  const int chosen = id >= p.E ? 0 : id;
  const float my_w = lane < p.top_k ? score[chosen] : 0.0f;
  float wsum = 0.0f;  // in choice order, as the reference adds them
  for (int j = 0; j < p.top_k; ++j) wsum += __shfl_sync(kFull, my_w, j);
  if (lane < p.top_k) {
    float w = my_w;
    if (p.renormalize && p.top_k > 1) w /= (wsum + 1e-20f);
    p.ids[int64_t(t) * p.ld_ids + lane] = local_id(p, chosen);
    p.weights[int64_t(t) * p.ld_weights + lane] = w * p.scaling;
  }
}

// Prefill selection after the logits GEMM: CTA b routes tokens [b kSelectTokens, ...) of the chunk, a warp
// each; dynamic shared memory holds their rows and the bias ((kSelectTokens + 1) E floats).
__global__ void __launch_bounds__(32 * moe::kSelectTokens) moe_select_rows_kernel(RouteParams p, const float* logits) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* rows = reinterpret_cast<float*>(smem_raw);
  const int t0 = int(blockIdx.x) * moe::kSelectTokens;
  select_tokens(p, logits, t0, min(moe::kSelectTokens, p.T - t0), rows, rows + moe::kSelectTokens * p.E);
}

// The decode selection as the logits GEMV's tail (gemm/gemv.cuh): its last CTA routes every token, one warp
// each (T <= kGemvMaxRows <= 8 warps), from the logits all CTAs wrote; the rows and the bias in the tail's
// shared memory ([T, E] and [E] floats, smem_bytes).
struct RouteTail {
  static constexpr bool kActive = true;
  RouteParams p;
  const float* logits;  // [T, E]
  static size_t smem_bytes(int64_t T, int64_t E) { return size_t(T + 1) * size_t(E) * sizeof(float); }
  __device__ void operator()(int T, unsigned char* smem) const {
    float* rows = reinterpret_cast<float*>(smem);
    select_tokens(p, logits, 0, T, rows, rows + T * p.E);
  }
};

// The decode router's logits GEMV into the backend's logits buffer ([T, E] F32, the router a bf16 weight).
struct LogitsGemm {
  backend::LinearWeight gate;
  backend::GemmArgs args;
  LogitsGemm(const backend::MoeRouteArgs& a, const CudaContext& cx) {
    gate.weight = a.gate_weight;
    args = {a.x, &gate,
            TensorView::make(cx.route_logits, DType::F32, {a.x.size(0), a.gate_weight.size(0)}, Device::Cuda)};
  }
  LogitsGemm(const LogitsGemm&) = delete;  // args points at gate
  // Decode-sized: the split GEMV computes the logits (then the selection runs in its tail or a second kernel).
  bool small(const CudaContext& cx) const {
    return args.x.size(0) <= kGemvMaxRows && cx.route_logits != nullptr && gemv_eligible(args);
  }
};

}  // namespace

bool moe_route_fuses_norm(const backend::MoeRouteArgs& a, const CudaContext& cx) {
  const int64_t T = a.x.size(0), E = a.gate_weight.size(0);
  return a.norm != nullptr && cx.options.decode_fusion && a.x.dtype == DType::BF16 &&
         a.gate_weight.dtype == DType::BF16 && E <= moe::kMaxExperts && LogitsGemm(a, cx).small(cx) &&
         gemv_norm_fusable(*a.norm, RouteTail::smem_bytes(T, E));
}

Status launch_moe_route(const backend::MoeRouteArgs& a, const CudaContext& cx) {
  const int64_t T = a.x.size(0), H = a.x.size(1), E = a.gate_weight.size(0);
  if (a.x.dtype != DType::BF16)
    return invalid_argument("moe_route: CUDA activations must be BF16, got {}", a.x.describe());
  if (a.gate_weight.dtype != DType::BF16)
    return invalid_argument("moe_route: CUDA router weight must be BF16, got {}", a.gate_weight.describe());
  if (E > moe::kMaxExperts)
    return invalid_argument("moe_route: {} experts (the CUDA router takes up to {})", E, moe::kMaxExperts);
  const bool grouped = a.n_groups > 1 && a.topk_group < a.n_groups;
  if (grouped && (a.n_groups > moe::kRouteMaxGroups || E / a.n_groups < 2))
    return invalid_argument(
        "moe_route: {} groups of {} experts (the CUDA router takes up to {} groups of >= 2)", a.n_groups,
        E / a.n_groups, moe::kRouteMaxGroups);
  if (T == 0) return {};
  // Decode: split GEMV into the backend's logits buffer, then one selecting warp per token.
  const LogitsGemm logits(a, cx);
  const bool small = logits.small(cx);
  if (a.norm && !moe_route_fuses_norm(a, cx))
    return internal_error("moe_route: this input norm cannot fold into the router's GEMV");
  RouteParams p;
  p.x = static_cast<const bf16*>(a.x.data);
  p.ldx = a.x.stride(0);
  p.w = static_cast<const bf16*>(a.gate_weight.data);
  p.ldw = a.gate_weight.stride(0);
  p.bias = a.bias.empty() ? nullptr : a.bias.ptr<const float>();
  p.T = int(T);
  p.H = int(H);
  p.E = int(E);
  p.top_k = a.top_k;
  p.n_groups = a.n_groups;
  p.topk_group = a.topk_group;
  p.renormalize = a.renormalize;
  p.softmax = a.softmax;
  p.scaling = a.scaling;
  p.ids = a.ids.ptr<int32_t>();
  p.ld_ids = a.ids.stride(0);
  p.weights = a.weights.ptr<float>();
  p.ld_weights = a.weights.stride(0);
  p.expert_begin = a.expert_begin;
  p.n_local = a.n_local;
  if (small && cx.options.decode_fusion) {
    gemv::GemvPlan plan = gemv::plan_gemv_group(backend::GemmGroupArgs{{logits.args}}, cx.sm_count);
    plan.g.counter = cx.gemv_counter;
    const size_t norm_smem = a.norm ? gemv::attach_norm(plan, *a.norm, cx.gemv_counter) : 0;
    plan.g.tail_smem = int(norm_smem);
    return gemv::launch_gemv_plan<gemv::Bf16Weights>("moe_route_gemv", plan, RouteTail{p, cx.route_logits},
                                                     norm_smem + RouteTail::smem_bytes(T, E), cx.stream);
  }
  if (small) {
    RILL_TRY(launch_gemv(logits.args, cx.sm_count, cx.stream));
    if (select_wide_fits(p))
      return launch("moe_select_wide", {dim3(unsigned(T)), dim3(kSelectWideThreads)}, cx.stream,
                    moe_select_wide_kernel, p, static_cast<const float*>(cx.route_logits));
    return launch("moe_select", {dim3(unsigned(T)), dim3(32)}, cx.stream, moe_select_kernel, p,
                  static_cast<const float*>(cx.route_logits));
  }
  if (T >= cx.options.moe_route_gemm_min_tokens && cx.route_logits != nullptr) {
    // Chunks of whole logit rows in the backend's buffer; each chunk's selection reads them before the next
    // chunk's GEMM overwrites them (stream order).
    const int64_t chunk = moe::kRouteLogitsFloats / E;
    const size_t select_smem = size_t(moe::kSelectTokens + 1) * size_t(E) * sizeof(float);
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
      const int64_t n = std::min(chunk, T - t0);
      backend::GemmArgs g = logits.args;
      g.x = a.x.rows(t0, n);
      g.out = TensorView::make(cx.route_logits, DType::F32, {n, E}, Device::Cuda);
      RILL_TRY(cx.gemm->run(g, cx.stream));
      RouteParams pc = p;
      pc.x = nullptr;  // the selection reads the logits only
      pc.T = int(n);
      pc.ids += t0 * p.ld_ids;
      pc.weights += t0 * p.ld_weights;
      RILL_TRY(launch("moe_select_rows",
                      {dim3(unsigned((n + moe::kSelectTokens - 1) / moe::kSelectTokens)),
                       dim3(32 * moe::kSelectTokens), select_smem},
                      cx.stream, moe_select_rows_kernel, pc, static_cast<const float*>(cx.route_logits)));
    }
    return {};
  }
  const size_t smem =
      (size_t(kRouteTokens) * size_t(H) * 2 + 15) / 16 * 16 + size_t(kRouteTokens + 1) * size_t(E) * 4;
  if (smem > cx.max_smem_per_block)
    return invalid_argument("moe_route: hidden {} x {} experts needs {} bytes of shared memory (device: {})",
                            H, E, smem, cx.max_smem_per_block);
  const bool vec = H % 8 == 0 && p.ldx % 8 == 0 && p.ldw % 8 == 0 && aligned16(p.x) && aligned16(p.w);
  const dim3 grid(kRouteTokens, unsigned((T + kRouteTokens - 1) / kRouteTokens));
  // Above 48 KB (K3's 7168 x 896 router, not Kimi Linear's) the kernel must opt in to more shared memory.
  if (vec) {
    RILL_TRY(opt_in_smem("moe_route", reinterpret_cast<const void*>(moe_route_kernel<8>), smem, cx, nullptr));
    moe_route_kernel<8><<<grid, kRouteThreads, smem, cx.stream>>>(p);
  } else {
    RILL_TRY(opt_in_smem("moe_route", reinterpret_cast<const void*>(moe_route_kernel<1>), smem, cx, nullptr));
    moe_route_kernel<1><<<grid, kRouteThreads, smem, cx.stream>>>(p);
  }
  RILL_CUDA_CHECK_LAUNCH("moe_route");
  return {};
}

}  // namespace rill::cuda
