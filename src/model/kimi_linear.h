// Kimi Linear (kimi_linear): pre-norm decoder layers with plain residuals (spec §3.2): KDA or MLA mixer,
// dense MLP or MoE feed-forward, final norm and lm_head.
#pragma once

#include <vector>

#include "model/blocks/decoder_layer.h"
#include "model/model.h"

namespace rill::model {

class KimiLinearModel final : public Model {
 public:
  KimiLinearModel(const ModelConfig& config, backend::Backend& be, const ModelShard& shard);

 private:
  void declare_weights() override;
  Status forward_impl(ForwardContext& cx, TensorView ids, TensorView rows, const ModelCaches& caches,
                      TensorView logits) override;

  backend::LinearWeight embed_;  // [V, H]
  TensorView final_norm_;        // F32 [H]
  backend::LinearWeight lm_head_;  // [V, H]
  std::vector<DecoderLayerWeights> layers_;
};

}  // namespace rill::model
