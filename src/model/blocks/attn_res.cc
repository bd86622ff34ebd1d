#include "model/blocks/attn_res.h"

namespace rill::model {

void declare_attn_res_weights(WeightTable& t, const std::string& prefix, const std::string& name, int hidden,
                              AttnResWeights& w) {
  t.vector(prefix + name + "_norm.weight", {hidden}, &w.norm).alt_names = {prefix + name + ".norm_weight"};
  t.vector(prefix + name + "_proj.weight", {hidden}, &w.proj, {{1, hidden}}).alt_names = {prefix + name +
                                                                                          ".proj_weight"};
}

BlockResiduals::BlockResiduals(ForwardContext& cx, const ModelConfig& c, int64_t n_tokens)
    : cx_(cx), eps_(c.rms_norm_eps), block_size_(c.attn_res_block_size) {
  all_ = cx.ws.alloc(DType::F32, {c.attn_res_max_blocks() + 1, n_tokens, c.hidden_size});
}

Status BlockResiduals::accumulate(const TensorView& a) {
  partial_empty_ = false;
  return cx_.be.add({partial(), a});  // fp32 P += a; an empty P holds zeros, so this is P = a exactly
}

Status BlockResiduals::push() {
  if (partial_empty_) return internal_error("AttnRes: pushing an empty partial sum");
  if (n_blocks_ + 1 >= all_.size(0))
    return internal_error("AttnRes: more than {} block snapshots", all_.size(0) - 1);
  ++n_blocks_;
  partial_empty_ = true;
  return cx_.be.fill_zero(partial());
}

Status BlockResiduals::mix(const AttnResWeights& w, TensorView out) {
  if (partial_empty_) return internal_error("AttnRes: mixing with an empty partial sum");
  return cx_.be.attn_res_mix({all_.narrow(0, 0, n_blocks_ + 1), w.norm, w.proj, eps_, out});
}

Status BlockResiduals::to_next_stage() {
  return cx_.to_next_stage(all_.narrow(0, 0, n_blocks_ + 1));
}

Status BlockResiduals::from_previous_stage(int first_layer) {
  n_blocks_ = (first_layer + block_size_ - 1) / block_size_;
  partial_empty_ = false;
  if (n_blocks_ + 1 > all_.size(0)) return internal_error("AttnRes: {} blocks before layer {}", n_blocks_, first_layer);
  return cx_.from_previous_stage(all_.narrow(0, 0, n_blocks_ + 1));
}

}  // namespace rill::model
