// Internal launchers of the KDA phases (host-only declarations). kda.cc validates the Args, fills the
// parameter blocks (params.h) and calls them on the compute stream: prepare; then for attention the
// recurrent step over single-token sequences and plan -> intra -> recurrence over multi-token sequences.
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/cuda/common/smem.h"
#include "backend/cuda/context.h"
#include "backend/cuda/kda/params.h"
#include "core/status.h"

namespace rill::cuda::kda {

// Conv + SiLU + window update (conv CTAs) and gate + beta (gate CTAs), 16-token tiles.
Status launch_prepare(const PrepareParams& p, cudaStream_t stream);
// Fused recurrent step for every sequence with 1 <= n_new <= io.recurrent_max (others exit); n_recurrent (their
// count) sizes the column split.
Status launch_recurrent_step(const AttentionIo& io, int n_recurrent, const CudaContext& cx);
// The whole decode step of a layer after its projections, one CTA per (sequence, head), or a cluster of 4 per
// head where decode_fused_splits (decode_fused.cu).
bool decode_fused_splits(int n_seqs, int n_heads, int sm_count);
Status launch_decode_fused(const DecodeParams& p, int n_seqs, const CudaContext& cx);
// Replay records' fold: one CTA per (fold, head) (fold.cu).
Status launch_fold(const FoldParams& p, cudaStream_t stream);
// Lists the prefill sequences and their chunks into p.plan (one CTA).
Status launch_chunk_plan(const ChunkParams& p, cudaStream_t stream);
// Per (chunk, head): Γ, L, Aqk, the unit-lower solve, W, U, Qg, Kd, gamma. n_chunks from the host layout.
Status launch_chunk_intra(const ChunkParams& p, int n_chunks, const CudaContext& cx);
// Per (prefill sequence, head, v block): the inter-chunk recurrence, output and final state.
Status launch_chunk_recurrence(const ChunkParams& p, int n_prefill, const CudaContext& cx);

}  // namespace rill::cuda::kda
