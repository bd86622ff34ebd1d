// Prefill (naive form, spec §3.4): each prefill sequence's context [0, start_pos + n_new) is gathered from
// the paged cache into contiguous rows, expanded once by one GEMM with kv_b (attention.cc) into k_nope | v
// per head, then attended by a flash kernel: one CTA per (64-query tile, head), 4 warps of 16 query rows,
// 64-key steps, q.k over 192 = [k_nope ; shared k_pe], v over 128, bf16 mma.sync with fp32 accumulation,
// online softmax in fp32 with P kept in registers; causal by absolute position (query i sits at start_pos +
// i).
#include <cfloat>

#include "backend/cuda/common/check.h"
#include "backend/cuda/mla/device.cuh"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

constexpr int kGatherWarps = 8;

// One warp per context row: 72 16-byte chunks from its cache block (zeros for a missing block).
__global__ void __launch_bounds__(kGatherWarps * 32) gather_kernel(const GatherParams p) {
  const int lane = threadIdx.x & 31;
  const int row = p.row_begin + int(blockIdx.x) * kGatherWarps + (threadIdx.x >> 5);
  if (row >= p.row_end) return;
  const int s = find_seq(p.pf_row_start, p.n_seqs, row);
  const int pos = row - p.pf_row_start[s];
  const int bi = pos / p.block_size;
  const int block = bi < p.max_blocks_per_seq ? p.block_tables[int64_t(s) * p.max_blocks_per_seq + bi] : -1;
  uint4* dst = reinterpret_cast<uint4*>(p.ctx + int64_t(row - p.row_begin) * kLatK);
  if (block < 0 || block >= p.n_blocks) {
    for (int c = lane; c < kLatK / 8; c += 32) dst[c] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(p.cache + int64_t(block) * p.cache_block +
                                                    int64_t(pos % p.block_size) * p.cache_row);
  for (int c = lane; c < kLatK / 8; c += 32) dst[c] = src[c];
}

__global__ void __launch_bounds__(kPfThreads, 2) prefill_kernel(const PrefillParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sq = reinterpret_cast<bf16*>(smem);  // [kPfQ][kPfLdK]
  bf16* sk = sq + kPfQ * kPfLdK;             // [2][kPfK][kPfLdK]  k_nope | k_pe
  bf16* sv = sk + 2 * kPfK * kPfLdK;         // [2][kPfK][kPfLdV]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const int w = p.tile_end - 1 - int(blockIdx.x);  // later (longer) tiles first
  const int h = blockIdx.y, H = p.n_heads;
  const int s = find_seq(p.pf_tile_start, p.n_seqs, w);
  const int q_first = (w - p.pf_tile_start[s]) * kPfQ;
  const int t0 = p.seq_token_start[s] + q_first, start = p.seq_start_pos[s];
  const int n_q = min(kPfQ, p.seq_token_start[s + 1] - t0);
  const int q_pos0 = start + q_first;  // absolute position of query row 0
  const int kv_end = q_pos0 + n_q;     // keys [0, kv_end) are visible to some row of the tile
  const int n_kv = (kv_end + kPfK - 1) / kPfK;
  const int64_t kv_row0 = p.pf_row_start[s] - p.row_begin;
  const int64_t kvx_ld = int64_t(H) * kKvbRows;

  // Q tile: 64 rows x 24 chunks (12 per thread); rows past n_q are zero.
#pragma unroll
  for (int i = 0; i < (kPfQ * kQk / 8) / kPfThreads; ++i) {
    const int c = tid + i * kPfThreads, row = c / (kQk / 8), col = c % (kQk / 8);
    const bool ok = row < n_q;
    const bf16* src = ok ? p.q + int64_t(t0 + row) * p.q_row + int64_t(h) * p.q_head + col * 8 : p.q;
    cp_async16(sq + row * kPfLdK + col * 8, src, ok);
  }
  cp_async_commit();
  // K/V tile: thread copies half of key row tid / 2: 12 K chunks (16 k_nope from kvx, 8 k_pe from ctx), 8 V.
  auto load_kv = [&](int buf, int key0) {
    const int row = tid >> 1, half = tid & 1, pos = key0 + row;
    const bool ok = pos < kv_end;
    const int64_t grow = kv_row0 + (ok ? pos : 0);
    const bf16* kvx = p.kvx + grow * kvx_ld + int64_t(h) * kKvbRows;
    const bf16* pe = p.ctx + grow * kLatK + kLora;
    bf16* dk = sk + (buf * kPfK + row) * kPfLdK;
    bf16* dv = sv + (buf * kPfK + row) * kPfLdV;
#pragma unroll
    for (int i = 0; i < kQk / 8 / 2; ++i) {
      const int col = half + 2 * i;
      cp_async16(dk + col * 8, col < kNope / 8 ? kvx + col * 8 : pe + (col - kNope / 8) * 8, ok);
    }
#pragma unroll
    for (int i = 0; i < kV / 8 / 2; ++i) {
      const int col = half + 2 * i;
      cp_async16(dv + col * 8, kvx + kNope + col * 8, ok);
    }
  };
  load_kv(0, 0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  uint32_t qf[kQk / 16][4];
#pragma unroll
  for (int kk = 0; kk < kQk / 16; ++kk)
    ldsm_x4(qf[kk], sq + (warp * 16 + lm_a_row(lane)) * kPfLdK + kk * 16 + lm_a_col(lane));
  int qpos[2];
  qpos[0] = q_pos0 + warp * 16 + g;
  qpos[1] = qpos[0] + 8;

  float o[kV / 8][4];
#pragma unroll
  for (int i = 0; i < kV / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int j = 0; j < n_kv; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // tile j landed; every warp is done with tile j - 1
    if (j + 1 < n_kv) {
      load_kv((j + 1) & 1, (j + 1) * kPfK);
      cp_async_commit();
    }
    const bf16* kt = sk + (j & 1) * kPfK * kPfLdK;
    const bf16* vt = sv + (j & 1) * kPfK * kPfLdV;

    float sc[kPfK / 8][4];
#pragma unroll
    for (int i = 0; i < kPfK / 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kQk / 16; ++kk)
#pragma unroll
      for (int np = 0; np < kPfK / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, kt + (np * 16 + lm_bnk_row(lane)) * kPfLdK + kk * 16 + lm_bnk_col(lane));
        mma_bf16(sc[2 * np], qf[kk], b[0], b[1]);
        mma_bf16(sc[2 * np + 1], qf[kk], b[2], b[3]);
      }

    const int key0 = j * kPfK;
    const bool diagonal = key0 + kPfK - 1 > q_pos0;  // some key of this tile is after some query
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kPfK / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t4 + (e & 1), rs = e >> 1;
        sc[nt][e] = (diagonal && key > qpos[rs]) ? -INFINITY : sc[nt][e] * p.scale_log2;
        mx[rs] = fmaxf(mx[rs], sc[nt][e]);
      }
    float alpha[2], m_use[2];
#pragma unroll
    for (int rs = 0; rs < 2; ++rs) {
      mx[rs] = fmaxf(mx[rs], __shfl_xor_sync(0xffffffffu, mx[rs], 1));
      mx[rs] = fmaxf(mx[rs], __shfl_xor_sync(0xffffffffu, mx[rs], 2));
      const float m_new = fmaxf(m_run[rs], mx[rs]);
      m_use[rs] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[rs] = exp2f(m_run[rs] - m_use[rs]);
      m_run[rs] = m_new;
      l_run[rs] *= alpha[rs];
    }
    // P stays in registers: the C fragments of key tiles 2k, 2k+1 are the A fragment of k-step k.
    uint32_t pa[kPfK / 16][4];
#pragma unroll
    for (int nt = 0; nt < kPfK / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[nt][e] = exp2f(sc[nt][e] - m_use[e >> 1]);
        l_run[e >> 1] += sc[nt][e];
      }
      pa[nt >> 1][(nt & 1) * 2] = pack_bf16(sc[nt][0], sc[nt][1]);
      pa[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(sc[nt][2], sc[nt][3]);
    }
#pragma unroll
    for (int i = 0; i < kV / 8; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }
#pragma unroll
    for (int kk = 0; kk < kPfK / 16; ++kk)
#pragma unroll
      for (int np = 0; np < kV / 16; ++np) {
        uint32_t b[4];
        ldsm_x4_trans(b, vt + (kk * 16 + lm_bkn_row(lane)) * kPfLdV + np * 16 + lm_bkn_col(lane));
        mma_bf16(o[2 * np], pa[kk], b[0], b[1]);
        mma_bf16(o[2 * np + 1], pa[kk], b[2], b[3]);
      }
  }

#pragma unroll
  for (int rs = 0; rs < 2; ++rs) {
    l_run[rs] += __shfl_xor_sync(0xffffffffu, l_run[rs], 1);
    l_run[rs] += __shfl_xor_sync(0xffffffffu, l_run[rs], 2);
    const int row = warp * 16 + g + rs * 8;
    if (row >= n_q) continue;
    const float inv = l_run[rs] > 0.0f ? 1.0f / l_run[rs] : 0.0f;
    bf16* dst = p.out + int64_t(t0 + row) * p.out_row + int64_t(h) * kV + 2 * t4;
#pragma unroll
    for (int i = 0; i < kV / 8; ++i)
      *reinterpret_cast<uint32_t*>(dst + i * 8) = pack_bf16(o[i][2 * rs] * inv, o[i][2 * rs + 1] * inv);
  }
}

std::atomic<uint64_t> g_smem_set{0};

}  // namespace

Status launch_gather(const GatherParams& p, cudaStream_t stream) {
  const int n_rows = p.row_end - p.row_begin;
  if (n_rows <= 0) return {};
  gather_kernel<<<(n_rows + kGatherWarps - 1) / kGatherWarps, kGatherWarps * 32, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("mla_prefill_gather");
  return {};
}

Status launch_prefill(const PrefillParams& p, const CudaContext& cx) {
  const int n_tiles = p.tile_end - p.tile_begin;
  if (n_tiles <= 0) return {};
  if (p.n_heads > 65535) return invalid_argument("mla_attention (CUDA): {} heads exceed the grid", p.n_heads);
  RILL_TRY(opt_in_smem("mla_attention", reinterpret_cast<const void*>(&prefill_kernel), kPfSmemBytes, cx,
                       &g_smem_set));
  const dim3 grid(n_tiles, p.n_heads);
  prefill_kernel<<<grid, kPfThreads, kPfSmemBytes, cx.stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("mla_prefill");
  return {};
}

}  // namespace rill::cuda::mla
