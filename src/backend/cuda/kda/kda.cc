// KDA launchers: validate the call, fill the parameter blocks and run the phases on the compute stream.
// kda_attention: the recurrent step over single-token sequences, then (when any sequence has n_new > 1) the
// chunk plan, the intra-chunk phase and the inter-chunk recurrence over the others. Scratch (chunk path only)
// is sized from the token count, head count and sequence count alone, so the worst-case planning pass bounds it.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/kda/config.h"
#include "backend/cuda/kda/kda.h"
#include "backend/cuda/kda/phases.h"

namespace rill::cuda {
namespace kda {

namespace {

// Byte offsets of the chunk-path scratch regions.
struct ScratchLayout {
  int64_t max_chunks = 0;
  size_t counts = 0, pf_seq = 0, pf_chunk_first = 0, chunk_info = 0, gamma = 0, w = 0, u = 0, qg = 0, kd = 0,
         aqk = 0, bytes = 0;
};

ScratchLayout scratch_layout(int64_t T, int64_t H, int64_t n_seqs) {
  ScratchLayout s;
  if (T < 2) return s;  // no sequence can take the chunked path
  // Chunks of the prefill sequences: sum ceil(n/64) <= T/64 + (number of sequences with n >= 2).
  s.max_chunks = T / kChunk + std::min(n_seqs, T / 2);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t o = off;
    off += align256(bytes);
    return o;
  };
  s.counts = take(4 * sizeof(int32_t));
  s.pf_seq = take(size_t(n_seqs) * sizeof(int32_t));
  s.pf_chunk_first = take(size_t(n_seqs + 1) * sizeof(int32_t));
  s.chunk_info = take(size_t(s.max_chunks) * 2 * sizeof(int32_t));
  s.gamma = take(size_t(s.max_chunks) * H * kHeadDim * sizeof(float));
  const size_t per_tok = size_t(H) * T * kHeadDim * 2;  // bf16 [Hk, T, d]
  s.w = take(per_tok);
  s.u = take(per_tok);
  s.qg = take(per_tok);
  s.kd = take(per_tok);
  s.aqk = take(size_t(H) * T * kChunk * 2);
  s.bytes = off;
  return s;
}

// Rows of a [T, Hk, d] (or [T, X]) tensor: contiguous inside, 16-byte aligned starts.
Status check_rows(const TensorView& t, const char* op, const char* name, DType dtype) {
  if (t.dtype != dtype)
    return invalid_argument("{}: {} must be {}, got {}", op, name, dtype_name(dtype), t.describe());
  const int r = t.rank();
  int64_t inner = 1;
  for (int i = r - 1; i >= 1; --i) {
    if (t.size(i) > 1 && t.stride(i) != inner)
      return invalid_argument("{}: {} {} must be contiguous within a row", op, name, t.describe());
    inner *= t.size(i);
  }
  const int64_t vec = 16 / int64_t(dtype_size(dtype));
  if (!aligned16(t.data) || (t.size(0) > 1 && t.stride(0) % vec))
    return invalid_argument("{}: {} {} rows must be 16-byte aligned", op, name, t.describe());
  return {};
}

// The per-slot caches the kernels read and write in place: the conv window ([slot][K-1][3P] bf16 rows, 16-byte
// aligned) and the recurrent state ([slot][head][d_k][d_v] fp32, contiguous aligned blocks).
Status check_conv_state(const TensorView& t, const char* op) {
  if (t.dtype != DType::BF16 || t.stride(2) != 1 || !aligned16(t.data) || t.stride(0) % 8 || t.stride(1) % 8)
    return invalid_argument("{}: conv_state must be BF16 with 16-byte aligned contiguous rows, got {}", op,
                            t.describe());
  return {};
}
Status check_state(const TensorView& t, const char* op) {
  if (t.stride(3) != 1 || t.stride(2) != kHeadDim || !aligned16(t.data) || t.stride(0) % 4 || t.stride(1) % 4)
    return invalid_argument("{}: state {} must hold contiguous, aligned [d_k, d_v] blocks", op, t.describe());
  return {};
}
Status check_braw(const TensorView& t, const char* op) {
  if (t.dtype != DType::BF16 || t.stride(1) != 1)
    return invalid_argument("{}: braw must be BF16 with contiguous rows, got {}", op, t.describe());
  return {};
}

}  // namespace
}  // namespace kda

