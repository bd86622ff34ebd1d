#include "model/kimi_linear.h"

namespace rill::model {

KimiLinearModel::KimiLinearModel(const ModelConfig& config, backend::Backend& be, const ModelShard& shard)
    : Model(config, be, shard) {
  layers_.resize(static_cast<size_t>(config_.n_layers));
}

void KimiLinearModel::declare_weights() {
  const ModelConfig& c = config_;
  const std::string root = c.tensor_prefix;
  const int H = c.hidden_size, V = c.vocab_size;
  // A pipeline stage holds its layers; the first the embedding, the last the final norm and lm_head.
  if (c.first_stage()) table_.matrix(root + "model.embed_tokens.weight", {V, H}, &embed_);
  else table_.held_elsewhere(root + "model.embed_tokens.weight");
  if (c.last_stage()) {
    table_.vector(root + "model.norm.weight", {H}, &final_norm_);
    declare_lm_head(root + "lm_head.weight", &lm_head_);
  } else {
    table_.held_elsewhere(root + "model.norm.weight");
    table_.held_elsewhere(root + "lm_head.weight");
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = root + "model.layers." + std::to_string(i) + ".";
    if (!c.holds_layer(i)) {
      table_.ignore_prefix(p);
      continue;
    }
    declare_decoder_layer(table_, p, i, c, shard_, layers_[size_t(i)]);
  }
}

// x is the residual stream, kept in fp32 on every backend (the bf16 CUDA path rounded it at every add, and
// those roundings were the largest share of its error against the fp32 reference); h is the normed input of
// the next sublayer, in the activation dtype. Each residual add is fused with the norm that follows it
// (x += a; h = norm(x)), which is exactly the reference's order of operations, and handed to the next
// sublayer as its input norm: its first op runs it, folded into that op where the backend can (CUDA's decode
// GEMVs, backend/cuda/README.md) — one launch fewer per join. Taps record h before the sublayer runs, so a
// tapped forward runs each join on its own. The last layer's add and the final norm run only on the rows whose
// logits are wanted.
Status KimiLinearModel::forward_impl(ForwardContext& cx, TensorView ids, TensorView rows, const ModelCaches& caches,
                                     TensorView logits) {
  const ModelConfig& c = config_;
  const int64_t T = ids.size(0), H = c.hidden_size, R = rows.size(0);
  auto& be = cx.be;
  TensorView x = cx.ws.alloc(DType::F32, {T, H});
  TensorView h = cx.ws.alloc(cx.act(), {T, H});
  TensorView delta = cx.ws.alloc(cx.act(), {T, H});
  const int first = c.first_layer, end = c.stage_end();
  if (c.first_stage()) {
    RILL_TRY(be.embed({embed_.weight, ids, x}));
    cx.tap("embed", x);
  } else {
    RILL_TRY(cx.from_previous_stage(x));
  }
  RILL_TRY(be.rms_norm({x, layers_[size_t(first)].input_norm, c.rms_norm_eps, h}));
  // The join x += delta; h = norm(x) before the next sublayer: pending (its input norm), or run now when tapped.
  backend::AddRmsNormArgs args;  // the one pending join (each is consumed before the next is made)
  auto join = [&](TensorView norm) -> Result<const backend::AddRmsNormArgs*> {
    args = {x, delta, norm, c.rms_norm_eps, h};
    if (!cx.taps) return &args;
    RILL_TRY(be.add_rms_norm(args));
    return static_cast<const backend::AddRmsNormArgs*>(nullptr);
  };
  const backend::AddRmsNormArgs* pending = nullptr;  // the layer's input join (none before the first layer)
  for (int i = first; i < end; ++i) {
    const DecoderLayerWeights& L = layers_[size_t(i)];
    cx.layer = i;
    cx.tap("input_norm", h);
    RILL_TRY(mixer_forward(cx, c, i, L, h, pending, caches.layers[size_t(i)], delta));
    cx.tap("mixer_out", delta);
    RILL_ASSIGN_OR_RETURN(pending, join(L.post_norm));
    cx.tap("post_norm", h);
    RILL_TRY(ffn_forward(cx, c, shard_, i, L, h, pending, delta));
    cx.tap("ffn_out", delta);
    pending = nullptr;
    if (i + 1 < end) {
      RILL_ASSIGN_OR_RETURN(pending, join(layers_[size_t(i + 1)].input_norm));
    }
  }
  cx.layer = -1;
  if (!c.last_stage()) {  // the stream goes on; the logits come back from the last stage
    RILL_TRY(be.add({x, delta}));
    RILL_TRY(cx.to_next_stage(x));
    return cx.logits_from_last_stage(logits);
  }
  TensorView picked = cx.ws.alloc(DType::F32, {R, H});
  TensorView picked_delta = cx.ws.alloc(cx.act(), {R, H});
  RILL_TRY(be.gather_rows({x, rows, picked}));
  RILL_TRY(be.gather_rows({delta, rows, picked_delta}));
  TensorView normed = cx.ws.alloc(cx.act(), {R, H});
  RILL_TRY(be.add_rms_norm({picked, picked_delta, final_norm_, c.rms_norm_eps, normed}));
  cx.tap("residual", picked);
  return project_logits(cx, normed, lm_head_, logits);
}

}  // namespace rill::model
