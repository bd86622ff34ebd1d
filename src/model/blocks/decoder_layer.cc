#include "model/blocks/decoder_layer.h"

namespace rill::model {

void declare_decoder_layer(WeightTable& t, const std::string& prefix, int i, const ModelConfig& c,
                           const ModelShard& shard, DecoderLayerWeights& w) {
  t.vector(prefix + "input_layernorm.weight", {c.hidden_size}, &w.input_norm);
  t.vector(prefix + "post_attention_layernorm.weight", {c.hidden_size}, &w.post_norm);
  // KDA and MLA layers of K3 both have a `self_attn.g_proj.weight`; the layer kind says which gate it is.
  if (c.layer_kinds[size_t(i)] == LayerKind::Kda)
    declare_kda_weights(t, prefix + "self_attn.", c, shard, w.kda);
  else
    declare_mla_weights(t, prefix + "self_attn.", c, shard, w.mla);
  if (c.ffn_kinds[size_t(i)] == FfnKind::Dense)
    declare_mlp_weights(t, prefix + "mlp.", c.hidden_size, c.intermediate_size, shard.tp_rank, shard.tp_size, w.mlp);
  else
    declare_moe_weights(t, prefix + "block_sparse_moe.", c, shard, w.moe);
}

// Each sublayer's output is this rank's partial sum under tensor parallelism; one all-reduce completes it.
Status mixer_forward(ForwardContext& cx, const ModelConfig& c, int i, const DecoderLayerWeights& w, TensorView u,
                     const backend::AddRmsNormArgs* u_norm, const LayerCache& cache, TensorView out) {
  if (c.layer_kinds[size_t(i)] == LayerKind::Kda)
    RILL_TRY(kda_forward(cx, c, w.kda, u, u_norm, cache, out));
  else
    RILL_TRY(mla_forward(cx, c, w.mla, u, u_norm, cache, out));
  return cx.reduce(out);
}

Status ffn_forward(ForwardContext& cx, const ModelConfig& c, const ModelShard& shard, int i,
                   const DecoderLayerWeights& w, TensorView x, const backend::AddRmsNormArgs* x_norm,
                   TensorView out) {
  if (c.ffn_kinds[size_t(i)] == FfnKind::Dense)
    RILL_TRY(mlp_forward(cx, w.mlp, glu_spec(c), x, x_norm, out));
  else
    RILL_TRY(moe_forward(cx, c, shard, w.moe, x, x_norm, out));
  return cx.reduce(out);
}

backend::PrefetchWeightsArgs mixer_weights(const ModelConfig& c, int i, const DecoderLayerWeights& w,
                                           int64_t tokens) {
  backend::PrefetchWeightsArgs a;
  a.tokens = tokens;
  if (c.layer_kinds[size_t(i)] == LayerKind::Kda) {
    const KdaWeights& k = w.kda;
    for (const backend::LinearWeight* l :
         {&k.qkv_proj, &k.f_a_proj, &k.b_proj, &k.g_a_proj, &k.f_b_proj, &k.g_b_proj, &k.g_proj, &k.o_proj})
      a.add(*l);
    for (const TensorView* t : {&k.conv_weight, &k.a_log, &k.dt_bias, &k.o_norm}) a.add(*t);
  } else {
    const MlaWeights& m = w.mla;
    for (const backend::LinearWeight* l :
         {&m.q_proj, &m.q_a_proj, &m.q_b_proj, &m.kv_a_proj, &m.kv_b_proj, &m.g_proj, &m.o_proj})
      a.add(*l);
    for (const TensorView* t : {&m.q_a_norm, &m.kv_a_norm}) a.add(*t);
  }
  return a;
}

backend::PrefetchWeightsArgs ffn_weights(const ModelConfig& c, int i, const DecoderLayerWeights& w,
                                         int64_t tokens) {
  backend::PrefetchWeightsArgs a;
  a.tokens = tokens;
  if (c.ffn_kinds[size_t(i)] == FfnKind::Dense) {
    a.add(w.mlp.gate_up);
    a.add(w.mlp.down);
  } else {
    const MoeWeights& m = w.moe;
    for (const backend::LinearWeight* l :
         {&m.router, &m.shared.gate_up, &m.shared.down, &m.latent_down, &m.latent_up})
      a.add(*l);
    for (const TensorView* t :
         {&m.router_bias, &m.experts.gate_up_scales, &m.experts.down_scales, &m.latent_norm})
      a.add(*t);
  }
  a.add(w.post_norm);
  return a;
}

}  // namespace rill::model
