#include "model/model.h"

#include <algorithm>

#include "backend/sampling.h"
#include "backend/workspace_planner.h"
#include "core/log.h"
#include "core/sizes.h"
#include "model/kernel_limits.h"
#include "model/kimi_k3.h"
#include "model/kimi_linear.h"

namespace rill::model {
namespace {

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

struct CacheShapes {
  Shape state, conv, kv;
};

CacheShapes cache_shapes(const ModelConfig& c, int n_slots, int n_blocks, int block_size) {
  const int64_t P = c.kda.projection_size();
  return {{n_slots, c.kda.n_heads, c.kda.head_dim, c.kda.head_dim},
          {n_slots, c.kda.conv_kernel - 1, 3 * P},
          {n_blocks, block_size, c.mla.cache_width()}};
}

}  // namespace

int64_t ModelCaches::bytes_needed(const ModelConfig& c, DType act, int n_slots, int n_blocks, int block_size) {
  const CacheShapes s = cache_shapes(c, n_slots, n_blocks, block_size);
  // Sized from flags: a sum that would overflow saturates, so the memory check reports it as too large.
  const int64_t kda = int64_t(align256(static_cast<size_t>(s.state.numel()) * 4) +
                              align256(static_cast<size_t>(s.conv.numel()) * dtype_size(act)));
  const int64_t mla = int64_t(align256(static_cast<size_t>(s.kv.numel()) * dtype_size(act)));
  const std::optional<int64_t> total =
      checked_sum(checked_product({c.n_held_layers_of(LayerKind::Kda), kda}).value_or(INT64_MAX),
                  checked_product({c.n_held_layers_of(LayerKind::Mla), mla}).value_or(INT64_MAX));
  return total.value_or(INT64_MAX);
}

int64_t ModelCaches::record_bytes(const ModelConfig& c, DType act, RecordShape r) {
  if (r.n_slots <= 0 || r.n_tokens <= 0) return 0;
  const int64_t P = c.kda.projection_size();
  const int64_t per_layer =
      int64_t(align256(size_t(r.n_slots) * size_t(r.n_tokens) * size_t(c.kda.n_heads) * 3 * size_t(c.kda.head_dim) * 4) +
              align256(size_t(r.n_slots) * size_t(r.n_tokens) * size_t(3 * P) * dtype_size(act)));
  const int64_t fold_args = int64_t(align256(size_t(2 * r.n_slots) * sizeof(int32_t)));
  return checked_sum(checked_product({c.n_held_layers_of(LayerKind::Kda), per_layer}).value_or(INT64_MAX), fold_args)
      .value_or(INT64_MAX);
}

Result<ModelCaches> ModelCaches::allocate(backend::Backend& be, const ModelConfig& c, int n_slots, int n_blocks,
                                          int block_size, RecordShape records) {
  if (n_slots < 1 || n_blocks < 1 || block_size < 1)
    return invalid_argument("caches need at least one state slot and one block (got {} slots, {} blocks)", n_slots, n_blocks);
  ModelCaches out;
  out.n_slots = n_slots;
  out.n_blocks = n_blocks;
  out.block_size = block_size;
  const DType act = be.act_dtype();
  const int64_t bytes = bytes_needed(c, act, n_slots, n_blocks, block_size);
  RILL_TRY(be.check_available(
      uint64_t(bytes),
      fmt::format("the caches ({} state slots, {} blocks of {} tokens)", n_slots, n_blocks, block_size)));
  RILL_ASSIGN_OR_RETURN(auto alloc, be.allocate(static_cast<size_t>(std::max<int64_t>(bytes, 1))));
  char* p = static_cast<char*>(alloc.data());
  out.storage.push_back(std::move(alloc));
  const CacheShapes s = cache_shapes(c, n_slots, n_blocks, block_size);
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerKind k = c.layer_kinds[size_t(i)];
    LayerCache L;
    if (!c.holds_layer(i)) {  // another pipeline stage's layer
    } else if (k == LayerKind::Kda) {
      L.kda_state = TensorView::make(p, DType::F32, s.state, be.device());
      p += align256(L.kda_state.nbytes());
      L.kda_conv = TensorView::make(p, act, s.conv, be.device());
      p += align256(L.kda_conv.nbytes());
      RILL_TRY(be.fill_zero(L.kda_state));
      RILL_TRY(be.fill_zero(L.kda_conv));
    } else {
      L.mla_kv = TensorView::make(p, act, s.kv, be.device());
      p += align256(L.mla_kv.nbytes());
    }
    out.layers.push_back(L);
  }
  // Replay records: their own allocation, so the caches above keep their layout with or without them. Never
  // read before written (a fold reads only what the verify step before it wrote), so not cleared.
  if (const int64_t rb = record_bytes(c, act, records); rb > 0) {
    if (records.n_slots > n_slots)
      return invalid_argument("caches: {} record slots for {} state slots", records.n_slots, n_slots);
    RILL_TRY(be.check_available(uint64_t(rb), fmt::format("the KDA replay records ({} slots x {} tokens)",
                                                          records.n_slots, records.n_tokens)));
    RILL_ASSIGN_OR_RETURN(auto rec_alloc, be.allocate(size_t(rb)));
    char* q = static_cast<char*>(rec_alloc.data());
    out.storage.push_back(std::move(rec_alloc));
    out.records = records;
    out.fold_args = TensorView::make(q, DType::I32, {2, records.n_slots}, be.device());
    q += align256(out.fold_args.nbytes());
    const int64_t Hk = c.kda.n_heads, d = c.kda.head_dim, P = c.kda.projection_size();
    for (LayerCache& L : out.layers) {
      if (L.kda_state.empty()) continue;
      L.kda_records = TensorView::make(q, DType::F32, {records.n_slots, records.n_tokens, Hk, 3, d}, be.device());
      q += align256(L.kda_records.nbytes());
      L.kda_conv_records = TensorView::make(q, act, {records.n_slots, records.n_tokens, 3 * P}, be.device());
      q += align256(L.kda_conv_records.nbytes());
    }
  }
  return out;
}

