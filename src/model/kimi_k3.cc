#include "model/kimi_k3.h"

namespace rill::model {

KimiK3Model::KimiK3Model(const ModelConfig& config, backend::Backend& be, const ModelShard& shard)
    : Model(config, be, shard) {
  layers_.resize(static_cast<size_t>(config_.n_layers));
}

void KimiK3Model::declare_weights() {
  const ModelConfig& c = config_;
  const std::string root = c.tensor_prefix + "model.";  // "language_model.model."
  const int H = c.hidden_size, V = c.vocab_size;
  // Text-only: the vision tower and its projector are skipped; some mirrors drop the `model.` level of the
  // layer names (spec §2.1).
  table_.ignore_prefix("vision_tower.");
  table_.ignore_prefix("mm_projector.");
  table_.alias_prefix(root + "layers.", c.tensor_prefix + "layers.");
  for (int i = c.n_layers; i < c.n_layers + c.n_mtp_layers; ++i) {  // MTP draft layers: not run (yet)
    table_.ignore_prefix(root + "layers." + std::to_string(i) + ".");
    table_.ignore_prefix(c.tensor_prefix + "layers." + std::to_string(i) + ".");
  }
  // A pipeline stage holds its layers; the first the embedding, the last the output mix, norm and lm_head.
  if (c.first_stage()) table_.matrix(root + "embed_tokens.weight", {V, H}, &embed_);
  else table_.held_elsewhere(root + "embed_tokens.weight");
  if (c.last_stage()) {
    table_.vector(root + "norm.weight", {H}, &final_norm_);
    declare_attn_res_weights(table_, root, "output_attn_res", H, output_res_);
    declare_lm_head(c.tensor_prefix + "lm_head.weight", &lm_head_);
  } else {
    table_.held_elsewhere(root + "norm.weight");
    table_.ignore_prefix(root + "output_attn_res");
    table_.held_elsewhere(c.tensor_prefix + "lm_head.weight");
  }
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = root + "layers." + std::to_string(i) + ".";
    if (!c.holds_layer(i)) {  // another stage's (both spellings, as for the MTP layers)
      table_.ignore_prefix(p);
      table_.ignore_prefix(c.tensor_prefix + "layers." + std::to_string(i) + ".");
      continue;
    }
    K3LayerWeights& L = layers_[size_t(i)];
    declare_decoder_layer(table_, p, i, c, shard_, L);
    declare_attn_res_weights(table_, p, "self_attention_res", H, L.attn_res);
    declare_attn_res_weights(table_, p, "mlp_res", H, L.mlp_res);
  }
}

// Spec §3.11, per layer L with block size S:
//   h = P if B is empty else Mix(B, P; attn_res);  if L % S == 0: B.append(P), P = None
//   P = Mixer(input_norm(h)) [+ P];  P += FFN(post_norm(Mix(B, P; mlp_res)))
// and after the last layer logits = lm_head(norm(Mix(B, P; output_res))). The stream between layers is P.
Status KimiK3Model::forward_impl(ForwardContext& cx, TensorView ids, TensorView rows,
                                 const ModelCaches& caches, TensorView logits) {
  const ModelConfig& c = config_;
  const int64_t T = ids.size(0), H = c.hidden_size, R = rows.size(0);
  auto& be = cx.be;
  BlockResiduals res(cx, c, T);
  TensorView h = cx.ws.alloc(DType::F32, {T, H});  // a mixed sublayer input (fp32, like the AttnRes state)
  TensorView normed = cx.ws.alloc(cx.act(), {T, H});
  TensorView delta = cx.ws.alloc(cx.act(), {T, H});  // a sublayer output added into P
  if (c.first_stage()) {
    RILL_TRY(be.embed({embed_.weight, ids, res.partial()}));
    cx.tap("embed", res.partial());
  } else {  // the completed blocks and the partial sum, as the stage before left them
    RILL_TRY(res.from_previous_stage(c.first_layer));
  }
  for (int i = c.first_layer; i < c.stage_end(); ++i) {
    const K3LayerWeights& L = layers_[size_t(i)];
    cx.layer = i;
    TensorView in = res.partial();
    if (res.n_blocks() > 0) {
      RILL_TRY(res.mix(L.attn_res, h));
      in = h;
    }
    cx.tap("attn_res", in);
    if (i % c.attn_res_block_size == 0) RILL_TRY(res.push());
    RILL_TRY(be.rms_norm({in, L.input_norm, c.rms_norm_eps, normed}));
    cx.tap("input_norm", normed);
    RILL_TRY(mixer_forward(cx, c, i, L, normed, nullptr, caches.layers[size_t(i)], delta));
    cx.tap("mixer_out", delta);
    RILL_TRY(res.accumulate(delta));
    RILL_TRY(res.mix(L.mlp_res, h));
    cx.tap("mlp_res", h);
    RILL_TRY(be.rms_norm({h, L.post_norm, c.rms_norm_eps, normed}));
    cx.tap("post_norm", normed);
    RILL_TRY(ffn_forward(cx, c, shard_, i, L, normed, nullptr, delta));
    cx.tap("ffn_out", delta);
    RILL_TRY(res.accumulate(delta));
    cx.tap("partial", res.partial());
  }
  cx.layer = -1;
  if (!c.last_stage()) {
    RILL_TRY(res.to_next_stage());
    return cx.logits_from_last_stage(logits);
  }
  RILL_TRY(res.mix(output_res_, h));
  cx.tap("residual", h);
  TensorView picked = cx.ws.alloc(DType::F32, {R, H});
  RILL_TRY(be.gather_rows({h, rows, picked}));
  TensorView final_normed = cx.ws.alloc(cx.act(), {R, H});
  RILL_TRY(be.rms_norm({picked, final_norm_, c.rms_norm_eps, final_normed}));
  return project_logits(cx, final_normed, lm_head_, logits);
}

}  // namespace rill::model