Status launch_kda_prepare(const backend::KdaPrepareArgs& a, const CudaContext& cx) {
  using namespace kda;
  const char* op = "kda_prepare (CUDA)";
  if (a.head_dim != kHeadDim)
    return invalid_argument("{}: head_dim {} unsupported (kernels are built for {})", op, a.head_dim,
                            kHeadDim);
  if (a.conv_weight.size(1) != kConvTaps)
    return invalid_argument("{}: conv kernel {} unsupported (kernels are built for {})", op,
                            a.conv_weight.size(1), kConvTaps);
  RILL_TRY(check_rows(a.qkv, op, "qkv", DType::BF16));
  RILL_TRY(check_rows(a.graw, op, "graw", DType::BF16));
  RILL_TRY(check_rows(a.q, op, "q", DType::BF16));
  RILL_TRY(check_rows(a.k, op, "k", DType::BF16));
  RILL_TRY(check_rows(a.v, op, "v", DType::BF16));
  RILL_TRY(check_rows(a.g, op, "g", DType::F32));
  RILL_TRY(check_braw(a.braw, op));
  if (a.beta.stride(1) != 1)
    return invalid_argument("{}: beta {} rows must be contiguous", op, a.beta.describe());
  RILL_TRY(check_conv_state(a.conv_state, op));
  if (!a.conv_weight.is_contiguous() || !aligned16(a.conv_weight.data) || !a.dt_bias.is_contiguous() ||
      !aligned16(a.dt_bias.data) || !a.a_log.is_contiguous())
    return invalid_argument("{}: conv_weight, dt_bias and a_log must be contiguous and aligned", op);
  const backend::BatchLayout& l = *a.layout;
  if (l.n_tokens == 0) return {};

  PrepareParams p{};
  const auto bf = [](const TensorView& t) { return static_cast<__nv_bfloat16*>(t.data); };
  p.qkv = bf(a.qkv);
  p.ld_qkv = a.qkv.stride(0);
  p.conv_w = a.conv_weight.ptr<float>();
  p.conv_state = bf(a.conv_state);
  p.ld_cs_slot = a.conv_state.stride(0);
  p.ld_cs_row = a.conv_state.stride(1);
  p.graw = bf(a.graw);
  p.ld_graw = a.graw.stride(0);
  p.braw = bf(a.braw);
  p.ld_braw = a.braw.stride(0);
  p.a_log = a.a_log.ptr<float>();
  p.dt_bias = a.dt_bias.ptr<float>();
  p.q = bf(a.q), p.k = bf(a.k), p.v = bf(a.v);
  p.ld_q = a.q.stride(0), p.ld_k = a.k.stride(0), p.ld_v = a.v.stride(0);
  p.g = a.g.ptr<float>();
  p.ld_g = a.g.stride(0);
  p.beta = a.beta.ptr<float>();
  p.ld_beta = a.beta.stride(0);
  p.seq_token_start = l.seq_token_start;
  p.seq_start_pos = l.seq_start_pos;
  p.seq_state_slot = l.seq_state_slot;
  p.token_seq = l.token_seq;
  // Backend::kda_prepare checked each request's rows and slot on the host.
  p.snap_begin = l.kda_snapshots.seq_begin;
  p.snaps = l.kda_snapshots.requests;
  if (!a.conv_records.empty()) {  // Backend::kda_prepare checked the marked sequences fit
    if (a.conv_records.stride(2) != 1 || !aligned16(a.conv_records.data) || a.conv_records.stride(0) % 8 ||
        a.conv_records.stride(1) % 8)
      return invalid_argument("{}: conv_records must have 16-byte aligned contiguous rows, got {}", op,
                              a.conv_records.describe());
    p.seq_records = l.seq_kda_records;
    p.conv_records = bf(a.conv_records);
    p.ld_cr_slot = a.conv_records.stride(0);
    p.ld_cr_row = a.conv_records.stride(1);
  }
  p.n_tokens = l.n_tokens;
  p.proj = a.n_heads * a.head_dim;
  const int per_block = kPrepThreads * kPrepVec;
  p.conv_blocks = (3 * p.proj + per_block - 1) / per_block;
  p.bounded_gate = a.gate_lower_bound.has_value() ? 1 : 0;
  p.lower_bound = a.gate_lower_bound.value_or(0.0f);
  return launch_prepare(p, cx.stream);
}

size_t kda_attention_scratch_bytes(const backend::KdaAttentionArgs& a) {
  if (!a.layout || a.q.rank() != 3) return 0;
  return kda::scratch_layout(a.q.size(0), a.q.size(1), a.layout->n_seqs).bytes;
}

