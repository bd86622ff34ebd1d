// Attention plan, host side: picks the decode KV split target from the context lengths and the SM count,
// counts every phase's work from layout->host and lays out the scratch. The device plan kernel
// (decode_plan.cu) expands the same integer formula (params.h seq_work) per sequence into scratch, so the run
// kernels read their work from device memory and the launchers upload nothing.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "backend/cuda/common/align.h"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

// The split target minimising the decode makespan estimate: waves of split-KV CTAs (one resident per SM)
// times the longest split plus its fixed cost (Q load, partial write, combine read).
int pick_tiles_per_split(const backend::BatchLayoutHost& h, int n_heads, int sm_count) {
  const int64_t sms = std::max(1, sm_count);
  int64_t total = 0;
  for (int s = 0; s < h.n_seqs(); ++s) {
    const int n_new = h.n_new(s);
    if (n_new > kDecodeMaxNew) continue;
    total += int64_t(ceil_div(n_new * n_heads, kDecRows)) * ceil_div(h.seq_start_pos[s] + n_new, kDecKeys);
  }
  if (total == 0) return kMinTilesPerSplit;
  const int64_t base =
      std::min<int64_t>(std::max<int64_t>(kMinTilesPerSplit, (total + sms - 1) / sms), 1 << 26);
  int best = int(base), prev = -1;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int k = 4; k <= 16; ++k) {
    const int cand = int(base * k / 4);
    if (cand == prev) continue;
    prev = cand;
    int64_t work = 0;
    int longest = 0;
    for (int s = 0; s < h.n_seqs(); ++s) {
      if (h.n_new(s) > kDecodeMaxNew) continue;
      const SeqWork w = seq_work(h.seq_start_pos[s], h.n_new(s), n_heads, cand);
      work += w.dec_work;
      longest = std::max(longest, w.split_keys / kDecKeys);
    }
    const double cost = double((work + sms - 1) / sms) * double(longest + kSplitOverheadTiles);
    if (cost < best_cost) {
      best_cost = cost;
      best = cand;
    }
  }
  return best;
}

// Row cap of one expansion group: kExpandRows unless the backend's options set another.
int expand_rows_cap(const CudaContext& cx) {
  return cx.options.mla_expand_rows > 0 ? cx.options.mla_expand_rows : kExpandRows;
}

}  // namespace

bool prefill_through_cudnn(const backend::MlaAttentionArgs& a, const CudaContext& cx) {
  // Count-only plans are replayed graphs: the cuDNN call's batch arrays come from this step's host layout.
  return cx.mla_sdpa != nullptr && cx.options.mla_prefill != backend::MlaPrefillPath::Rill &&
         !a.layout->host->count_only_plan;
}