ModelCaches Model::null_caches(int block_size) const {
  const CacheShapes s = cache_shapes(config_, 1, 1, block_size);
  const DType act = be_->act_dtype();
  ModelCaches out;
  out.n_slots = 1;
  out.n_blocks = 1;
  out.block_size = block_size;
  for (int i = 0; i < config_.n_layers; ++i) {
    LayerCache L;
    if (!config_.holds_layer(i)) {
    } else if (config_.layer_kinds[size_t(i)] == LayerKind::Kda) {
      L.kda_state = TensorView::make(nullptr, DType::F32, s.state, be_->device());
      L.kda_conv = TensorView::make(nullptr, act, s.conv, be_->device());
    } else {
      L.mla_kv = TensorView::make(nullptr, act, s.kv, be_->device());
    }
    out.layers.push_back(L);
  }
  return out;
}

Status Model::reserve_workspace(const StepLimits& limits) {
  if (limits.max_tokens < 1 || limits.max_seqs < 1 || limits.max_logit_rows < 1 || limits.max_context < 1)
    return invalid_argument("step limits must be positive");
  // The workspace is the largest high water of planning passes over the step shapes the limits admit that ask
  // the most of it (a backend picks its path per sequence by the tokens it brings, and a path's scratch grows with
  // the sequences taking it and their contexts):
  //  - one long prefill chunk at the end of the longest context plus single-token sequences;
  //  - as many sequences as fit, each bringing n tokens at the end of the longest context, for n = 1..16 and
  //    every power of two up to max_tokens (decode, verify steps, short chunks after long cached prefixes,
  //    batched prefill); those of n <= 16 also planned from the counts only, as a replayed graph's decode or
  //    verify step is (a backend may split differently then: CUDA's MLA decode takes a fixed split count).
  // Every row asks for logits while max_logit_rows lasts.
  const int block = 64;
  auto sequence = [&](int n_new, int n_logits) {
    SequenceStep q;
    q.n_new = n_new;
    q.start_pos = std::max(0, limits.max_context - n_new);
    q.state_slot = 0;
    q.block_table.assign(static_cast<size_t>((q.start_pos + n_new + block - 1) / block), 0);
    q.logits = n_logits >= n_new ? LogitsNeeded::All : n_logits <= 1 ? LogitsNeeded::Last : LogitsNeeded::LastN;
    q.n_logits = q.logits == LogitsNeeded::LastN ? n_logits : 0;
    return q;
  };
  std::vector<StepBatch> shapes;
  {
    const int n_seqs = std::min(limits.max_seqs, limits.max_tokens);
    StepBatch b;
    const int n_long = limits.max_tokens - (n_seqs - 1);
    b.seqs.push_back(sequence(n_long, std::min(n_long, limits.max_logit_rows - (n_seqs - 1))));
    for (int s = 1; s < n_seqs; ++s) b.seqs.push_back(sequence(1, 1));
    shapes.push_back(std::move(b));
  }
  std::vector<int> sizes;
  for (int n = 1; n <= std::min(16, limits.max_tokens); ++n) sizes.push_back(n);
  for (int n = 32; n <= limits.max_tokens; n *= 2) sizes.push_back(n);
  for (int n : sizes) {
    const int n_seqs = std::min(limits.max_seqs, limits.max_tokens / n);
    const int rows = std::max(1, std::min(n, limits.max_logit_rows / n_seqs));
    StepBatch b;
    for (int s = 0; s < n_seqs; ++s) b.seqs.push_back(sequence(n, rows));
    shapes.push_back(std::move(b));
  }
  // The passes run on a planner for this backend (backend/workspace_planner.h): every op takes the scratch
  // it would take here, nothing runs, and the backend itself is left as it is.
  backend::WorkspacePlanner planner(*be_);
  size_t high_water = 0;
  for (StepBatch& worst : shapes) {
    size_t n_tokens = 0;
    bool graphable = true;
    for (const SequenceStep& q : worst.seqs) {
      n_tokens += size_t(q.n_new);
      graphable = graphable && q.n_new <= 16;
    }
    worst.token_ids.assign(n_tokens, 0);
    for (bool count_only : {false, true}) {
      if (count_only && !graphable) continue;
      Arena measure(nullptr, 0, be_->device());
      // Caches of the right dtypes and shapes with no memory (one slot, one block): a backend's scratch query
      // validates its arguments as a launch would, and an empty view there (wrong dtype) once made CUDA's MLA
      // plan 0 bytes, so a replayed verify graph overran the workspace.
      const ModelCaches none = null_caches(block);
      backend::BatchLayoutHost layout;
      RILL_TRY(worst.to_layout(block, &layout));
      layout.count_only_plan = count_only;  // without fixed inputs: what a graph's step takes
      TensorView logits;
      Status st = upload_inputs(planner, worst, layout, none, measure, nullptr);
      if (st.ok()) st = launch(planner, none, measure, &logits);
      prepared_ = false;
      RILL_TRY(st);
      high_water = std::max(high_water, measure.high_water());
    }
  }
  const size_t bytes = high_water + (1 << 20);
  RILL_TRY(be_->check_available(bytes, fmt::format("the step workspace ({} tokens, {} sequences, context {})",
                                                   limits.max_tokens, limits.max_seqs, limits.max_context)));
  RILL_ASSIGN_OR_RETURN(workspace_, be_->allocate(bytes));
  arena_ = Arena(workspace_.data(), workspace_.size(), be_->device());
  limits_ = limits;
  RILL_LOG_DEBUG("workspace: {:.1f} MiB for {} tokens / {} sequences", double(bytes) / (1 << 20), limits.max_tokens,
                 limits.max_seqs);
  return {};
}

