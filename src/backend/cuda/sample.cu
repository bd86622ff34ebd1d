// Per-row sampling on the GPU with exactly the rule of backend/sampling.cc: greedy (lowest id on ties) when
// temperature <= 0 or top_k == 1; otherwise p = softmax(logits / T) over the top_k (all when 0), the smallest
// prefix of the probability-sorted order reaching top_p, min_p * p_max, renormalise, inverse CDF with
// u = uniform01(seed, counter). Only ids leave the device; no host sync.
//
// Rows are processed in chunks of kChunkRows (the scratch holds one chunk), three launches per chunk:
//  1. prepare (one 512-thread CTA per row): argmax, written for every row (the greedy answer, and the
//     fallback for degenerate rows). Sampling rows then compute, in fp64, e_i = exp((l_i - max) / T),
//     Z = sum e_i, and for a ladder of thresholds t >= -g (g in nats) the count and mass of the tokens above
//     each threshold. The smallest threshold whose token set S (always a prefix of the sorted order:
//     membership is monotone in the logit) provably contains everything the rule looks at is chosen (the
//     sufficiency test in the kernel; the whole row when no threshold passes), and S is compacted, in id
//     order, into the row's segment.
//  2. cub::DeviceSegmentedRadixSort sorts each segment by logit, descending. It is stable, and S is in id
//     order, so ties come out lowest id first: the CPU's order.
//  3. finish (one warp per row) runs the CPU rule over the sorted S: fp64 probabilities, warp prefix sums.
// A step whose rows are all greedy (known on the host, SampleArgs::all_greedy) skips all of that: a split
// argmax (kArgmaxBlocks blocks per row, then one warp per row merges their winners) replaces the one-CTA
// prepare, which streamed a 163,840-wide row through a single SM (18 us at batch 1).
// The only differences from the CPU are the order of fp64 additions (Z over the whole row when top_k is off,
// the prefix sums): a decision can flip only when top_p, min_p or u lands within ~1e-15 (relative) of a
// cumulative sum, which is vanishingly rare. Typical settings give S of tens to thousands of tokens; a
// flat distribution with top_p = 1 may sort most of the row (slow but exact).
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/sample.h"
#include "core/rng.h"

