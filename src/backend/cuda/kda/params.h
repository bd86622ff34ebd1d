// Parameter blocks of the KDA kernels (host and device). Row strides (ld_*) are in elements of the pointed-to
// type; within a row every tensor is contiguous ([Hk, d] packed), bf16 rows are 16-byte aligned. Layout
// arrays are BatchLayout's device arrays. P = Hk * d, T = tokens of the step, d = kHeadDim.
#pragma once

#include <cuda_bf16.h>
#include <vector_types.h>

#include <cstddef>
#include <cstdint>

#include "backend/kda_snapshot.h"

namespace rill::cuda::kda {

// Short conv + SiLU, window update, gate and beta (prepare.cu).
struct PrepareParams {
  const __nv_bfloat16* qkv;  // [T, 3P] pre-conv q | k | v
  int64_t ld_qkv;
  const float* conv_w;        // [3P, K] contiguous; tap K-1 multiplies the current token
  __nv_bfloat16* conv_state;  // [n_slots, K-1, 3P]: last K-1 pre-conv inputs, read then updated
  int64_t ld_cs_slot, ld_cs_row;
  const __nv_bfloat16* graw;  // [T, P]
  int64_t ld_graw;
  const __nv_bfloat16* braw;  // [T, Hk]
  int64_t ld_braw;
  const float* a_log;        // [Hk]
  const float* dt_bias;      // [P]
  __nv_bfloat16 *q, *k, *v;  // [T, Hk, d] conv + SiLU outputs
  int64_t ld_q, ld_k, ld_v;
  float* g;  // [T, Hk, d] log-decay
  int64_t ld_g;
  float* beta;  // [T, Hk]
  int64_t ld_beta;
  const int32_t *seq_token_start, *seq_start_pos, *seq_state_slot, *token_seq;
  // In-step snapshots (prefix caching): sequence s's requests are snaps[j], j in [snap_begin[s],
  // snap_begin[s + 1]); each gets the K-1 pre-conv rows before its pos as its slot's window. Null: none.
  const int32_t* snap_begin;
  const backend::KdaSnapshotRequest* snaps;
  // Replay records (kda_rollback "records"): a sequence with seq_records[s] != 0 keeps its window and has its
  // new pre-conv rows copied to conv_records[slot][j]. Null conv_records: none.
  const int32_t* seq_records;      // [n_seqs]
  __nv_bfloat16* conv_records;     // [n_record_slots, R, 3P]
  int64_t ld_cr_slot, ld_cr_row;
  int n_tokens, proj;  // T, P
  int conv_blocks;     // blockIdx.x < conv_blocks: conv CTAs; the rest: gate CTAs
  int bounded_gate;    // 1: K3 lower_bound * sigmoid(...); 0: Kimi Linear -exp(A_log) softplus(...)
  float lower_bound;
};

// Layout arrays of one kda_attention call, plus the q/k/v/g/beta inputs and the output.
struct AttentionIo {
  const __nv_bfloat16 *q, *k, *v;  // [T, Hk, d]
  int64_t ld_q, ld_k, ld_v;
  const float* g;  // [T, Hk, d]
  int64_t ld_g;
  const float* beta;  // [T, Hk]
  int64_t ld_beta;
  float* state;  // [n_slots, Hk, d_k, d_v] fp32
  int64_t ld_state_slot, ld_state_head;
  __nv_bfloat16* out;  // [T, Hk, d]
  int64_t ld_out;
  const int32_t *seq_token_start, *seq_start_pos, *seq_state_slot;
  // In-step snapshots (prefix caching): sequence s also writes its state after absolute position
  // snaps[j].pos into slot snaps[j].slot, j in [snap_begin[s], snap_begin[s + 1]). Null: none asked for.
  const int32_t* snap_begin;
  const backend::KdaSnapshotRequest* snaps;
  // Replay records (kda_rollback "records"): a sequence with seq_records[s] != 0 (recurrent kernel: kda.cc
  // raises recurrent_max to the records' R) leaves its slot's state as it was and writes records[slot][j][h] =
  // (beta k̂, alpha, e) for its token j and head h. Null records: none.
  const int32_t* seq_records;  // [n_seqs]
  float* records;              // [n_record_slots, R, Hk, 3, d] contiguous
  int64_t ld_rec_slot, ld_rec_token;
  int n_tokens, n_seqs, n_heads;
  // Sequences with 1 <= n_new <= recurrent_max take the recurrent kernel, the others the chunked path.
  int recurrent_max;
};

// kda_fold (fold.cu): one CTA per (fold, head) folds n_tokens[i] records into slot slots[i]'s state and
// moves its conv window on.
struct FoldParams {
  const float* records;                  // [n_record_slots, R, Hk, 3, d] contiguous
  int64_t ld_rec_slot, ld_rec_token;
  const __nv_bfloat16* conv_records;     // [n_record_slots, R, 3P]
  int64_t ld_cr_slot, ld_cr_row;
  float* state;                          // [n_slots, Hk, d_k, d_v]
  int64_t ld_state_slot, ld_state_head;
  __nv_bfloat16* conv_state;             // [n_slots, K-1, 3P]
  int64_t ld_cs_slot, ld_cs_row;
  const int32_t *slots, *n_tokens;       // [n]
  int n_folds, n_heads, n_record_slots, max_tokens;  // n, Hk, records' slots, R
  int proj;                              // P
};

// The fused decode step (decode_fused.cu): every sequence brings one token; one CTA per (sequence, head).
struct DecodeParams {
  const __nv_bfloat16* qkv;  // [T, 3P] pre-conv q | k | v
  int64_t ld_qkv;
  const __nv_bfloat16 *fa, *ga;  // [T, d] f_a(u), g_a(u) (ga unused with a given gate)
  int64_t ld_fa, ld_ga;
  const __nv_bfloat16 *f_b, *g_b;  // [P, d] weights; g_b null: the gate is given
  int64_t ld_f_b, ld_g_b;
  const __nv_bfloat16* gate;  // [T, P] the given output gate (K3), else unused
  int64_t ld_gate;
  const __nv_bfloat16* braw;  // [T, Hk]
  int64_t ld_braw;
  const float* conv_w;        // [3P, K]
  __nv_bfloat16* conv_state;  // [n_slots, K-1, 3P]
  int64_t ld_cs_slot, ld_cs_row;
  const float *a_log, *dt_bias, *o_norm;  // [Hk], [P], [d]
  float* state;                           // [n_slots, Hk, d_k, d_v]
  int64_t ld_state_slot, ld_state_head;
  __nv_bfloat16* out;  // [T, P]
  int64_t ld_out;
  const int32_t *seq_token_start, *seq_start_pos, *seq_state_slot;
  int n_heads;
  int bounded_gate;
  float lower_bound, eps;
};

// Chunk plan written by chunk_plan.cu into scratch: the prefill (n_new > 1) sequences and their chunks.
struct ChunkPlan {
  int32_t* counts;          // [2]: prefill sequences, chunks
  int32_t* pf_seq;          // [n_seqs] sequence index of the k-th prefill sequence
  int32_t* pf_chunk_first;  // [n_seqs + 1] first chunk id of the k-th prefill sequence
  int2* chunk_info;         // [max_chunks] (sequence, chunk within the sequence) of each chunk id
};

// Per-token products of the intra-chunk phase (scratch, head-major so a (head, chunk) tile is contiguous).
struct ChunkScratch {
  __nv_bfloat16* w;    // [Hk, T, d]  (I+L)^-1 (beta * exp(Γ) * k̂)
  __nv_bfloat16* u;    // [Hk, T, d]  (I+L)^-1 (beta * v)
  __nv_bfloat16* qg;   // [Hk, T, d]  q̂ * exp(Γ)
  __nv_bfloat16* kd;   // [Hk, T, d]  k̂ * exp(Γ_last - Γ)
  __nv_bfloat16* aqk;  // [Hk, T, C]  row i: q̂_i . (k̂_j exp(Γ_i - Γ_j)) for j <= i in its chunk, 0 above
  float* gamma;        // [max_chunks, Hk, d]  exp(Γ_last) of each chunk
};

struct ChunkParams {
  AttentionIo io;
  ChunkPlan plan;
  ChunkScratch s;
};

}  // namespace rill::cuda::kda
