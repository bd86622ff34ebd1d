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

}  // namespace rill::model
