// Absorbed decode attention, split over the KV length (FlashMLA geometry, mma.sync): a CTA takes 32
// (token, head) rows of one sequence and one split of its paged cache; the cache is MQA-shaped (one 576-wide
// key / 512-wide value row per position, shared by all heads), so each 64-key tile is loaded once into smem
// and used for every row. 8 warps = 2 row groups (16 rows) x 4 column groups: S = Q K^T by 16-key quarter,
// row max through smem, P (bf16) through smem, O[16 x 128] += P V per warp. Online softmax in fp32 (log2
// units); the split's unnormalised O, max and sum go to the partial slots for decode_combine.cu.
#include <cfloat>

#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/mla/device.cuh"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

__global__ void __launch_bounds__(kDecThreads, 1) decode_splitkv_kernel(const DecodeParams p) {
  pdl_prologue();
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sq = reinterpret_cast<bf16*>(smem);                        // [kDecRows][kDecLd]   [q_lat ; q_pe]
  bf16* sk = sq + kDecRows * kDecLd;                               // [2][kDecKeys][kDecLd] cache tiles
  bf16* sp = sk + 2 * kDecKeys * kDecLd;                           // [kDecRows][kDecLdP]  probabilities
  float* red = reinterpret_cast<float*>(sp + kDecRows * kDecLdP);  // [4][kDecRows] per-quarter row max / sum

  const int w = blockIdx.x;
  if (w >= p.n_work) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mi = warp >> 2, ni = warp & 3, g = lane >> 2, t4 = lane & 3;
  const int H = p.n_heads;

  const int s = find_seq(p.plan.dec_work_start, p.n_seqs, w);
  const int n_split = p.plan.dec_splits[s], local = w - p.plan.dec_work_start[s];
  const int row_tile = local / n_split, split = local % n_split;
  const int t0 = p.seq_token_start[s], n_new = p.seq_token_start[s + 1] - t0;
  const int ctx = p.seq_start_pos[s] + n_new, rows = n_new * H, r0 = row_tile * kDecRows;
  const int kb = split * p.plan.dec_split_keys[s];
  const int ke = min(ctx, kb + p.plan.dec_split_keys[s]);
  if (kb >= ke) {  // a split past the context (fixed split counts): an empty partial, which combine skips
    for (int row = tid; row < kDecRows; row += kDecThreads) {
      const int r = r0 + row;
      if (r < rows) {
        const int64_t slot = int64_t(p.plan.dec_slot_start[s]) + int64_t(split) * rows + r;
        *reinterpret_cast<float2*>(p.part_ml + slot * 2) = make_float2(-INFINITY, 0.0f);
      }
    }
    return;
  }
  const int n_tiles = (ke - kb + kDecKeys - 1) / kDecKeys;
  const int64_t lat_row0 = int64_t(p.plan.dec_tok_start[s]) * H + r0;  // q_lat row of this CTA's row 0

  // Q tile: 32 rows x 72 chunks; chunks < 64 from q_lat, the rest q_pe from q. Rows past `rows` are zero.
#pragma unroll
  for (int i = 0; i < (kDecRows * kLatK / 8) / kDecThreads; ++i) {
    const int c = tid + i * kDecThreads, row = c / (kLatK / 8), col = c % (kLatK / 8);
    const int r = r0 + row;
    const bool ok = r < rows;
    const bf16* src = p.q_lat;
    if (ok) {
      if (col < kLora / 8) {
        src = p.q_lat + (lat_row0 + row) * kLora + col * 8;
      } else {
        const int tl = r / H, h = r % H;
        src = p.q + int64_t(t0 + tl) * p.q_row + int64_t(h) * p.q_head + kNope + (col - kLora / 8) * 8;
      }
    }
    cp_async16(sq + row * kDecLd + col * 8, src, ok);
  }
  // Cache tile: thread copies 18 chunks of key row tid / 4 (one block-table look-up per tile).
  auto load_tile = [&](int buf, int key0) {
    const int row = tid >> 2, pos = key0 + row;
    bool ok = pos < ke;
    const bf16* src = p.cache;
    if (ok) {
      const int block = p.block_tables[int64_t(s) * p.max_blocks_per_seq + pos / p.block_size];
      ok = block >= 0 && block < p.n_blocks;
      if (ok) src = p.cache + int64_t(block) * p.cache_block + int64_t(pos % p.block_size) * p.cache_row;
    }
    bf16* dst = sk + (buf * kDecKeys + row) * kDecLd;
#pragma unroll
    for (int i = 0; i < kLatK / 8 / 4; ++i) {
      const int col = (tid & 3) + 4 * i;
      cp_async16(dst + col * 8, ok ? src + col * 8 : p.cache, ok);
    }
  };
  load_tile(0, kb);
  cp_async_commit();

  // This thread's two rows (g and g + 8 of its row group): causal limit = the token's position.
  int lim[2];
#pragma unroll
  for (int rs = 0; rs < 2; ++rs) {
    const int r = r0 + mi * 16 + g + rs * 8;
    lim[rs] = r < rows ? p.token_pos[t0 + r / H] : -1;
  }

  float o[16][4];
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[i][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // tile j landed everywhere; every warp is done with tile j - 1, P and red
    if (j + 1 < n_tiles) {
      load_tile((j + 1) & 1, kb + (j + 1) * kDecKeys);
      cp_async_commit();
    }
    const bf16* kt = sk + (j & 1) * kDecKeys * kDecLd;

    // S[16 rows x 16 keys] for keys ni*16.. over the full 576 width.
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll 4
    for (int kk = 0; kk < kLatK / 16; ++kk) {
      uint32_t a[4], b[4];
      ldsm_x4(a, sq + (mi * 16 + lm_a_row(lane)) * kDecLd + kk * 16 + lm_a_col(lane));
      ldsm_x4(b, kt + (ni * 16 + lm_bnk_row(lane)) * kDecLd + kk * 16 + lm_bnk_col(lane));
      mma_bf16(sc[0], a, b[0], b[1]);
      mma_bf16(sc[1], a, b[2], b[3]);
    }
    const int key0 = kb + j * kDecKeys + ni * 16;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + nt * 8 + 2 * t4 + (e & 1), rs = e >> 1;
        sc[nt][e] = (key < ke && key <= lim[rs]) ? sc[nt][e] * p.scale_log2 : -INFINITY;
        mx[rs] = fmaxf(mx[rs], sc[nt][e]);
      }
#pragma unroll
    for (int rs = 0; rs < 2; ++rs) {
      mx[rs] = fmaxf(mx[rs], __shfl_xor_sync(0xffffffffu, mx[rs], 1));
      mx[rs] = fmaxf(mx[rs], __shfl_xor_sync(0xffffffffu, mx[rs], 2));
      if (t4 == 0) red[ni * kDecRows + mi * 16 + g + rs * 8] = mx[rs];
    }
    __syncthreads();
    float alpha[2], m_use[2];
#pragma unroll
    for (int rs = 0; rs < 2; ++rs) {
      const int row = mi * 16 + g + rs * 8;
      const float tile_max = fmaxf(fmaxf(red[row], red[kDecRows + row]),
                                   fmaxf(red[2 * kDecRows + row], red[3 * kDecRows + row]));
      const float m_new = fmaxf(m_run[rs], tile_max);
      m_use[rs] = m_new == -INFINITY ? 0.0f : m_new;  // fully masked so far: keep p = 0, no NaN
      alpha[rs] = exp2f(m_run[rs] - m_use[rs]);
      m_run[rs] = m_new;
      l_run[rs] *= alpha[rs];
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[nt][e] = exp2f(sc[nt][e] - m_use[e >> 1]);
        l_run[e >> 1] += sc[nt][e];
      }
      bf16* prow = sp + (mi * 16 + g) * kDecLdP + ni * 16 + nt * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(prow) = pack_bf16(sc[nt][0], sc[nt][1]);
      *reinterpret_cast<uint32_t*>(prow + 8 * kDecLdP) = pack_bf16(sc[nt][2], sc[nt][3]);
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      o[i][0] *= alpha[0];
      o[i][1] *= alpha[0];
      o[i][2] *= alpha[1];
      o[i][3] *= alpha[1];
    }
    __syncthreads();  // P complete

    // O[16 rows x 128 cols (ni)] += P[16 x 64] V[64 x 128]; V = the first 512 columns of the cache tile.
