// MLA kernels: the shapes they are built for, tile sizes, the step plan, and each kernel's parameter block
// (host and device). Element offsets are in elements of the pointed-to type; every bf16 row is 16-byte
// aligned.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define RILL_MLA_HD __host__ __device__
#else
#define RILL_MLA_HD
#endif

namespace rill::cuda::mla {

using bf16 = __nv_bfloat16;

// Per-head dims both Kimi models use (spec §3.4); heads are a grid dimension, never a template argument.
constexpr int kNope = 128, kRope = 64, kV = 128, kLora = 512;
constexpr int kLatK = kLora + kRope;  // 576: absorbed key [c ; k_pe], also the cache row
constexpr int kQk = kNope + kRope;    // 192: naive q/k head dim
constexpr int kKvbRows = kNope + kV;  // 256 kv_b rows per head: W_UK (128) then W_UV (128)

// Path choice: sequences with at most this many new tokens take the absorbed split-KV decode path.
// 16, not 8: at 8, a verify step of k = 8 drafts (9 tokens) at batch 64 and 4K context expanded every
// sequence's context through the prefill path and took 3.5x the k = 4 step on the H200 (docs/PERF.md).
constexpr int kDecodeMaxNew = 16;

// Prefill expansion groups hold up to this many context rows (287 MiB of ctx + kvx at 32 heads) unless one
// sequence alone has more; the backend option mla_expand_rows overrides it (tests force many groups with 64).
constexpr int kExpandRows = 16384;

// Decode split-KV kernel: 32 (token, head) rows x 64-key cache tiles, 8 warps, 2 smem stages.
constexpr int kDecRows = 32, kDecKeys = 64, kDecThreads = 256;
constexpr int kDecLd = kLatK + 8;  // padded smem row (conflict-free ldmatrix)
constexpr int kDecLdP = kDecKeys + 8;
constexpr size_t kDecSmemBytes = size_t(kDecRows) * kDecLd * 2 + size_t(2) * kDecKeys * kDecLd * 2 +
                                 size_t(kDecRows) * kDecLdP * 2 + size_t(4) * kDecRows * 4;
constexpr int kMaxFixedSplits = 64;   // count-only plans: splits per sequence at most
constexpr int kMinTilesPerSplit = 2;    // a split reads at least this many tiles (its partial costs ~2)
constexpr int kSplitOverheadTiles = 2;  // Q load + partial write + combine read, in tile equivalents

// Prefill flash kernel: 64 queries x 64 keys per step, 4 warps (16 query rows each), 2 K/V stages.
constexpr int kPfQ = 64, kPfK = 64, kPfThreads = 128;
constexpr int kPfLdK = kQk + 8, kPfLdV = kV + 8;
constexpr size_t kPfSmemBytes =
    (size_t(kPfQ) * kPfLdK + size_t(2) * kPfK * kPfLdK + size_t(2) * kPfK * kPfLdV) * 2;

// cuDNN prefill attention (cudnn_sdpa.h): at most this many prefill sequences per fused-attention call (more
// take several calls), and the batch arrays it reads: the sequence lengths (int32, cuDNN's seq_len tensors)
// and the ragged offsets (int64, elements: the type cuDNN's own tests and TransformerEngine bind on cuDNN
// >= 9.5), each padded to 72 entries (every array starts 16-byte aligned).
constexpr int kSdpaMaxBatch = 64, kSdpaArrStride = 72;
// Array order inside SdpaBatch: the five ragged offsets (off), then the lengths (len).
enum SdpaLen { kSdpaSeqQ, kSdpaSeqKv, kSdpaLens };
enum SdpaOff { kSdpaOffQ, kSdpaOffK, kSdpaOffV, kSdpaOffO, kSdpaOffStats, kSdpaOffs };
// Zeroed rows after the K copy (each H * kKvbRows wide, so they also cover V rows read past kvx's end, which
// land in the K copy and then here). A precaution, not a measured need: a kernel that loads whole key tiles past
// seq_kv masks their scores, but a masked probability (0) times a non-finite V element is still NaN, so every
// row such a tile could touch past the group's last context row is kept finite (cuDNN's own ragged tests pad
// their buffers to 64-token multiples).
constexpr int kSdpaTailRows = 128;

RILL_MLA_HD inline int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// What one sequence contributes to the step (host plan and device plan evaluate the same integer formula).
struct SeqWork {
  int dec_work = 0, dec_tokens = 0, dec_slots = 0;  // split-KV CTAs, decode tokens, partial rows
  int n_splits = 0, split_keys = 0;                 // decode: KV splits and keys per split (multiple of 64)
  int pf_tiles = 0, pf_rows = 0;                    // prefill: 64-token query tiles, gathered context rows
};

// `fixed_splits` > 0: every decode sequence gets exactly that many splits (the trailing ones may hold no keys),
// so the work counts depend on the batch's shape only — a replayed graph's grid stays right for any context.
RILL_MLA_HD inline SeqWork seq_work(int start_pos, int n_new, int n_heads, int tiles_per_split,
                                    int fixed_splits = 0) {
  SeqWork w;
  const int ctx = start_pos + n_new;
  if (n_new <= kDecodeMaxNew) {
    const int tiles = ceil_div(ctx, kDecKeys);
    const int per = fixed_splits > 0 ? ceil_div(tiles, fixed_splits)
                                     : ceil_div(tiles, ceil_div(tiles, tiles_per_split));  // balanced
    w.n_splits = fixed_splits > 0 ? fixed_splits : ceil_div(tiles, per);
    w.split_keys = per * kDecKeys;
    const int rows = n_new * n_heads;
    w.dec_work = ceil_div(rows, kDecRows) * w.n_splits;
    w.dec_tokens = n_new;
    w.dec_slots = rows * w.n_splits;
  } else {
    w.pf_tiles = ceil_div(n_new, kPfQ);
    w.pf_rows = ctx;
  }
  return w;
}

// Per-sequence plan arrays the device plan kernel writes into scratch (int32 each).
struct PlanArrays {
  int32_t* dec_work_start;  // [n_seqs + 1] first split-KV CTA of each sequence (prefill sequences add none)
  int32_t* dec_splits;      // [n_seqs] KV splits (0: prefill sequence)
  int32_t* dec_split_keys;  // [n_seqs] keys per split
  int32_t* dec_tok_start;   // [n_seqs + 1] first decode token (row of q_lat / lat, times n_heads)
  int32_t* dec_slot_start;  // [n_seqs + 1] first partial slot; slot = start + split * n_new * H + row
  int32_t* dec_tokens;      // [dec_tokens] token index (row of q / out) of each decode token
  int32_t* pf_tile_start;   // [n_seqs + 1] first 64-token query tile
  int32_t* pf_row_start;    // [n_seqs + 1] first gathered context row
};

// Host plan of one attention call: counts that size grids and the scratch carve-up (byte offsets).
// Prefill sequences are expanded in groups of consecutive sequences, so the expanded context (ctx + kvx,
// 17.5 KiB a row at 32 heads) is bounded by the step's longest sequence or kExpandRows, whichever is larger,
// not by the sum of every prefill sequence's context (many chunks after long cached prefixes in one step).
struct ExpandGroup {
  int tile_begin, tile_end, row_begin, row_end;
};

struct Plan {
  int n_seqs = 0, n_heads = 0;
  int tiles_per_split = kMinTilesPerSplit;  // decode split target; the device plan recomputes splits from it
  int fixed_splits = 0;  // > 0: every decode sequence gets this many splits (BatchLayout::count_only_plan)
  int dec_tokens = 0, dec_work = 0, dec_slots = 0;
  int pf_tiles = 0, pf_rows = 0;
  std::vector<ExpandGroup> groups;  // the prefill sequences' expansion groups, in sequence order
  int group_rows = 0;               // ctx / kvx rows in the scratch: min(pf_rows, max(longest, kExpandRows))
  // Prefill through cuDNN (mla_prefill = auto | cudnn where the build has cuDNN): K [group_rows, H, 192] (+
  // its zeroed tail), the batch arrays of one fused-attention call and the softmax stats cuDNN writes are in
  // the scratch too.
  bool sdpa = false;
  size_t off_ints = 0, off_q_lat = 0, off_part_o = 0, off_part_ml = 0, off_lat = 0, off_ctx = 0, off_kvx = 0;
  size_t off_k = 0, off_sdpa = 0, off_stats = 0;
  size_t bytes = 0;
};

struct PlanParams {
  const int32_t* seq_token_start;  // [n_seqs + 1]
  const int32_t* seq_start_pos;    // [n_seqs]
  PlanArrays out;
  int n_seqs, n_heads, tiles_per_split, fixed_splits;
};

struct CacheWriteParams {
  const bf16* ckv;  // act [T, width], row stride ckv_row
  int64_t ckv_row;
  const float* weight;  // f32 [kv_lora]
  bf16* cache;          // act [n_blocks, block_size, width], strides cache_block / cache_row
  int64_t cache_block, cache_row;
  const int32_t* token_seq;     // [T]
  const int32_t* token_pos;     // [T]
  const int32_t* block_tables;  // [n_seqs, max_blocks_per_seq]
  int n_blocks, block_size, max_blocks_per_seq;
  int n_tokens, kv_lora, width;
  float eps;
};

// C[m, h, :] = A[m, h, :] . B_h for every head h (bf16 in, fp32 accumulate, bf16 out).
struct HeadGemmParams {
  const bf16* a;  // A[m, h, k] = a[row(m) * a_row + h * a_head + k]
  int64_t a_row, a_head;
  const int32_t* a_rows;  // [m] physical A row of row m, or null (identity)
  const bf16* b;  // B_h[k, n] = b[h * b_head + k * b_ld + n] (K x N) or b[h * b_head + n * b_ld + k] (N x K)
  int64_t b_ld, b_head;
  bf16* c;  // C[m, h, n] = c[row(m) * c_row + h * c_head + n]
  int64_t c_row, c_head;
  const int32_t* c_rows;  // [m] physical C row of row m, or null
  int m, n, k;            // n % 64 == 0, k % 32 == 0
};

struct DecodeParams {
  const bf16* q;  // act [T, H, 192]: q_pe at +128; strides q_row / q_head
  int64_t q_row, q_head;
  const bf16* q_lat;  // bf16 [dec_tokens, H, 512] = W_UK,h^T q_nope
  const bf16* cache;  // act [n_blocks, block_size, 576], strides cache_block / cache_row
  int64_t cache_block, cache_row;
  const int32_t* block_tables;     // [n_seqs, max_blocks_per_seq]
  const int32_t* seq_token_start;  // [n_seqs + 1]
  const int32_t* seq_start_pos;    // [n_seqs]
  const int32_t* token_pos;        // [T]
  PlanArrays plan;
  float* part_o;   // f32 [dec_slots, 512]: unnormalised sum of p * c over the split
  float* part_ml;  // f32 [dec_slots, 2]: running max (log2 units, -inf when nothing attended) and sum of p
  int n_blocks, block_size, max_blocks_per_seq;
  int n_seqs, n_heads, n_work;
  float scale_log2;  // scale * log2(e)
};

struct CombineParams {
  const float* part_o;   // f32 [dec_slots, 512]
  const float* part_ml;  // f32 [dec_slots, 2]
  bf16* lat;             // bf16 [dec_tokens, H, 512]
  PlanArrays plan;
  const int32_t* token_seq;        // [T]
  const int32_t* seq_token_start;  // [n_seqs + 1]
  int n_heads, n_rows;             // n_rows = dec_tokens * H
};

// Gather and prefill run once per expansion group (Plan::groups): the context rows [row_begin, row_end) of the
// step's plan land at ctx / kvx rows [0, row_end - row_begin).
struct GatherParams {
  const bf16* cache;  // act [n_blocks, block_size, 576]
  int64_t cache_block, cache_row;
  const int32_t* block_tables;  // [n_seqs, max_blocks_per_seq]
  const int32_t* pf_row_start;  // [n_seqs + 1]
  bf16* ctx;                    // bf16 [group rows, 576] contiguous
  int n_blocks, block_size, max_blocks_per_seq, n_seqs, row_begin, row_end;
};

// K of the cuDNN path: per context row and head [k_nope (from the expansion) ; k_pe (shared, from the latent)].
struct KBuildParams {
  const bf16* kvx;  // bf16 [rows, H * 256]: per head k_nope (128) | v (128)
  const bf16* ctx;  // bf16 [rows, 576]: gathered latents, k_pe at +512
  bf16* k;          // bf16 [rows, H, 192] contiguous, then kSdpaTailRows * H * 256 zeros (kSdpaTailRows)
  int rows, n_heads;
};

// One cuDNN call's batch arrays, filled on the host and written to the scratch by a one-block kernel (a
// kernel parameter, so nothing waits on a host copy): len[kSdpaSeqQ][b] new tokens of batch entry b,
// len[kSdpaSeqKv][b] its context rows, off[kSdpaOff*][b] element offsets of its first row in q, K, V, out and
// the softmax stats (fp32 [tokens, H]), relative to the call's base pointers (entry B: the end). Entries past
// the real sequences (the batch is rounded up to a power of two) have length 0. Device layout: the five int64
// offset arrays, then the two int32 length arrays.
struct SdpaBatch {
  int64_t off[kSdpaOffs][kSdpaArrStride];
  int32_t len[kSdpaLens][kSdpaArrStride];
};
constexpr size_t kSdpaBatchBytes = sizeof(SdpaBatch);

struct PrefillParams {
  const bf16* q;  // act [T, H, 192], strides q_row / q_head
  int64_t q_row, q_head;
  const bf16* kvx;  // bf16 [group rows, H * 256]: per head k_nope (128) | v (128)
  const bf16* ctx;  // bf16 [group rows, 576]: gathered latents, k_pe at +512
  bf16* out;        // act [T, H * 128], row stride out_row
  int64_t out_row;
  const int32_t* seq_token_start;  // [n_seqs + 1]
  const int32_t* seq_start_pos;    // [n_seqs]
  const int32_t* pf_tile_start;    // [n_seqs + 1]
  const int32_t* pf_row_start;     // [n_seqs + 1]
  int n_seqs, n_heads;
  int tile_begin, tile_end, row_begin;  // the group's query tiles and its first context row (ctx / kvx row 0)
  float scale_log2;
};

}  // namespace rill::cuda::mla
