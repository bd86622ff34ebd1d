// Inter-chunk recurrence of the chunked gated delta rule (spec §3.3), parallel over (prefill sequence, head,
// 32-column block of v): the state's v-columns evolve independently. Per chunk, with the intra phase's W, U,
// Qg, Kd, Aqk, gamma and S [128 x 32] (fp32 in registers, bf16 copy in smem as the mma operand):
//   V_new = U - W S          (warps 0-3, rows 16w..)       O = Qg S + Aqk V_new   (warps 4-7, rows 16(w-4)..)
//   S     = diag(gamma) S + Kd^T V_new                     (warps 0-3, state rows 32w..32w+31)
// The next chunk's tiles stream in (cp.async, zero-filled past the sequence end) while this one computes.
// Prefix caching's in-step snapshots: after a chunk that ends at a requested position, the state is also
// written (fp32) to the requested slot, so a long prompt is one step instead of one step per snapshot.
// Persistent: CTAs loop over the items; one CTA per SM (smem ~146 KB).
#include <algorithm>

#include "backend/cuda/common/check.h"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/device.cuh"
#include "backend/cuda/kda/phases.h"

namespace rill::cuda::kda {
namespace {

struct RecBuf {
  bf16 w[kChunk][kLdH];
  bf16 qg[kChunk][kLdH];
  bf16 kd[kChunk][kLdH];
  bf16 aqk[kChunk][kLdA];
  bf16 u[kChunk][kLdV];  // this CTA's 32 columns
  float gamma[kHeadDim];
};

struct RecSmem {
  RecBuf buf[2];
  bf16 s[kHeadDim][kLdV];  // state, bf16 copy
  bf16 vn[kChunk][kLdV];   // V_new, bf16
};

static_assert(kRecThreads == 256 && kVb == 32, "warp roles below assume 8 warps and 4 n-tiles");

// Chunk tiles of rows [t0, t0 + rows) of head h (rows past `rows` zero-filled).
__device__ void load_chunk(const ChunkParams& p, RecBuf& b, int64_t tok0, int rows, int64_t gamma_row,
                           int col0) {
  const int tid = int(threadIdx.x);
  for (int u = tid; u < kChunk * (kHeadDim / 8); u += kRecThreads) {
    const int r = u >> 4, c = (u & 15) * 8;
    const bool ok = r < rows;
    const int64_t off = (tok0 + (ok ? r : 0)) * kHeadDim + c;
    cp_async16(&b.w[r][c], p.s.w + off, ok);
    cp_async16(&b.qg[r][c], p.s.qg + off, ok);
    cp_async16(&b.kd[r][c], p.s.kd + off, ok);
  }
  for (int u = tid; u < kChunk * (kChunk / 8); u += kRecThreads) {
    const int r = u >> 3, c = (u & 7) * 8;
    const bool ok = r < rows;
    cp_async16(&b.aqk[r][c], p.s.aqk + (tok0 + (ok ? r : 0)) * kChunk + c, ok);
  }
  for (int u = tid; u < kChunk * (kVb / 8); u += kRecThreads) {
    const int r = u >> 2, c = (u & 3) * 8;
    const bool ok = r < rows;
    cp_async16(&b.u[r][c], p.s.u + (tok0 + (ok ? r : 0)) * kHeadDim + col0 + c, ok);
  }
  if (tid < kHeadDim / 4) cp_async16(&b.gamma[tid * 4], p.s.gamma + gamma_row * kHeadDim + tid * 4, true);
}

// Writes the fp32 state held in warp `warp`'s fragments (rows 32 warp .. +31, this CTA's 32 columns) to S.
__device__ __forceinline__ void store_state(const float (&st)[2][4][4], float* S, int warp, int g, int tq) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = 32 * warp + 16 * mt + g + 8 * hh;
        *reinterpret_cast<float2*>(S + row * kHeadDim + 8 * nt + 2 * tq) =
            make_float2(st[mt][nt][2 * hh], st[mt][nt][2 * hh + 1]);
      }
}