Status launch_kda_attention(const backend::KdaAttentionArgs& a, const CudaContext& cx) {
  using namespace kda;
  const char* op = "kda_attention (CUDA)";
  if (a.q.size(2) != kHeadDim)
    return invalid_argument("{}: head dim {} unsupported (kernels are built for {})", op, a.q.size(2),
                            kHeadDim);
  RILL_TRY(check_rows(a.q, op, "q", DType::BF16));
  RILL_TRY(check_rows(a.k, op, "k", DType::BF16));
  RILL_TRY(check_rows(a.v, op, "v", DType::BF16));
  RILL_TRY(check_rows(a.out, op, "out", DType::BF16));
  RILL_TRY(check_rows(a.g, op, "g", DType::F32));
  if (a.beta.stride(1) != 1)
    return invalid_argument("{}: beta {} rows must be contiguous", op, a.beta.describe());
  RILL_TRY(check_state(a.state, op));
  const backend::BatchLayout& l = *a.layout;
  if (l.n_tokens == 0) return {};
  if (!l.host) return invalid_argument("{}: layout has no host description", op);

  // Snapshot requests are checked here, on the host: the kernel writes where they point.
  if (l.kda_snapshots.n > 0) {
    const backend::BatchLayoutHost& h = *l.host;
    const backend::KdaSnapshotsHost& snaps = h.kda_snapshots;
    for (int s = 0; s < h.n_seqs(); ++s)
      for (int j = snaps.seq_begin[size_t(s)]; j < snaps.seq_begin[size_t(s) + 1]; ++j) {
        const backend::KdaSnapshotRequest& r = snaps.requests[size_t(j)];
        const int rel = r.pos - h.seq_start_pos[size_t(s)];
        if (rel <= 0 || rel >= h.n_new(s) || rel % kChunk)
          return internal_error("{}: snapshot after position {} is not a chunk boundary inside sequence {}'s step",
                                op, r.pos, s);
        if (r.slot < 0 || r.slot >= a.state.size(0))
          return internal_error("{}: snapshot slot {} outside [0, {})", op, r.slot, a.state.size(0));
      }
  }

  // Verify-sized sequences take the recurrent kernel: on the H200 (2026-12-05, rill bench, 48B dummy, 4K
  // context) a verify step of k = 1 at batch 1 took 4.12 ms instead of 4.95 through the chunked path, at
  // batch 64 33.7 instead of 42.2 (docs/PERF.md). CudaBackendOptions::kda_recurrent_verify off sends them
  // down the chunked path again (tests of that path; comparisons). The scratch size covers either choice.
  // Replay records are written by the recurrent kernel only: with a record buffer every sequence of up to its
  // R tokens takes that kernel (Backend::kda_attention checked the marked ones fit), whether marked or not, so
  // which kernels run depends on the counts alone and a captured graph replays any marking.
  const bool records = !a.records.empty();
  const int recurrent_max = std::max(cx.options.kda_recurrent_verify ? kRecurrentMaxTokens : 1,
                                     records ? int(a.records.size(1)) : 0);
  int n_recurrent = 0, n_prefill = 0, n_chunks = 0;
  for (int s = 0; s < l.host->n_seqs(); ++s) {
    const int n = l.host->n_new(s);
    if (n >= 1 && n <= recurrent_max)
      ++n_recurrent;
    else if (n > recurrent_max)
      ++n_prefill, n_chunks += (n + kChunk - 1) / kChunk;
  }

  ChunkParams p{};
  AttentionIo& io = p.io;
  io.q = static_cast<const __nv_bfloat16*>(a.q.data);
  io.k = static_cast<const __nv_bfloat16*>(a.k.data);
  io.v = static_cast<const __nv_bfloat16*>(a.v.data);
  io.ld_q = a.q.stride(0), io.ld_k = a.k.stride(0), io.ld_v = a.v.stride(0);
  io.g = a.g.ptr<float>();
  io.ld_g = a.g.stride(0);
  io.beta = a.beta.ptr<float>();
  io.ld_beta = a.beta.stride(0);
  io.state = a.state.ptr<float>();
  io.ld_state_slot = a.state.stride(0);
  io.ld_state_head = a.state.stride(1);
  io.out = static_cast<__nv_bfloat16*>(a.out.data);
  io.ld_out = a.out.stride(0);
  io.seq_token_start = l.seq_token_start;
  io.seq_start_pos = l.seq_start_pos;
  io.seq_state_slot = l.seq_state_slot;
  io.snap_begin = l.kda_snapshots.seq_begin;
  io.snaps = l.kda_snapshots.requests;
  io.n_tokens = l.n_tokens;
  io.n_seqs = l.n_seqs;
  io.n_heads = int(a.q.size(1));
  io.recurrent_max = recurrent_max;
  if (records) {
    io.seq_records = l.seq_kda_records;
    io.records = a.records.ptr<float>();
    io.ld_rec_slot = a.records.stride(0);
    io.ld_rec_token = a.records.stride(1);
  }

  RILL_TRY(launch_recurrent_step(io, n_recurrent, cx));

  const ScratchLayout sl = scratch_layout(a.q.size(0), a.q.size(1), l.n_seqs);
  if (sl.bytes == 0) return {};
  if (!a.scratch) {
    if (n_prefill == 0) return {};
    return internal_error("{}: needs {} scratch bytes but has no arena", op, sl.bytes);
  }
  if (n_chunks > sl.max_chunks)
    return internal_error("{}: {} chunks exceed the bound {}", op, n_chunks, sl.max_chunks);
  const size_t mark = a.scratch->used();
  char* base = static_cast<char*>(a.scratch->alloc(DType::U8, {int64_t(sl.bytes)}).data);
  if (n_prefill > 0) {
    p.plan.counts = reinterpret_cast<int32_t*>(base + sl.counts);
    p.plan.pf_seq = reinterpret_cast<int32_t*>(base + sl.pf_seq);
    p.plan.pf_chunk_first = reinterpret_cast<int32_t*>(base + sl.pf_chunk_first);
    p.plan.chunk_info = reinterpret_cast<int2*>(base + sl.chunk_info);
    p.s.gamma = reinterpret_cast<float*>(base + sl.gamma);
    p.s.w = reinterpret_cast<__nv_bfloat16*>(base + sl.w);
    p.s.u = reinterpret_cast<__nv_bfloat16*>(base + sl.u);
    p.s.qg = reinterpret_cast<__nv_bfloat16*>(base + sl.qg);
    p.s.kd = reinterpret_cast<__nv_bfloat16*>(base + sl.kd);
    p.s.aqk = reinterpret_cast<__nv_bfloat16*>(base + sl.aqk);
    Status st = launch_chunk_plan(p, cx.stream);
    if (st.ok()) st = launch_chunk_intra(p, n_chunks, cx);
    if (st.ok()) st = launch_chunk_recurrence(p, n_prefill, cx);
    if (!st.ok()) {
      a.scratch->release_to(mark);
      return st;
    }
  }
  a.scratch->release_to(mark);  // stream-ordered: later users of this scratch run after these kernels
  return {};
}

