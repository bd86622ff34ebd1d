// KDA kernel constants (spec §3.3): the one head dim the kernels are built for, the chunk, thread counts and
// padded shared-memory row strides (elements). Sizes of the dynamic shared memory are in the .cu files.
#pragma once

namespace rill::cuda::kda {

constexpr int kHeadDim = 128;  // d_k = d_v (both Kimi models; the CPU path handles any d)
constexpr int kConvTaps = 4;   // short causal conv width K
constexpr int kChunk = 64;     // chunked prefill: tokens per chunk (C)
constexpr int kSub = 16;       // intra-chunk sub-block = one mma M tile

// prepare.cu: 8 channels (16 bytes of bf16) per thread, 128 threads, 16-token tiles.
constexpr int kPrepThreads = 128, kPrepVec = 8, kPrepTile = 16;

// recurrent_step.cu: 256 threads own [128 x VB] of one head's state, 4 columns (a float4) each.
constexpr int kStepThreads = 256;
// Sequences of up to this many new tokens (speculative decoding's verify steps, short prompts) also take the
// recurrent kernel, one token after another with the state in registers, instead of the chunked path (unless
// the backend option kda_recurrent_verify=0, kda.cc).
constexpr int kRecurrentMaxTokens = 16;

// chunk_plan.cu: one CTA lists the prefill sequences and their chunks.
constexpr int kPlanThreads = 1024;

// chunk_intra.cu: one CTA per (chunk, head).
constexpr int kIntraThreads = 256;
constexpr int kLdH = kHeadDim + 8;  // bf16 [*, 128] tile row: 272 B, conflict-free ldmatrix
constexpr int kLdG = kHeadDim + 4;  // fp32 cumulative-gate row
constexpr int kLdL = kChunk + 4;    // fp32 L row
// Diagonal sub-blocks are factored around their middle row when every |Γ_i - Γ_mid| (log2 units) stays
// under this bound: factors <= 2^60 and, k̂ and q̂ having norm <= 1, every product sum <= 2^120 (finite in
// fp32). K3's bounded gate (g > -5, 8 steps: < 57.8) always qualifies.
constexpr float kSafeLog2 = 60.0f;

// chunk_recurrence.cu: one CTA per (prefill sequence, head, 32-column block of v), persistent.
constexpr int kRecThreads = 256;
constexpr int kVb = 32;               // v columns per CTA
constexpr int kNvb = kHeadDim / kVb;  // 4 column blocks per head
constexpr int kLdA = kChunk + 8;      // bf16 Aqk row
constexpr int kLdV = kVb + 8;         // bf16 [*, 32] tile row: 80 B, conflict-free ldmatrix

}  // namespace rill::cuda::kda
