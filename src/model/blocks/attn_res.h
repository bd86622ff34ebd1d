// Block Attention Residuals (Kimi K3, spec §3.9): instead of `x += sublayer(x)`, each sublayer's input is a
// learned softmax mixture over depth of the block snapshots and the running partial sum, and the stream
// carried between layers is the partial sum of the current block.
#pragma once

#include <string>

#include "model/config.h"
#include "model/forward_context.h"
#include "model/weights/weight_table.h"

namespace rill::model {

// One mixing point: the key RMSNorm weight and the pseudo-query (a [1, H] projection).
struct AttnResWeights {
  TensorView norm;  // F32 [H]
  TensorView proj;  // F32 [H]
};

// `{prefix}{name}_norm.weight` [H] and `{prefix}{name}_proj.weight` [1, H]; converted mirrors spell them
// `{prefix}{name}.norm_weight` / `.proj_weight` (spec §2.3). name: self_attention_res, mlp_res,
// output_attn_res.
void declare_attn_res_weights(WeightTable& t, const std::string& prefix, const std::string& name, int hidden,
                              AttnResWeights& w);

// The depth-wise residual state of one forward pass: snapshots B_0..B_{n-1} and the partial sum P, kept
// contiguously as rows [0, n] of one [max_blocks + 1, T, H] workspace buffer so a mix reads them as one view.
// The state is fp32 on every backend, like Kimi Linear's residual stream: the reference keeps P in the
// activation dtype, but a bf16 P rounds at every add, and the depth softmax of each mix amplifies those
// roundings (a sharp pseudo-query turns a 0.4% error of a candidate into a different mixture); sublayer
// outputs stay in the activation dtype and are added in fp32.
class BlockResiduals {
 public:
  // Allocates from cx.ws (the caller's scope owns it); P starts as the embedding, written by the caller.
  BlockResiduals(ForwardContext& cx, const ModelConfig& c, int64_t n_tokens);

  int n_blocks() const { return n_blocks_; }
  // P (F32 [T, H]): the partial sum of the current block. After push() it is empty (zeros) until the next
  // sublayer's output is accumulated.
  TensorView partial() const { return slot(n_blocks_); }
  bool partial_empty() const { return partial_empty_; }
  // P = a when P is empty, else P = P + a (a: a sublayer output in the activation dtype).
  Status accumulate(const TensorView& a);
  // B.append(P); P = None.
  Status push();
  // out = Mix(B, P; w) over the n_blocks + 1 candidates (P must not be empty); out is F32 or act.
  Status mix(const AttnResWeights& w, TensorView out);

  // Pipeline stages (spec/parallelism.md §3): the state after a stage's last layer — the completed blocks
  // and P, rows [0, n] — goes to the next stage, which resumes before `first_layer` (every layer < first_layer
  // with layer % S == 0 pushed a block, and P is never empty between layers).
  Status to_next_stage();
  Status from_previous_stage(int first_layer);

 private:
  TensorView slot(int i) const { return all_.narrow(0, i, 1).reshape({all_.size(1), all_.size(2)}); }

  ForwardContext& cx_;
  float eps_;
  int block_size_;
  TensorView all_;  // F32 [max_blocks + 1, T, H]
  int n_blocks_ = 0;
  bool partial_empty_ = false;
};

}  // namespace rill::model