Status make_plan(const backend::MlaAttentionArgs& a, const CudaContext& cx, Plan* out) {
  const int sm_count = cx.sm_count;
  const backend::BatchLayoutHost& h = *a.layout->host;
  Plan p;
  p.n_seqs = h.n_seqs();
  p.n_heads = a.n_heads;
  if (h.count_only_plan) {
    // About one wave of split-KV CTAs whatever the contexts turn out to be: SMs / decode row tiles.
    int64_t row_tiles = 0;
    for (int s = 0; s < p.n_seqs; ++s)
      if (h.n_new(s) <= kDecodeMaxNew) row_tiles += ceil_div(h.n_new(s) * a.n_heads, kDecRows);
    p.fixed_splits = int(std::clamp<int64_t>(sm_count / std::max<int64_t>(row_tiles, 1), 1, kMaxFixedSplits));
  }
  p.tiles_per_split = p.fixed_splits > 0 ? kMinTilesPerSplit : pick_tiles_per_split(h, a.n_heads, sm_count);
  int64_t dec_tokens = 0, dec_work = 0, dec_slots = 0, pf_tiles = 0, pf_rows = 0, longest = 0;
  std::vector<SeqWork> works(size_t(p.n_seqs));
  for (int s = 0; s < p.n_seqs; ++s) {
    if (h.n_new(s) < 1 || h.seq_start_pos[s] < 0)
      return invalid_argument("mla_attention (CUDA): sequence {} has start {} and {} new tokens", s,
                              h.seq_start_pos[s], h.n_new(s));
    const SeqWork w = seq_work(h.seq_start_pos[s], h.n_new(s), a.n_heads, p.tiles_per_split, p.fixed_splits);
    works[size_t(s)] = w;
    longest = std::max<int64_t>(longest, w.pf_rows);
    dec_tokens += w.dec_tokens;
    dec_work += w.dec_work;
    dec_slots += w.dec_slots;
    pf_tiles += w.pf_tiles;
    pf_rows += w.pf_rows;
  }
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (dec_work > kMax || dec_slots > kMax || pf_tiles > kMax || pf_rows > kMax ||
      dec_tokens * a.n_heads > kMax)
    return invalid_argument(
        "mla_attention (CUDA): step too large for the int32 plan ({} partial rows, {} context rows)",
        dec_slots, pf_rows);
  p.dec_tokens = int(dec_tokens);
  p.dec_work = int(dec_work);
  p.dec_slots = int(dec_slots);
  p.pf_tiles = int(pf_tiles);
  p.pf_rows = int(pf_rows);
  // Expansion groups: consecutive prefill sequences while their context rows fit the cap. The scratch holds
  // min(pf_rows, cap) rows, a function of the counts that is monotone in them, so the workspace's planning passes
  // (Model::reserve_workspace) bound every step they admit.
  const int64_t cap = std::max<int64_t>(longest, expand_rows_cap(cx));
  p.group_rows = int(std::min<int64_t>(pf_rows, cap));
  int64_t tile = 0, row = 0;
  for (int s = 0; s < p.n_seqs; ++s) {
    const SeqWork& w = works[size_t(s)];
    if (w.pf_rows == 0) continue;
    if (p.groups.empty() || row + w.pf_rows - p.groups.back().row_begin > cap)
      p.groups.push_back({int(tile), int(tile), int(row), int(row)});
    tile += w.pf_tiles;
    row += w.pf_rows;
    p.groups.back().tile_end = int(tile);
    p.groups.back().row_end = int(row);
  }

  const size_t H = size_t(a.n_heads), n = size_t(p.n_seqs);
  size_t off = 0;
  auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += align256(bytes);
    return at;
  };
  p.off_ints = take((5 * (n + 1) + 2 * n + size_t(p.dec_tokens)) * sizeof(int32_t));
  p.off_q_lat = take(size_t(p.dec_tokens) * H * kLora * 2);
  p.off_part_o = take(size_t(p.dec_slots) * kLora * 4);
  p.off_part_ml = take(size_t(p.dec_slots) * 2 * 4);
  p.off_lat = take(size_t(p.dec_tokens) * H * kLora * 2);
  p.off_ctx = take(size_t(p.group_rows) * kLatK * 2);
  p.off_kvx = take(size_t(p.group_rows) * H * kKvbRows * 2);
  // The cuDNN path's K [group_rows, H, 192] (sdpa_inputs.cu) and one call's batch arrays, reserved whenever the
  // option may take it: whether cuDNN plans the shape is only known at launch (auto then runs rill's kernel).
  p.sdpa = p.pf_rows > 0 && prefill_through_cudnn(a, cx);
  if (p.sdpa) {
    // (K rows, then the zeroed tail every key tile read past the last row may touch: params.h kSdpaTailRows.)
    p.off_k = take(size_t(p.group_rows) * H * kQk * 2 + size_t(kSdpaTailRows) * H * kKvbRows * 2);
    p.off_sdpa = take(kSdpaBatchBytes);
    // The softmax statistics cuDNN writes (fp32 [tokens, H], a call's from offset 0; cudnn_sdpa.cc), with a
    // tail like K's for stores past the last row.
    p.off_stats = take((size_t(a.layout->n_tokens) + kSdpaTailRows) * H * sizeof(float));
  }
  p.bytes = off;
  *out = p;
  return {};
}

}  // namespace rill::cuda::mla