#pragma unroll
    for (int kk = 0; kk < kDecKeys / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, sp + (mi * 16 + lm_a_row(lane)) * kDecLdP + kk * 16 + lm_a_col(lane));
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t b[4];
        ldsm_x4_trans(b, kt + (kk * 16 + lm_bkn_row(lane)) * kDecLd + ni * 128 + np * 16 + lm_bkn_col(lane));
        mma_bf16(o[2 * np], a, b[0], b[1]);
        mma_bf16(o[2 * np + 1], a, b[2], b[3]);
      }
    }
  }

  // Row sums: over the quad, then over the four key quarters.
#pragma unroll
  for (int rs = 0; rs < 2; ++rs) {
    l_run[rs] += __shfl_xor_sync(0xffffffffu, l_run[rs], 1);
    l_run[rs] += __shfl_xor_sync(0xffffffffu, l_run[rs], 2);
  }
  __syncthreads();  // everyone is past the last read of red
  if (t4 == 0) {
    red[ni * kDecRows + mi * 16 + g] = l_run[0];
    red[ni * kDecRows + mi * 16 + g + 8] = l_run[1];
  }
  __syncthreads();
#pragma unroll
  for (int rs = 0; rs < 2; ++rs) {
    const int row = mi * 16 + g + rs * 8, r = r0 + row;
    if (r >= rows) continue;
    const int64_t slot = int64_t(p.plan.dec_slot_start[s]) + int64_t(split) * rows + r;
    float* dst = p.part_o + slot * kLora + ni * 128 + 2 * t4;
#pragma unroll
    for (int i = 0; i < 16; ++i)
      *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[i][2 * rs], o[i][2 * rs + 1]);
    if (ni == 0 && t4 == 0) {
      const float l = red[row] + red[kDecRows + row] + red[2 * kDecRows + row] + red[3 * kDecRows + row];
      *reinterpret_cast<float2*>(p.part_ml + slot * 2) = make_float2(m_run[rs], l);
    }
  }
}

std::atomic<uint64_t> g_smem_set{0};

}  // namespace

Status launch_decode_splitkv(const DecodeParams& p, const CudaContext& cx) {
  if (p.n_work == 0) return {};
  RILL_TRY(opt_in_smem("mla_attention", reinterpret_cast<const void*>(&decode_splitkv_kernel), kDecSmemBytes,
                       cx, &g_smem_set));
  return launch("mla_decode_splitkv", {dim3(unsigned(p.n_work)), dim3(kDecThreads), size_t(kDecSmemBytes)},
                cx.stream, decode_splitkv_kernel, p);
}

}  // namespace rill::cuda::mla