Status launch_kda_fold(const backend::KdaFoldArgs& a, const CudaContext& cx) {
  using namespace kda;
  const char* op = "kda_fold (CUDA)";
  if (a.state.size(2) != kHeadDim)
    return invalid_argument("{}: head dim {} unsupported (kernels are built for {})", op, a.state.size(2), kHeadDim);
  if (a.conv_state.size(1) != kConvTaps - 1)
    return invalid_argument("{}: conv window of {} rows unsupported (kernels are built for {})", op,
                            a.conv_state.size(1), kConvTaps - 1);
  if (a.conv_state.size(2) != 3 * a.state.size(1) * kHeadDim)
    return invalid_argument("{}: conv_state {} is not q | k | v of {} heads", op, a.conv_state.describe(),
                            a.state.size(1));
  RILL_TRY(check_state(a.state, op));
  RILL_TRY(check_conv_state(a.conv_state, op));
  if (a.conv_records.stride(2) != 1 || !aligned16(a.conv_records.data) || a.conv_records.stride(0) % 8 ||
      a.conv_records.stride(1) % 8 || !aligned16(a.records.data))
    return invalid_argument("{}: records and conv_records must be 16-byte aligned with contiguous rows", op);
  FoldParams p{};
  p.records = a.records.ptr<float>();
  p.ld_rec_slot = a.records.stride(0);
  p.ld_rec_token = a.records.stride(1);
  p.conv_records = static_cast<const __nv_bfloat16*>(a.conv_records.data);
  p.ld_cr_slot = a.conv_records.stride(0);
  p.ld_cr_row = a.conv_records.stride(1);
  p.state = a.state.ptr<float>();
  p.ld_state_slot = a.state.stride(0);
  p.ld_state_head = a.state.stride(1);
  p.conv_state = static_cast<__nv_bfloat16*>(a.conv_state.data);
  p.ld_cs_slot = a.conv_state.stride(0);
  p.ld_cs_row = a.conv_state.stride(1);
  p.slots = a.slots.ptr<int32_t>();
  p.n_tokens = a.n_tokens.ptr<int32_t>();
  p.n_folds = int(a.slots.size(0));
  p.n_heads = int(a.state.size(1));
  p.n_record_slots = int(a.records.size(0));
  p.max_tokens = int(a.records.size(1));
  p.proj = int(a.state.size(1)) * kHeadDim;
  return launch_fold(p, cx.stream);
}