namespace rill::cuda {
namespace {

using backend::SamplingRow;

constexpr int kPrepThreads = 512, kPrepWarps = kPrepThreads / 32;
constexpr int kChunkRows = 32;          // rows per chunk (the scratch holds one chunk)
constexpr int kFinishRowsPerBlock = 4;  // one warp per row
constexpr int kLadder = 12;
constexpr unsigned kFull = 0xffffffffu;

// Threshold ladder in nats below the maximum (t = (l - max) / T >= -g).
__constant__ float c_gaps[kLadder] = {0.5f, 1.0f,  2.0f,  3.0f,  4.0f,  6.0f,
                                      8.0f, 12.0f, 16.0f, 24.0f, 32.0f, 48.0f};

__device__ __forceinline__ bool greedy(const SamplingRow& r) {
  return r.temperature <= 0.0f || r.top_k == 1;
}

// (value, index) order of the CPU's argmax scan: larger value, then lower index.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ __forceinline__ double warp_inclusive_scan(double v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

constexpr int kArgmaxBlocks = 32, kArgmaxThreads = 256;

// Block b of row blockIdx.y finds the best (value, lowest index) of its slice of the row.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_partial_kernel(const float* logits, int64_t ld, int V, float* part_v, int32_t* part_i) {
  pdl_prologue();
  __shared__ float s_val[kArgmaxThreads / 32];
  __shared__ int s_idx[kArgmaxThreads / 32];
  const int row = blockIdx.y, b = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int span = (V + kArgmaxBlocks - 1) / kArgmaxBlocks, end = min(V, (b + 1) * span);
  const float* l = logits + int64_t(row) * ld;
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = b * span + tid; i < end; i += kArgmaxThreads) {
    const float v = l[i];
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, bv, o);
    const int oi = __shfl_xor_sync(kFull, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  if (lane == 0) s_val[warp] = bv, s_idx[warp] = bi;
  __syncthreads();
  if (tid != 0) return;
  for (int w = 1; w < kArgmaxThreads / 32; ++w)
    if (better(s_val[w], s_idx[w], bv, bi)) bv = s_val[w], bi = s_idx[w];
  part_v[row * kArgmaxBlocks + b] = bv;
  part_i[row * kArgmaxBlocks + b] = bi;
}

// One warp per row merges the kArgmaxBlocks winners (the same order rule, so the lowest index wins ties).
__global__ void __launch_bounds__(32)
    argmax_final_kernel(const float* part_v, const int32_t* part_i, int row0, int32_t* out_ids) {
  pdl_prologue();
  const int row = blockIdx.x, lane = threadIdx.x;
  float bv = lane < kArgmaxBlocks ? part_v[row * kArgmaxBlocks + lane] : -INFINITY;
  int bi = lane < kArgmaxBlocks ? part_i[row * kArgmaxBlocks + lane] : INT_MAX;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, bv, o);
    const int oi = __shfl_xor_sync(kFull, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  if (lane == 0) out_ids[row0 + row] = bi;
}

struct PrepParams {
  const float* logits;  // [R, V] row stride ld
  int64_t ld;
  int V, R, row0;
  const SamplingRow* rows;  // [R]
  int32_t* out_ids;         // [R]
  float* keys;              // [kChunkRows * V]: row `local`'s segment starts at local * V
  int32_t* vals;            // [kChunkRows * V]
  int32_t* seg_begin;       // [kChunkRows]
  int32_t* seg_end;         // [kChunkRows]
  double* zall;             // [kChunkRows]: sum of e over the whole row
};

__global__ void __launch_bounds__(kPrepThreads) sample_prepare_kernel(const PrepParams p) {
  __shared__ float s_val[kPrepWarps];
  __shared__ int s_idx[kPrepWarps];
  __shared__ int s_cnt[kPrepWarps][kLadder];
  __shared__ float s_mass[kPrepWarps][kLadder];
  __shared__ double s_z[kPrepWarps];
  __shared__ int s_off[kPrepWarps];
  __shared__ int s_jstar;
  const int local = blockIdx.x, row = p.row0 + local, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int base = local * p.V;
  if (row >= p.R) {
    if (tid == 0) p.seg_begin[local] = p.seg_end[local] = base;
    return;
  }
  const SamplingRow sr = p.rows[row];
  const float* l = p.logits + int64_t(row) * p.ld;

  // Pass 1: argmax with the lowest index among equal maxima.
  float bv = -INFINITY;
  int bi = INT_MAX;
  for (int i = tid; i < p.V; i += kPrepThreads) {
    const float v = l[i];
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, bv, o);
    const int oi = __shfl_xor_sync(kFull, bi, o);
    if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
  if (lane == 0) s_val[warp] = bv, s_idx[warp] = bi;
  __syncthreads();
  bv = s_val[0];
  bi = s_idx[0];
  for (int w = 1; w < kPrepWarps; ++w)
    if (better(s_val[w], s_idx[w], bv, bi)) bv = s_val[w], bi = s_idx[w];
  const float mx = bv;
  if (tid == 0) p.out_ids[row] = bi;  // the greedy answer; sampling rows overwrite it in finish
  if (greedy(sr)) {
    if (tid == 0) p.seg_begin[local] = p.seg_end[local] = base;
    return;
  }

  // Pass 2: Z and the ladder statistics. Each warp owns a contiguous range so pass 3 can compact in id order.
  const double T = double(sr.temperature);
  const int chunk = ((p.V + kPrepWarps - 1) / kPrepWarps + 31) / 32 * 32;
  const int w_begin = min(p.V, warp * chunk), w_end = min(p.V, w_begin + chunk);
  int cnt[kLadder];
  float mass[kLadder];
#pragma unroll
  for (int j = 0; j < kLadder; ++j) cnt[j] = 0, mass[j] = 0.0f;
  double z = 0.0;
  for (int i = w_begin + lane; i < w_end; i += 32) {
    const double t = double(l[i] - mx) / T;
    const double e = t > -60.0 ? exp(t) : 0.0;  // below e^-60 the whole row's tail is under fp64 resolution
    z += e;
#pragma unroll
    for (int j = 0; j < kLadder; ++j)
      if (t >= -double(c_gaps[j])) ++cnt[j], mass[j] += float(e);
  }
#pragma unroll
  for (int j = 0; j < kLadder; ++j) {
    const int c = __reduce_add_sync(kFull, cnt[j]);
    const float m = warp_sum_f(mass[j]);
    if (lane == 0) s_cnt[warp][j] = c, s_mass[warp][j] = m;
  }
  z = warp_sum_d(z);
  if (lane == 0) s_z[warp] = z;
  __syncthreads();
  if (tid == 0) {
    double Z = 0.0;
    for (int w = 0; w < kPrepWarps; ++w) Z += s_z[w];
    const int k_eff = sr.top_k > 0 ? min(sr.top_k, p.V) : p.V;
    const bool topk_active = k_eff < p.V;
    const double u = double(uniform01(sr.seed, sr.counter));
    // S is sufficient when it holds the whole top-k set (then Z is exact over S), or, with top-k off, when
    // the top-p crossing lies in S, or every token outside S fails min-p, or (top-p and min-p off) the
    // inverse-CDF target lies in S. The 1e-3 margins cover the fp32 ladder masses.
    int js = kLadder;
    for (int j = 0; j < kLadder && js == kLadder; ++j) {
      int n = 0;
      double m = 0.0;
      for (int w = 0; w < kPrepWarps; ++w) n += s_cnt[w][j], m += s_mass[w][j];
      bool ok = n >= k_eff;
      if (!topk_active) {
        ok = ok || (sr.top_p < 1.0f && m >= double(sr.top_p) * Z * (1.0 + 1e-3));
        ok = ok || (sr.min_p > 0.0f && exp(-double(c_gaps[j])) < double(sr.min_p) * (1.0 - 1e-3));
        ok = ok || (!(sr.top_p < 1.0f) && !(sr.min_p > 0.0f) && m >= u * Z * (1.0 + 1e-3));
      }
      if (ok) js = j;
    }
    int off = 0;
    for (int w = 0; w < kPrepWarps; ++w) {
      s_off[w] = off;
      const int wb = min(p.V, w * chunk), we = min(p.V, wb + chunk);
      off += js < kLadder ? s_cnt[w][js] : we - wb;
    }
    s_jstar = js;
    p.seg_begin[local] = base;
    p.seg_end[local] = base + off;
    p.zall[local] = Z;
  }
  __syncthreads();

  // Pass 3: compact S in id order (the same predicate as pass 2, evaluated identically).
  const int js = s_jstar;
  const double thr = js < kLadder ? -double(c_gaps[js]) : 0.0;
  int pos = base + s_off[warp];
  for (int i0 = w_begin; i0 < w_end; i0 += 32) {
    const int i = i0 + lane;
    bool in = false;
    float v = 0.0f;
    if (i < w_end) {
      v = l[i];
      in = js == kLadder || double(v - mx) / T >= thr;
    }
    const unsigned m = __ballot_sync(kFull, in);
    if (in) {
      const int o = pos + __popc(m & ((1u << lane) - 1u));
      p.keys[o] = v;
      p.vals[o] = i;
    }
    pos += __popc(m);
  }
}

struct FinishParams {
  const float* keys;  // sorted segments (descending logit, ties by id)
  const int32_t* ids;
  const int32_t* seg_begin;
  const int32_t* seg_end;
  const double* zall;
  const SamplingRow* rows;
  int32_t* out_ids;
  int V, R, row0, n_local;
};

// Probabilities of the sorted candidates, as the CPU computes them.
struct Probs {
  const float* key;
  float mx;
  double T, Z;
  __device__ double operator()(int i) const { return exp(double(key[i] - mx) / T) / Z; }
};

// First i < lim whose inclusive prefix sum of probabilities satisfies pred, or -1.
template <typename Pred>
__device__ int first_cumulative(const Probs& prob, int lim, int lane, Pred pred) {
  double carry = 0.0;
  for (int i0 = 0; i0 < lim; i0 += 32) {
    const int i = i0 + lane;
    const double c = carry + warp_inclusive_scan(i < lim ? prob(i) : 0.0, lane);
    const unsigned m = __ballot_sync(kFull, i < lim && pred(c));
    if (m) return i0 + __ffs(int(m)) - 1;
    carry = __shfl_sync(kFull, c, 31);
  }
  return -1;
}

__global__ void sample_finish_kernel(const FinishParams p) {
  const int lane = threadIdx.x & 31;
  const int local = blockIdx.x * kFinishRowsPerBlock + int(threadIdx.x / 32), row = p.row0 + local;
  if (local >= p.n_local || row >= p.R) return;  // whole warps only
  const SamplingRow sr = p.rows[row];
  if (greedy(sr)) return;
  const int begin = p.seg_begin[local], n = p.seg_end[local] - begin;
  if (n <= 0) return;  // degenerate row (NaN maximum): keep prepare's argmax
  const float* key = p.keys + begin;
  const int32_t* id = p.ids + begin;
  Probs prob{key, key[0], double(sr.temperature), 1.0};
  const int k_eff = sr.top_k > 0 ? min(sr.top_k, p.V) : p.V;
  const int lim = min(k_eff, n);
  if (n >= k_eff) {  // S holds the top-k set: normalise over it, as the CPU does
    double s = 0.0;
    for (int i = lane; i < k_eff; i += 32) s += prob(i);
    prob.Z = warp_sum_d(s);
  } else {
    prob.Z = p.zall[local];
  }
  int keep = lim;
  bool known = k_eff <= n;  // false only for top-k off, top-p off, no min-p cut inside S: keep = V
  if (sr.top_p < 1.0f) {
    const double top_p = double(sr.top_p);
    const int f = first_cumulative(prob, lim, lane, [&](double c) { return c >= top_p; });
    keep = f >= 0 ? f + 1 : lim;
    known = true;
  }
  if (sr.min_p > 0.0f) {
    const double cut = double(sr.min_p) * prob(0);
    int f = keep;  // first i in [1, keep) with !(p_i >= cut); tokens beyond S all fail (prepare's choice)
    for (int i0 = 0; i0 < keep; i0 += 32) {
      const int i = i0 + lane;
      const unsigned m = __ballot_sync(kFull, i >= 1 && i < keep && !(prob(i) >= cut));
      if (m) {
        f = i0 + __ffs(int(m)) - 1;
        break;
      }
    }
    keep = f;
    known = true;
  }
  double mass = 1.0;  // keep = V: the probabilities of the whole row sum to 1
  if (known) {
    double s = 0.0;
    for (int i = lane; i < keep; i += 32) s += prob(i);
    mass = warp_sum_d(s);
  }
  const double u = double(uniform01(sr.seed, sr.counter)) * mass;
  const int lim3 = known ? keep : n;
  int pick = first_cumulative(prob, lim3, lane, [&](double c) { return u < c; });
  if (pick < 0) pick = lim3 - 1;
  if (lane == 0) p.out_ids[row] = id[pick];
}

size_t cub_temp_bytes(int chunk_rows, int V, cudaError_t* err) {
  size_t bytes = 0;
  cub::DoubleBuffer<float> keys(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> ids(nullptr, nullptr);
  *err = cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, keys, ids, chunk_rows * V, chunk_rows, static_cast<const int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), 0, 32, cudaStream_t(nullptr));
  return bytes;
}

