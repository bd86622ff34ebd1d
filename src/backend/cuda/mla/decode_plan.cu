// Attention plan, device side: one CTA turns the device layout into the per-sequence prefix arrays every
// later phase indexes by (PlanArrays), with the split target the host plan chose. Same formula as the host
// (params.h seq_work), so the grids the host sized match the work listed here.
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

constexpr int kThreads = 256, kCounts = 5;  // dec_work, dec_tokens, dec_slots, pf_tiles, pf_rows

__global__ void __launch_bounds__(kThreads) plan_kernel(const PlanParams p) {
  pdl_prologue();
  __shared__ int sums[kCounts][kThreads];
  __shared__ int totals[kCounts];
  const int tid = threadIdx.x, n = p.n_seqs;
  const int chunk = (n + kThreads - 1) / kThreads;
  const int s0 = min(n, tid * chunk), s1 = min(n, s0 + chunk);
  int v[kCounts] = {0, 0, 0, 0, 0};
  for (int s = s0; s < s1; ++s) {
    const int n_new = p.seq_token_start[s + 1] - p.seq_token_start[s];
    const SeqWork w = seq_work(p.seq_start_pos[s], n_new, p.n_heads, p.tiles_per_split, p.fixed_splits);
    v[0] += w.dec_work;
    v[1] += w.dec_tokens;
    v[2] += w.dec_slots;
    v[3] += w.pf_tiles;
    v[4] += w.pf_rows;
  }
#pragma unroll
  for (int k = 0; k < kCounts; ++k) sums[k][tid] = v[k];
  __syncthreads();
  if (tid < kCounts) {  // exclusive scan of one count over the threads' chunks
    int run = 0;
    for (int i = 0; i < kThreads; ++i) {
      const int x = sums[tid][i];
      sums[tid][i] = run;
      run += x;
    }
    totals[tid] = run;
  }
  __syncthreads();
  if (tid == 0) {  // the totals close the prefix arrays
    p.out.dec_work_start[n] = totals[0];
    p.out.dec_tok_start[n] = totals[1];
    p.out.dec_slot_start[n] = totals[2];
    p.out.pf_tile_start[n] = totals[3];
    p.out.pf_row_start[n] = totals[4];
  }
  int off[kCounts];
#pragma unroll
  for (int k = 0; k < kCounts; ++k) off[k] = sums[k][tid];
  for (int s = s0; s < s1; ++s) {
    const int t0 = p.seq_token_start[s], n_new = p.seq_token_start[s + 1] - t0;
    const SeqWork w = seq_work(p.seq_start_pos[s], n_new, p.n_heads, p.tiles_per_split, p.fixed_splits);
    p.out.dec_work_start[s] = off[0];
    p.out.dec_tok_start[s] = off[1];
    p.out.dec_slot_start[s] = off[2];
    p.out.pf_tile_start[s] = off[3];
    p.out.pf_row_start[s] = off[4];
    p.out.dec_splits[s] = w.n_splits;
    p.out.dec_split_keys[s] = w.split_keys;
    for (int i = 0; i < w.dec_tokens; ++i) p.out.dec_tokens[off[1] + i] = t0 + i;
    off[0] += w.dec_work;
    off[1] += w.dec_tokens;
    off[2] += w.dec_slots;
    off[3] += w.pf_tiles;
    off[4] += w.pf_rows;
  }
}

}  // namespace

Status launch_plan(const PlanParams& p, cudaStream_t stream) {
  return launch("mla_plan", {dim3(1), dim3(kThreads)}, stream, plan_kernel, p);
}

}  // namespace rill::cuda::mla