bool kda_decode_fusable(const backend::KdaDecodeArgs& a) {
  using namespace kda;
  const auto dense_bf16 = [](const backend::LinearWeight* w) {
    return w && w->format == backend::WeightFormat::Dense && w->weight.dtype == DType::BF16 &&
           w->weight.stride(1) == 1 && w->weight.stride(0) % 8 == 0 && aligned16(w->weight.data);
  };
  return a.head_dim == kHeadDim && a.conv_weight.size(1) == kConvTaps && dense_bf16(a.f_b) &&
         (a.g_b == nullptr || dense_bf16(a.g_b)) && a.qkv.dtype == DType::BF16 && a.out.dtype == DType::BF16;
}

bool kda_decode_fusion_pays(int n_seqs, int n_heads, const CudaContext& cx) {
  return n_seqs >= 2 || kda::decode_fused_splits(n_seqs, n_heads, cx.sm_count);
}

Status launch_kda_decode(const backend::KdaDecodeArgs& a, const CudaContext& cx) {
  using namespace kda;
  const char* op = "kda_decode (CUDA)";
  if (!kda_decode_fusable(a)) return invalid_argument("{}: arguments the fused kernel does not take", op);
  RILL_TRY(check_rows(a.qkv, op, "qkv", DType::BF16));
  RILL_TRY(check_rows(a.fa, op, "fa", DType::BF16));
  RILL_TRY(check_rows(a.out, op, "out", DType::BF16));
  if (a.g_b)
    RILL_TRY(check_rows(a.ga, op, "ga", DType::BF16));
  else
    RILL_TRY(check_rows(a.gate, op, "gate", DType::BF16));
  RILL_TRY(check_braw(a.braw, op));
  RILL_TRY(check_conv_state(a.conv_state, op));
  RILL_TRY(check_state(a.state, op));
  if (!a.conv_weight.is_contiguous() || !aligned16(a.conv_weight.data) || !a.dt_bias.is_contiguous() ||
      !a.a_log.is_contiguous() || !a.o_norm.is_contiguous())
    return invalid_argument("{}: conv_weight, dt_bias, a_log and o_norm must be contiguous and aligned", op);
  const backend::BatchLayout& l = *a.layout;
  DecodeParams p{};
  const auto bf = [](const TensorView& t) { return static_cast<__nv_bfloat16*>(t.data); };
  p.qkv = bf(a.qkv);
  p.ld_qkv = a.qkv.stride(0);
  p.fa = bf(a.fa);
  p.ld_fa = a.fa.stride(0);
  p.f_b = bf(a.f_b->weight);
  p.ld_f_b = a.f_b->weight.stride(0);
  if (a.g_b) {
    p.ga = bf(a.ga);
    p.ld_ga = a.ga.stride(0);
    p.g_b = bf(a.g_b->weight);
    p.ld_g_b = a.g_b->weight.stride(0);
  } else {
    p.gate = bf(a.gate);
    p.ld_gate = a.gate.stride(0);
  }
  p.braw = bf(a.braw);
  p.ld_braw = a.braw.stride(0);
  p.conv_w = a.conv_weight.ptr<float>();
  p.conv_state = bf(a.conv_state);
  p.ld_cs_slot = a.conv_state.stride(0);
  p.ld_cs_row = a.conv_state.stride(1);
  p.a_log = a.a_log.ptr<float>();
  p.dt_bias = a.dt_bias.ptr<float>();
  p.o_norm = a.o_norm.ptr<float>();
  p.state = a.state.ptr<float>();
  p.ld_state_slot = a.state.stride(0);
  p.ld_state_head = a.state.stride(1);
  p.out = bf(a.out);
  p.ld_out = a.out.stride(0);
  p.seq_token_start = l.seq_token_start;
  p.seq_start_pos = l.seq_start_pos;
  p.seq_state_slot = l.seq_state_slot;
  p.n_heads = a.n_heads;
  p.bounded_gate = a.gate_lower_bound.has_value() ? 1 : 0;
  p.lower_bound = a.gate_lower_bound.value_or(0.0f);
  p.eps = a.eps;
  return launch_decode_fused(p, l.n_seqs, cx);
}

}  // namespace rill::cuda
