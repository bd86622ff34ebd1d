// Kimi Linear (kimi_linear): pre-norm decoder layers with plain residuals (spec §3.2): KDA or MLA mixer,
// dense MLP or MoE feed-forward, final norm and lm_head.
#pragma once

#include <vector>

#include "model/blocks/kda.h"
#include "model/blocks/mla.h"
#include "model/blocks/mlp.h"
#include "model/blocks/moe.h"
#include "model/model.h"

namespace rill::model {

struct DecoderLayerWeights {
  TensorView input_norm;  // F32 [H]
  TensorView post_norm;   // F32 [H]
  KdaWeights kda;
  MlaWeights mla;
  MlpWeights mlp;  // dense layers
  MoeWeights moe;  // MoE layers
};

class KimiLinearModel final : public Model {
 public:
  KimiLinearModel(const ModelConfig& config, backend::Backend& be, const ModelShard& shard);

 private:
  void declare_weights() override;
  Status forward_impl(ForwardContext& cx, TensorView ids, TensorView rows, const ModelCaches& caches,
                      TensorView logits) override;
  Status mixer(ForwardContext& cx, int layer, TensorView u, const ModelCaches& caches, TensorView out);
  Status ffn(ForwardContext& cx, int layer, TensorView x, TensorView out);

  backend::LinearWeight embed_;  // [V, H]
  TensorView final_norm_;        // F32 [H]
  backend::LinearWeight lm_head_;  // [V, H]
  std::vector<DecoderLayerWeights> layers_;
};

}  // namespace rill::model
