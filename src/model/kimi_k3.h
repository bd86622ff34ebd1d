// Kimi K3 (kimi_k3, text decoder): the Kimi Linear layer stack with Block Attention Residuals in place of
// the residual adds (spec §3.9, §3.11). The blocks carry the other K3 differences through the config:
// bounded KDA forget gate and full-rank output gate, q-LoRA MLA with the sigmoid output gate, SiTU-GLU,
// the latent MoE, MXFP4 routed experts.
#pragma once

#include <vector>

#include "model/blocks/attn_res.h"
#include "model/blocks/decoder_layer.h"
#include "model/model.h"

namespace rill::model {

struct K3LayerWeights : DecoderLayerWeights {
  AttnResWeights attn_res;  // self_attention_res_{norm,proj}: mixes the mixer's input
  AttnResWeights mlp_res;   // mlp_res_{norm,proj}: mixes the FFN's input
};

class KimiK3Model final : public Model {
 public:
  KimiK3Model(const ModelConfig& config, backend::Backend& be, const ModelShard& shard);

 private:
  void declare_weights() override;
  Status forward_impl(ForwardContext& cx, TensorView ids, TensorView rows, const ModelCaches& caches,
                      TensorView logits) override;

  backend::LinearWeight embed_;    // [V, H]
  TensorView final_norm_;          // F32 [H]
  AttnResWeights output_res_;      // output_attn_res_{norm,proj}: the mix before the final norm
  backend::LinearWeight lm_head_;  // [V, H]
  std::vector<K3LayerWeights> layers_;
};

}  // namespace rill::model
