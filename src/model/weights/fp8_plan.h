// Fp8Plan: which of a model's matrices are FP8, as stored and as loaded (issue #35). The blocks declare their
// matrices as always; the WeightTable asks the plan about each name, so no block knows about FP8.
//   stored: the checkpoint holds F8_E4M3 codes and a scale tensor (`<module>.<scale_suffix>`) for it: every
//           matrix of an FP8 checkpoint except the embedding, lm_head and the modules its config ignores.
//   target: loaded as FP8 codes + F32 block scales: every matrix but those kept dense (keeps_dense), when
//           quantizing at load or when the checkpoint stores it in FP8. A stored matrix kept dense is
//           dequantized exactly at load.
#pragma once

#include <string>

#include "backend/backend.h"
#include "model/config.h"

namespace rill::model {

// Blocks quantized to at load (`--quantization fp8`): DeepSeek-V3's, E4M3 codes scaled by amax / 448.
inline constexpr int32_t kFp8QuantBlock = 128;

class Fp8Plan {
 public:
  explicit Fp8Plan(Fp8Config config) : config_(std::move(config)) {}

  bool stored(const std::string& weight_name) const;
  bool target(const std::string& weight_name) const;
  // The scale tensor's name in the checkpoint: `x.weight` -> `x.weight_scale_inv` (or `x.weight_scale`).
  std::string scale_name(const std::string& weight_name) const;
  // The checkpoint's blocks (stored) or those quantized to (kFp8QuantBlock square, or one row for ptpc_fp8);
  // a stack whose parts are `row_unit` rows passes it so that no block spans two parts.
  backend::Fp8Blocks stored_blocks() const;
  backend::Fp8Blocks quant_blocks(int64_t row_unit) const;
  // The tensors that stay in the matrix dtype whatever the checkpoint holds (README "FP8 weights": measured).
  static bool keeps_dense(const std::string& weight_name);

 private:
  bool ignored(const std::string& module) const;
  Fp8Config config_;
};

}  // namespace rill::model