__global__ void __launch_bounds__(kRecThreads, 1) kda_chunk_recurrence_kernel(const ChunkParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  RecSmem& sm = *reinterpret_cast<RecSmem*>(smem_raw);
  const AttentionIo& io = p.io;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int n_items = p.plan.counts[0] * io.n_heads * kNvb;

  for (int item = int(blockIdx.x); item < n_items; item += int(gridDim.x)) {
    const int vb = item % kNvb, kh = item / kNvb, h = kh % io.n_heads, k = kh / io.n_heads;
    const int s = p.plan.pf_seq[k], chunk0 = p.plan.pf_chunk_first[k];
    const int t_begin = io.seq_token_start[s], n = io.seq_token_start[s + 1] - t_begin;
    const int n_chunks = (n + kChunk - 1) / kChunk, col0 = vb * kVb;
    const int64_t tok_base = int64_t(h) * io.n_tokens + t_begin;  // head-major scratch row of the first token
    float* S =
        io.state + int64_t(io.seq_state_slot[s]) * io.ld_state_slot + int64_t(h) * io.ld_state_head + col0;
    const bool fresh = io.seq_start_pos[s] == 0;

    __syncthreads();  // the previous item is done with shared memory
    // Warps 0-3 own state rows 32w .. 32w+31 as mma C fragments: st[m-tile][n-tile][4].
    float st[2][4][4] = {};
    if (warp < 4) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int row = 32 * warp + 16 * mt + g + 8 * hh, c = 8 * nt + 2 * tq;
            const float2 v =
                fresh ? make_float2(0.0f, 0.0f) : *reinterpret_cast<const float2*>(S + row * kHeadDim + c);
            st[mt][nt][2 * hh] = v.x;
            st[mt][nt][2 * hh + 1] = v.y;
            *reinterpret_cast<uint32_t*>(&sm.s[row][c]) = pack_bf16x2(v.x, v.y);
          }
    }
    load_chunk(p, sm.buf[0], tok_base, min(kChunk, n), int64_t(chunk0) * io.n_heads + h, col0);
    cp_async_commit();

    for (int c = 0; c < n_chunks; ++c) {
      RecBuf& b = sm.buf[c & 1];
      const int rows = min(kChunk, n - c * kChunk);
      cp_async_wait_all();
      __syncthreads();  // chunk c landed; last chunk's readers are done; the bf16 state is current
      if (c + 1 < n_chunks)
        load_chunk(p, sm.buf[(c + 1) & 1], tok_base + int64_t(c + 1) * kChunk,
                   min(kChunk, n - (c + 1) * kChunk), int64_t(chunk0 + c + 1) * io.n_heads + h, col0);
      cp_async_commit();

      // [W ; Qg] S: warp w takes rows 16 (w & 3) of W (w < 4) or Qg (w >= 4), all 32 columns.
      float acc[4][4] = {};
      const bf16* A = warp < 4 ? &b.w[0][0] : &b.qg[0][0];
      const int ar = (warp & 3) * 16;
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        uint32_t a[4], b0[2], b1[2], b2[2], b3[2];
        load_a(a, A, kLdH, ar, kk * 16, lane);
        load_b_kn_x2(b0, b1, &sm.s[0][0], kLdV, kk * 16, 0, lane);
        load_b_kn_x2(b2, b3, &sm.s[0][0], kLdV, kk * 16, 16, lane);
        mma_bf16(acc[0], a, b0);
        mma_bf16(acc[1], a, b1);
        mma_bf16(acc[2], a, b2);
        mma_bf16(acc[3], a, b3);
      }
      if (warp < 4) {  // V_new = U - W S
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int row = ar + g + 8 * hh, cc = 8 * nt + 2 * tq;
            const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&b.u[row][cc]));
            *reinterpret_cast<uint32_t*>(&sm.vn[row][cc]) =
                pack_bf16x2(u.x - acc[nt][2 * hh], u.y - acc[nt][2 * hh + 1]);
          }
      }
      __syncthreads();  // V_new complete; everyone is done reading the bf16 state

      if (warp >= 4) {  // O = Qg S + Aqk V_new (causal: token blocks up to the warp's own)
        const int wq = warp - 4;
        for (int kk = 0; kk <= wq; ++kk) {
          uint32_t a[4], b0[2], b1[2], b2[2], b3[2];
          load_a(a, &b.aqk[0][0], kLdA, wq * 16, kk * 16, lane);
          load_b_kn_x2(b0, b1, &sm.vn[0][0], kLdV, kk * 16, 0, lane);
          load_b_kn_x2(b2, b3, &sm.vn[0][0], kLdV, kk * 16, 16, lane);
          mma_bf16(acc[0], a, b0);
          mma_bf16(acc[1], a, b1);
          mma_bf16(acc[2], a, b2);
          mma_bf16(acc[3], a, b3);
        }
        const int t0 = t_begin + c * kChunk;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = wq * 16 + g + 8 * hh;
          if (r < rows) {
            bf16* o = io.out + int64_t(t0 + r) * io.ld_out + h * kHeadDim + col0 + 2 * tq;
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
              *reinterpret_cast<uint32_t*>(o + 8 * nt) = pack_bf16x2(acc[nt][2 * hh], acc[nt][2 * hh + 1]);
          }
        }
      } else {  // S = diag(gamma) S + Kd^T V_new
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const float gm = b.gamma[32 * warp + 16 * mt + g + 8 * hh];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) st[mt][nt][2 * hh] *= gm, st[mt][nt][2 * hh + 1] *= gm;
          }
