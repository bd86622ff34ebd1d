// Chunk plan: one CTA scans the device layout and lists the chunked sequences (n_new > recurrent_max) with
// the first chunk id of each, then (sequence, chunk) for every chunk id, so the intra and recurrence kernels
// find their work with one load and no host->device copy. Chunk ids are dense, in sequence order.
#include "backend/cuda/common/check.h"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/phases.h"

namespace rill::cuda::kda {
namespace {

__global__ void __launch_bounds__(kPlanThreads)
    kda_chunk_plan_kernel(const int32_t* seq_token_start, int n_seqs, int recurrent_max, ChunkPlan plan) {
  static_assert(kPlanThreads == 1024, "one warp total per warp of the block");
  __shared__ int warp_pf[32], warp_ch[32];
  __shared__ int base_pf, base_ch;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  if (tid == 0) base_pf = base_ch = 0;
  __syncthreads();
  for (int s0 = 0; s0 < n_seqs; s0 += kPlanThreads) {
    const int s = s0 + tid;
    const int n = s < n_seqs ? seq_token_start[s + 1] - seq_token_start[s] : 0;
    const int pf = n > recurrent_max ? 1 : 0, nch = pf ? (n + kChunk - 1) / kChunk : 0;
    int ipf = pf, ich = nch;  // inclusive warp scans
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int a = __shfl_up_sync(0xffffffffu, ipf, o), b = __shfl_up_sync(0xffffffffu, ich, o);
      if (lane >= o) ipf += a, ich += b;
    }
    if (lane == 31) warp_pf[warp] = ipf, warp_ch[warp] = ich;
    __syncthreads();
    if (warp == 0) {  // exclusive scan of the 32 warp totals
      const int tp = warp_pf[lane], tc = warp_ch[lane];
      int xp = tp, xc = tc;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int a = __shfl_up_sync(0xffffffffu, xp, o), b = __shfl_up_sync(0xffffffffu, xc, o);
        if (lane >= o) xp += a, xc += b;
      }
      warp_pf[lane] = xp - tp;
      warp_ch[lane] = xc - tc;
    }
    __syncthreads();
    const int k = base_pf + warp_pf[warp] + ipf - pf, first = base_ch + warp_ch[warp] + ich - nch;
    if (pf) {
      plan.pf_seq[k] = s;
      plan.pf_chunk_first[k] = first;
    }
    __syncthreads();  // everyone has read the bases
    if (tid == kPlanThreads - 1) base_pf = k + pf, base_ch = first + nch;
    __syncthreads();
  }
  const int n_pf = base_pf, n_ch = base_ch;
  if (tid == 0) {
    plan.counts[0] = n_pf;
    plan.counts[1] = n_ch;
    plan.pf_chunk_first[n_pf] = n_ch;
  }
  __syncthreads();  // the lists above are visible to the whole block
  for (int id = tid; id < n_ch; id += kPlanThreads) {
    int lo = 0, hi = n_pf - 1;  // last k with pf_chunk_first[k] <= id
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (plan.pf_chunk_first[mid] <= id)
        lo = mid;
      else
        hi = mid - 1;
    }
    plan.chunk_info[id] = make_int2(plan.pf_seq[lo], id - plan.pf_chunk_first[lo]);
  }
}

}  // namespace

Status launch_chunk_plan(const ChunkParams& p, cudaStream_t stream) {
  kda_chunk_plan_kernel<<<1, kPlanThreads, 0, stream>>>(p.io.seq_token_start, p.io.n_seqs, p.io.recurrent_max,
                                                        p.plan);
  RILL_CUDA_CHECK_LAUNCH("kda_chunk_plan");
  return {};
}

}  // namespace rill::cuda::kda