// Scratch of one chunk: two key and two id buffers (CUB's double buffers: the sort ping-pongs between them
// and the host knows where the result lands), segment bounds, Z, CUB's (tiny) temporary storage.
struct ScratchPlan {
  int chunk_rows = 0;
  size_t kv = 0, small = 0, z = 0, temp = 0, total = 0;
};

ScratchPlan plan_scratch(int64_t R, int64_t V, cudaError_t* err) {
  ScratchPlan s;
  *err = cudaSuccess;
  if (R <= 0 || V <= 0) return s;
  s.chunk_rows = int(std::min<int64_t>(R, kChunkRows));
  s.kv = align256(size_t(s.chunk_rows) * size_t(V) * 4);
  s.small = align256(size_t(s.chunk_rows) * 4);
  s.z = align256(size_t(s.chunk_rows) * 8);
  s.temp = align256(cub_temp_bytes(s.chunk_rows, int(V), err));
  s.total = 4 * s.kv + 2 * s.small + s.z + s.temp;
  return s;
}

}  // namespace

size_t sample_scratch_bytes(const backend::SampleArgs& a) {
  cudaError_t err = cudaSuccess;
  return plan_scratch(a.logits.size(0), a.logits.size(1), &err).total;
}

Status launch_sample(const backend::SampleArgs& a, const CudaContext& cx) {
  const int64_t R = a.logits.size(0), V = a.logits.size(1);
  if (R == 0) return {};
  if (V <= 0 || V * kChunkRows > INT_MAX)
    return invalid_argument("sample: vocabulary of {} tokens not supported", V);
  cudaError_t err = cudaSuccess;
  const ScratchPlan s = plan_scratch(R, V, &err);
  RILL_CUDA_CHECK(err);
  if (!a.scratch) return internal_error("sample: needs {} scratch bytes but has no scratch arena", s.total);
  const size_t mark = a.scratch->used();
  char* base = static_cast<char*>(a.scratch->alloc(DType::U8, {int64_t(s.total)}).data);
  auto take = [&](size_t bytes) {
    char* q = base;
    base += bytes;
    return q;
  };
  PrepParams pp;
  pp.logits = a.logits.ptr<const float>();
  pp.ld = a.logits.stride(0);
  pp.V = int(V);
  pp.R = int(R);
  pp.rows = a.rows;
  pp.out_ids = a.out_ids.ptr<int32_t>();
  pp.keys = reinterpret_cast<float*>(take(s.kv));
  pp.vals = reinterpret_cast<int32_t*>(take(s.kv));
  float* keys_alt = reinterpret_cast<float*>(take(s.kv));
  int32_t* ids_alt = reinterpret_cast<int32_t*>(take(s.kv));
  pp.seg_begin = reinterpret_cast<int32_t*>(take(s.small));
  pp.seg_end = reinterpret_cast<int32_t*>(take(s.small));
  pp.zall = reinterpret_cast<double*>(take(s.z));
  void* temp = take(s.temp);
  size_t temp_bytes = s.temp;

  FinishParams fp;
  fp.seg_begin = pp.seg_begin;
  fp.seg_end = pp.seg_end;
  fp.zall = pp.zall;
  fp.rows = a.rows;
  fp.out_ids = pp.out_ids;
  fp.V = int(V);
  fp.R = int(R);
  fp.n_local = s.chunk_rows;
  const unsigned finish_blocks = unsigned((s.chunk_rows + kFinishRowsPerBlock - 1) / kFinishRowsPerBlock);
  // Scratch goes back to the arena at once: later work on the stream is ordered after these kernels.
  a.scratch->release_to(mark);
  if (a.all_greedy && V >= kArgmaxBlocks) {  // the partial winners of a chunk fit the keys/vals scratch
    for (int row0 = 0; row0 < R; row0 += s.chunk_rows) {
      const int rows = int(std::min<int64_t>(s.chunk_rows, R - row0));
      RILL_TRY(launch("argmax_partial", {dim3(kArgmaxBlocks, unsigned(rows)), dim3(kArgmaxThreads)},
                      cx.stream, argmax_partial_kernel,
                      static_cast<const float*>(pp.logits + int64_t(row0) * pp.ld), pp.ld, int(V), pp.keys,
                      pp.vals));
      RILL_TRY(launch("argmax_final", {dim3(unsigned(rows)), dim3(32)}, cx.stream, argmax_final_kernel,
                      static_cast<const float*>(pp.keys), static_cast<const int32_t*>(pp.vals), row0,
                      pp.out_ids));
    }
    return {};
  }
  for (int row0 = 0; row0 < R; row0 += s.chunk_rows) {
    pp.row0 = fp.row0 = row0;
    sample_prepare_kernel<<<unsigned(s.chunk_rows), kPrepThreads, 0, cx.stream>>>(pp);
    err = cudaGetLastError();
    if (a.all_greedy) {  // (a row narrower than kArgmaxBlocks) prepare wrote every argmax: nothing to sort
      if (err != cudaSuccess) return internal_error("sample: {}", cudaGetErrorString(err));
      continue;
    }
    cub::DoubleBuffer<float> keys(pp.keys, keys_alt);
    cub::DoubleBuffer<int32_t> ids(pp.vals, ids_alt);
    if (err == cudaSuccess)
      err = cub::DeviceSegmentedRadixSort::SortPairsDescending(
          temp, temp_bytes, keys, ids, s.chunk_rows * int(V), s.chunk_rows,
          static_cast<const int32_t*>(pp.seg_begin), static_cast<const int32_t*>(pp.seg_end), 0, 32,
          cx.stream);
    if (err == cudaSuccess) {
      fp.keys = keys.Current();
      fp.ids = ids.Current();
      sample_finish_kernel<<<finish_blocks, kFinishRowsPerBlock * 32, 0, cx.stream>>>(fp);
      err = cudaGetLastError();
    }
    if (err != cudaSuccess)
      return internal_error("sample: rows [{}, {}) of {} x {}: {}", row0,
                            std::min<int64_t>(R, row0 + s.chunk_rows), R, V, cudaGetErrorString(err));
  }
  return {};
}

}  // namespace rill::cuda
