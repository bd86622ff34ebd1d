// The MLA prefill attention of one expansion group through cuDNN's fused attention (cudnn_sdpa.h): the
// group's prefill sequences in calls of up to kSdpaMaxBatch, each call's shape bucketed so few plans serve
// every step. All plans are looked up (or built) before anything is enqueued, so a shape cuDNN refuses leaves
// the group to rill's flash kernel whole (mla_prefill=auto) or fails the step (mla_prefill=cudnn).
#include <algorithm>
#include <cstdint>
#include <limits>
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
};

// The shape and batch arrays of sequences [first, last) of `seqs`; false when an element offset overflows the
// int32 ragged offsets (a context of ~256K rows at 32 heads).
bool make_call(const std::vector<SeqRows>& seqs, size_t first, size_t last,
               const backend::MlaAttentionArgs& a, Call* c) {
  const int H = a.n_heads;
  const int64_t q_row = a.q.stride(0), out_row = a.out.stride(0), k_row = int64_t(H) * kQk,
                v_row = int64_t(H) * kKvbRows;
  const int n = int(last - first);
  int max_q = 0, max_kv = 0;
  for (size_t i = first; i < last; ++i) {
    max_q = std::max(max_q, seqs[i].n_new);
    max_kv = std::max(max_kv, seqs[i].ctx);
  }
  c->shape = SdpaShape{.n_heads = H,
                       .batch = sdpa_bucket(n, 1),
                       .max_q = sdpa_bucket(max_q, 64),
                       .max_kv = sdpa_bucket(max_kv, 64),
                       .q_row = q_row,
                       .q_head = a.q.stride(1),
                       .out_row = out_row};
  c->batch = {};
  const SeqRows& end = seqs[last - 1];
  const int64_t end_offs[4] = {int64_t(end.token_start + end.n_new) * q_row,
                               int64_t(end.row + end.ctx) * k_row, int64_t(end.row + end.ctx) * v_row,
                               int64_t(end.token_start + end.n_new) * out_row};
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const int64_t o : end_offs)
    if (o > kMax) return false;
  for (int b = 0; b <= c->shape.batch; ++b) {
    const bool real = b < n;
    const SeqRows* s = real ? &seqs[first + size_t(b)] : nullptr;
    if (b < c->shape.batch) {
      c->batch.a[kSdpaSeqQ][b] = real ? s->n_new : 0;  // padding entries attend nothing
      c->batch.a[kSdpaSeqKv][b] = real ? s->ctx : 0;
    }
    c->batch.a[kSdpaOffQ][b] = int32_t(real ? int64_t(s->token_start) * q_row : end_offs[0]);
    c->batch.a[kSdpaOffK][b] = int32_t(real ? int64_t(s->row) * k_row : end_offs[1]);
    c->batch.a[kSdpaOffV][b] = int32_t(real ? int64_t(s->row) * v_row : end_offs[2]);
    c->batch.a[kSdpaOffO][b] = int32_t(real ? int64_t(s->token_start) * out_row : end_offs[3]);
  }
  return true;
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
    Call c;
    if (!make_call(seqs, first, std::min(seqs.size(), first + kSdpaMaxBatch), a, &c)) {
      if (strict)
        return invalid_argument(
            "mla_attention (CUDA, mla_prefill=cudnn): context offsets overflow cuDNN's int32 "
            "ragged offsets");
      return false;
    }
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
  const SdpaArgs args{
      .q = a.q.data, .k = g.k, .v = g.kvx + kNope, .out = a.out.data, .arrays = g.arrays, .scale = a.scale};
  for (const Call& c :
       calls) {  // one batch-array slot: each call's arrays are written after the last call read
    RILL_TRY(launch_sdpa_batch(c.batch, g.arrays, cx.stream));
    RILL_TRY(cx.mla_sdpa->run(c.shape, args, cx.stream));
  }
  return true;
}

}  // namespace rill::cuda::mla