Result<TensorView> Model::forward(const StepBatch& batch, const ModelCaches& caches) {
  RILL_TRY(check_step(batch, caches));
  backend::BatchLayoutHost layout;
  RILL_TRY(batch.to_layout(caches.block_size, &layout));
  RILL_TRY(prepare(batch, layout, caches));
  Result<TensorView> logits = run_prepared(caches);
  prepared_ = false;  // the layout it was prepared with ends here
  return logits;
}

Status Model::check_step(const StepBatch& batch, const ModelCaches& caches) const {
  if (batch.n_tokens() > limits_.max_tokens || int(batch.seqs.size()) > limits_.max_seqs ||
      batch.n_logit_rows() > limits_.max_logit_rows)
    return invalid_argument("step of {} tokens / {} sequences / {} logits rows exceeds the workspace limits "
                            "({} / {} / {})", batch.n_tokens(), batch.seqs.size(), batch.n_logit_rows(),
                            limits_.max_tokens, limits_.max_seqs, limits_.max_logit_rows);
  for (int32_t id : batch.token_ids)
    if (id < 0 || id >= config_.vocab_size)
      return invalid_argument("token id {} is outside the vocabulary [0, {})", id, config_.vocab_size);
  for (const auto& s : batch.seqs) {
    if (s.state_slot < 0 || s.state_slot >= caches.n_slots)
      return invalid_argument("state slot {} is outside [0, {})", s.state_slot, caches.n_slots);
    for (const KdaSnapshotRequest& r : s.kda_snapshots)
      if (r.slot < 0 || r.slot >= caches.n_slots || r.slot == s.state_slot)
        return invalid_argument("KDA snapshot slot {} is outside [0, {}) or the sequence's own", r.slot,
                                caches.n_slots);
    if (!s.kda_snapshots.empty() && !be_->kda_snapshots_in_step())
      return invalid_argument("the {} backend cannot take KDA snapshots inside a step", be_->name());
  }
  return {};
}