#pragma unroll
        for (int kk = 0; kk < kChunk / 16; ++kk) {
          uint32_t b0[2], b1[2], b2[2], b3[2];
          load_b_kn_x2(b0, b1, &sm.vn[0][0], kLdV, kk * 16, 0, lane);
          load_b_kn_x2(b2, b3, &sm.vn[0][0], kLdV, kk * 16, 16, lane);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            uint32_t a[4];
            load_a_trans(a, &b.kd[0][0], kLdH, kk * 16, 32 * warp + 16 * mt, lane);
            mma_bf16(st[mt][0], a, b0);
            mma_bf16(st[mt][1], a, b1);
            mma_bf16(st[mt][2], a, b2);
            mma_bf16(st[mt][3], a, b3);
          }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
              const int row = 32 * warp + 16 * mt + g + 8 * hh;
              *reinterpret_cast<uint32_t*>(&sm.s[row][8 * nt + 2 * tq]) =
                  pack_bf16x2(st[mt][nt][2 * hh], st[mt][nt][2 * hh + 1]);
            }
        // Prefix caching asks for the state at some chunk boundaries of the step: it is in registers now.
        if (io.snaps) {
          const int end_pos = io.seq_start_pos[s] + c * kChunk + rows;
          for (int j = io.snap_begin[s]; j < io.snap_begin[s + 1]; ++j)
            if (io.snaps[j].pos == end_pos)
              store_state(st, io.state + int64_t(io.snaps[j].slot) * io.ld_state_slot + int64_t(h) * io.ld_state_head + col0,
                          warp, g, tq);
        }
      }
    }

    if (warp < 4) store_state(st, S, warp, g, tq);  // final state, fp32
  }
}

}  // namespace

Status launch_chunk_recurrence(const ChunkParams& p, int n_prefill, const CudaContext& cx) {
  if (n_prefill == 0) return {};
  static std::atomic<uint64_t> done{0};
  RILL_TRY(opt_in_smem("kda", reinterpret_cast<const void*>(kda_chunk_recurrence_kernel), sizeof(RecSmem), cx,
                       &done));
  const int64_t items = int64_t(n_prefill) * p.io.n_heads * kNvb;
  const int grid = int(std::min<int64_t>(items, std::max(cx.sm_count, 1)));
  kda_chunk_recurrence_kernel<<<grid, kRecThreads, sizeof(RecSmem), cx.stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("kda_chunk_recurrence");
  return {};
}

}  // namespace rill::cuda::kda
