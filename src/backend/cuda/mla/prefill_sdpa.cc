// The MLA prefill attention of one expansion group through cuDNN's fused attention (cudnn_sdpa.h): the
// group's prefill sequences in calls of up to kSdpaMaxBatch, each call's shape bucketed so few plans serve
// every step. All plans are looked up (or built) before anything is enqueued, so a shape cuDNN refuses leaves
// the group to rill's flash kernel whole (mla_prefill=auto) or fails the step (mla_prefill=cudnn).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/common/check.h"
#include "backend/cuda/mla/cudnn_sdpa.h"
#include "backend/cuda/mla/phases.h"
#include "core/log.h"

namespace rill::cuda::mla {
namespace {

// One prefill sequence of the group: its tokens and its context rows (relative to the group's first row).
struct SeqRows {
  int token_start, n_new, row, ctx;
};

// The group's prefill sequences, in the order (and with the row offsets) of make_plan's expansion groups.
std::vector<SeqRows> group_sequences(const backend::BatchLayoutHost& h, const ExpandGroup& g, int n_heads) {
  std::vector<SeqRows> out;
  int row = 0;
  for (int s = 0; s < h.n_seqs(); ++s) {
    const SeqWork w = seq_work(h.seq_start_pos[s], h.n_new(s), n_heads, kMinTilesPerSplit);
    if (w.pf_rows == 0) continue;
    if (row >= g.row_begin && row < g.row_end)
      out.push_back({h.seq_token_start[s], h.n_new(s), row - g.row_begin, w.pf_rows});
    row += w.pf_rows;
  }
  return out;
}

struct Call {
  SdpaShape shape;
  SdpaBatch batch;
  // Element offsets of the call's first sequence: its first query row in q and out, its first context row
  // in K and V.
  int64_t q_base = 0, out_base = 0, k_base = 0, v_base = 0;
};

// The shape and batch arrays of sequences [first, last) of `seqs`. Offsets are int64 elements relative to the
// call's first sequence (q / out from its first token, K / V from the group's first row, where its first
// sequence starts), so entry 0 starts at offset 0. The bucketed lengths also cover the span every batch
// entry's rows lie in (B * max_q >= the call's query rows, decode tokens between its sequences included; B *
// max_kv >= its context rows): the tensors' dims then bound every row the offsets reach, whatever extent
// cuDNN's kernels derive from them.
Call make_call(const std::vector<SeqRows>& seqs, size_t first, size_t last,
               const backend::MlaAttentionArgs& a) {
  const int H = a.n_heads;
  const int64_t q_row = a.q.stride(0), out_row = a.out.stride(0), k_row = int64_t(H) * kQk,
                v_row = int64_t(H) * kKvbRows;
  const int n = int(last - first);
  const int batch = sdpa_bucket(n, 1);
  const SeqRows& s0 = seqs[first];
  const SeqRows& end = seqs[last - 1];
  int max_q = 0, max_kv = 0;
  for (size_t i = first; i < last; ++i) {
    max_q = std::max(max_q, seqs[i].n_new);
    max_kv = std::max(max_kv, seqs[i].ctx);
  }
  const int span_q = end.token_start + end.n_new - s0.token_start, span_kv = end.row + end.ctx - s0.row;
  max_q = std::max(max_q, (span_q + batch - 1) / batch);
  max_kv = std::max(max_kv, (span_kv + batch - 1) / batch);
  Call c;
  c.shape = SdpaShape{.n_heads = H,
                      .batch = batch,
                      .max_q = sdpa_bucket(max_q, 64),
                      .max_kv = sdpa_bucket(max_kv, 64),
                      .q_row = q_row,
                      .q_head = a.q.stride(1),
                      .out_row = out_row};
  c.q_base = int64_t(s0.token_start) * q_row;
  c.out_base = int64_t(s0.token_start) * out_row;
  c.k_base = int64_t(s0.row) * k_row;
  c.v_base = int64_t(s0.row) * v_row;
  c.batch = {};
  for (int b = 0; b <= batch; ++b) {
    const bool real = b < n;
    // Padding entries attend nothing and start where the last real one ends.
    const SeqRows& s = real ? seqs[first + size_t(b)] : end;
    const int64_t tok = real ? s.token_start - s0.token_start : span_q;
    const int64_t row = real ? s.row - s0.row : span_kv;
    if (b < batch) {
      c.batch.len[kSdpaSeqQ][b] = real ? s.n_new : 0;
      c.batch.len[kSdpaSeqKv][b] = real ? s.ctx : 0;
    }
    c.batch.off[kSdpaOffQ][b] = tok * q_row;
    c.batch.off[kSdpaOffK][b] = row * k_row;
    c.batch.off[kSdpaOffV][b] = row * v_row;
    c.batch.off[kSdpaOffO][b] = tok * out_row;
    c.batch.off[kSdpaOffStats][b] = tok * H;
  }
  return c;
}

}  // namespace

Result<bool> run_prefill_sdpa(const SdpaGroupArgs& g, const CudaContext& cx) {
  const backend::MlaAttentionArgs& a = *g.a;
  const bool strict = cx.options.mla_prefill == backend::MlaPrefillPath::Cudnn;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RILL_CUDA_CHECK(cudaStreamIsCapturing(cx.stream, &capture));
  // Prefill steps are not captured (the runner graphs decode steps only); should one be, cuDNN's plan
  // lookups, workspace growth and host-built batch arrays stay out of the graph.
  if (capture != cudaStreamCaptureStatusNone) return false;

  const std::vector<SeqRows> seqs = group_sequences(*a.layout->host, *g.group, a.n_heads);
  if (seqs.empty()) return true;
  std::vector<Call> calls;
  for (size_t first = 0; first < seqs.size(); first += kSdpaMaxBatch) {
    const Call c = make_call(seqs, first, std::min(seqs.size(), first + kSdpaMaxBatch), a);
    const Status st = cx.mla_sdpa->prepare(c.shape);
    if (!st.ok()) {
      if (strict) return st;
      return false;  // auto: rill's kernel (prepare logged the refusal once for this shape)
    }
    calls.push_back(c);
  }

  const int rows = g.group->row_end - g.group->row_begin;
  RILL_TRY(launch_k_build(
      KBuildParams{.kvx = g.kvx, .ctx = g.ctx, .k = g.k, .rows = rows, .n_heads = a.n_heads}, cx.stream));
  char* arrays = static_cast<char*>(g.arrays);
  const auto* off = reinterpret_cast<const int64_t*>(arrays + offsetof(SdpaBatch, off));
  const auto* len = reinterpret_cast<const int32_t*>(arrays + offsetof(SdpaBatch, len));
  for (const Call& c :
       calls) {  // one batch-array slot: each call's arrays are written after the last call read
    RILL_TRY(launch_sdpa_batch(c.batch, g.arrays, cx.stream));
    // K / V from the first context row of the call's first sequence, q / out from its first token.
    const SdpaArgs args{.q = static_cast<const bf16*>(a.q.data) + c.q_base,
                        .k = g.k + c.k_base,
                        .v = g.kvx + kNope + c.v_base,
                        .out = static_cast<bf16*>(a.out.data) + c.out_base,
                        .stats = g.stats,
                        .seq_q = len + kSdpaSeqQ * kSdpaArrStride,
                        .seq_kv = len + kSdpaSeqKv * kSdpaArrStride,
                        .off_q = off + kSdpaOffQ * kSdpaArrStride,
                        .off_k = off + kSdpaOffK * kSdpaArrStride,
                        .off_v = off + kSdpaOffV * kSdpaArrStride,
                        .off_o = off + kSdpaOffO * kSdpaArrStride,
                        .off_stats = off + kSdpaOffStats * kSdpaArrStride,
                        .scale = a.scale};
    RILL_TRY(cx.mla_sdpa->run(c.shape, args, cx.stream));
  }
  return true;
}

}  // namespace rill::cuda::mla