Status Model::prepare(const StepBatch& batch, const backend::BatchLayoutHost& layout, const ModelCaches& caches,
                      const FixedInputs* fixed) {
  prepared_ = false;
  if (workspace_.size() == 0) return internal_error("forward before reserve_workspace");
  if (layout.n_seqs() != int(batch.seqs.size()) || layout.n_tokens() != batch.n_tokens())
    return internal_error("prepare: a layout of {} sequences / {} tokens for a step of {} / {}", layout.n_seqs(),
                          layout.n_tokens(), batch.seqs.size(), batch.n_tokens());
  if (fixed && !layout.count_only_plan)
    return internal_error("prepare: fixed inputs need a layout planned from the counts only");
  arena_.reset();
  RILL_TRY(upload_inputs(*be_, batch, layout, caches, arena_, fixed));
  prepared_ = true;
  return {};
}

Result<TensorView> Model::run_prepared(const ModelCaches& caches) {
  if (!prepared_) return internal_error("run_prepared without a prepared step");
  TensorView logits;
  RILL_TRY(launch(*be_, caches, arena_, &logits));
  return logits;
}

Status Model::upload_inputs(backend::Backend& be, const StepBatch& batch, const backend::BatchLayoutHost& layout,
                            const ModelCaches& caches, Arena& ws, const FixedInputs* fixed) {
  if (fixed)
    RILL_TRY(be.upload_layout_fixed(layout, caches.block_size, fixed->block_table_stride, fixed->layout,
                                    fixed->layout_bytes, &layout_));
  else
    RILL_TRY(be.upload_layout(layout, caches.block_size, &layout_));
  const int64_t T = batch.n_tokens();
  const std::vector<int32_t> rows_host = batch.logit_token_rows();
  ids_ = ws.alloc(DType::I32, {T});
  rows_ = ws.alloc(DType::I32, {int64_t(rows_host.size())});
  if (shard_.tp_size > 1) iota_ = ws.alloc(DType::I32, {int64_t(rows_host.size())});
  RILL_TRY(be.upload_async(ids_.data, batch.token_ids.data(), size_t(T) * 4));
  RILL_TRY(be.upload_async(rows_.data, rows_host.data(), rows_host.size() * 4));
  if (shard_.tp_size > 1) {
    iota_host_.resize(rows_host.size());
    for (size_t r = 0; r < iota_host_.size(); ++r) iota_host_[r] = int32_t(r);
    RILL_TRY(be.upload_async(iota_.data, iota_host_.data(), iota_host_.size() * 4));
  }
  prepared_mark_ = ws.used();
  return {};
}

Status Model::launch(backend::Backend& be, const ModelCaches& caches, Arena& ws, TensorView* logits) {
  ws.release_to(prepared_mark_);  // a second launch of one prepared step carves the same buffers
  ForwardContext cx{be, ws, layout_, be.plans_only() ? nullptr : taps_};
  cx.tp_comm = shard_.tp_comm;
  cx.pp_comm = shard_.pp_comm;
  *logits = ws.alloc(DType::F32, {rows_.size(0), config_.vocab_size});
  return forward_impl(cx, ids_, rows_, caches, *logits);
}

Status Model::sample(TensorView logits, std::span<const backend::SamplingRow> rows, std::vector<int32_t>* ids) {
  const int64_t R = logits.size(0);
  if (int64_t(rows.size()) != R) return internal_error("sample: {} sampling rows for {} logits rows", rows.size(), R);
  const size_t mark = arena_.used();
  TensorView dev_rows = arena_.alloc(DType::U8, {int64_t(rows.size_bytes())});
  TensorView out = arena_.alloc(DType::I32, {R});
  RILL_TRY(be_->upload_async(dev_rows.data, rows.data(), rows.size_bytes()));
  const bool all_greedy = std::all_of(rows.begin(), rows.end(), backend::is_greedy);
  RILL_TRY(be_->sample(
      {logits, static_cast<const backend::SamplingRow*>(dev_rows.data), out, &arena_, all_greedy}));
  ids->resize(static_cast<size_t>(R));
  RILL_TRY(be_->copy_to_host(ids->data(), out.data, size_t(R) * 4));
  arena_.release_to(mark);
  return {};
}

void Model::declare_lm_head(const std::string& name, backend::LinearWeight* head) {
  table_.matrix(name, {config_.vocab_size, config_.hidden_size}, head).split(0, shard_.tp_rank, shard_.tp_size);
}

Status Model::project_logits(ForwardContext& cx, TensorView normed, const backend::LinearWeight& head,
                             TensorView logits) {
  RILL_TRY(project_local_logits(cx, normed, head, logits));
  return cx.logits_to_first_stage(logits);  // the last pipeline stage's logits go to stage 0, which samples
}

Status Model::project_local_logits(ForwardContext& cx, TensorView normed, const backend::LinearWeight& head,
                                   TensorView logits) {
  const int tp = shard_.tp_size;
  if (tp == 1) return cx.be.gemm({normed, &head, logits});
  const int64_t R = normed.size(0), Vl = config_.vocab_size / tp;
  WorkspaceScope scope(cx.ws);
  TensorView mine = cx.ws.alloc(DType::F32, {R, Vl});
  TensorView all = cx.ws.alloc(DType::F32, {tp * R, Vl});  // rank j's rows j*R..
  RILL_TRY(cx.be.gemm({normed, &head, mine}));
  if (cx.be.plans_only()) return {};
  RILL_TRY(shard_.tp_comm->all_gather(mine, all));
  for (int j = 0; j < tp; ++j)  // rank j's vocabulary is columns [j Vl, (j + 1) Vl) of every row
    RILL_TRY(cx.be.gather_rows({all.narrow(0, j * R, R), iota_, logits.narrow(1, j * Vl, Vl)}));
  return {};
}

Result<std::unique_ptr<Model>> build_model(const ModelConfig& config, backend::Backend& be, const ModelShard& shard) {
  RILL_TRY(check_shard(config, shard));
  RILL_TRY(check_kernel_limits(shard_config(config, shard), be.shape_limits(), be.name()));
  std::unique_ptr<Model> m;
  switch (config.family) {
    case ModelFamily::KimiLinear: m = std::make_unique<KimiLinearModel>(config, be, shard); break;
    case ModelFamily::KimiK3: m = std::make_unique<KimiK3Model>(config, be, shard); break;
  }
  if (config.fp8.source != Fp8Source::None) {
    // Block scales would have to be cut with the blocks: not done yet, so FP8 runs unsplit within a layer.
    if (shard.tp_size > 1 || shard.moe_tp_size > 1)
      return invalid_argument("FP8 weights (quantization_config or --quantization fp8) need --tensor-parallel-size 1 "
                              "and no expert-tensor parallelism for now ({})",
                              shard.describe());
    m->table_.set_fp8_plan(Fp8Plan(config.fp8));
  }
  m->declare_weights();
  return m;
}

namespace {
// A model that runs (not just declared) under tensor parallelism reduces over its group.
Status check_runnable(const ModelShard& shard) {
  if ((shard.tp_size > 1 && !shard.tp_comm) || (shard.pp_size > 1 && !shard.pp_comm))
    return internal_error("a shard ({}) needs its groups' communicators", shard.describe());
  return {};
}
}  // namespace

Result<std::unique_ptr<Model>> load_dummy_model(const ModelConfig& config, backend::Backend& be, uint64_t seed,
                                                const ModelShard& shard) {
  RILL_TRY(check_runnable(shard));
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, build_model(config, be, shard));
  RILL_ASSIGN_OR_RETURN(m->weights_, load_dummy_weights(m->table_, be, seed));
  return m;
}

Result<std::unique_ptr<Model>> load_model(const std::filesystem::path& dir, backend::Backend& be,
                                          const LoadOptions& options) {
  RILL_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::load(dir));
  RILL_TRY(apply_quantization(config, options.quantization));
  if (options.dummy_weights) return load_dummy_model(config, be, options.dummy_seed, options.shard);
  RILL_TRY(check_runnable(options.shard));
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, build_model(config, be, options.shard));
  RILL_ASSIGN_OR_RETURN(io::Checkpoint ckpt, io::Checkpoint::open(dir));
  if (!ckpt.has_weights()) return not_found("{}: no *.safetensors weight files", dir.string());
  auto shared = std::make_shared<const io::Checkpoint>(std::move(ckpt));
  RILL_ASSIGN_OR_RETURN(m->weights_, load_weights(m->table_, shared, be, options.progress));
  return m;
}

}  // namespace rill::model
