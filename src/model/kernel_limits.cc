#include "model/kernel_limits.h"

namespace rill::model {
namespace {

// `field` must equal the built-for value (0: any).
Status exactly(const char* field, int value, int built_for, const std::string& backend) {
  if (built_for == 0 || value == built_for) return {};
  return invalid_argument("config field {} = {} is not supported by the {} backend (its kernels are built for {})",
                          field, value, backend, built_for);
}

}  // namespace

Status check_kernel_limits(const ModelConfig& c, const backend::KernelShapeLimits& l, const std::string& b) {
  const bool has_kda = c.n_layers_of(LayerKind::Kda) > 0, has_mla = c.n_layers_of(LayerKind::Mla) > 0;
  if (has_kda) {
    RILL_TRY(exactly("linear_attn_config.head_dim", c.kda.head_dim, l.kda_head_dim, b));
    RILL_TRY(exactly("linear_attn_config.short_conv_kernel_size", c.kda.conv_kernel, l.kda_conv_kernel, b));
  }
  if (has_mla) {
    RILL_TRY(exactly("qk_nope_head_dim", c.mla.qk_nope_head_dim, l.mla_nope, b));
    RILL_TRY(exactly("qk_rope_head_dim", c.mla.qk_rope_head_dim, l.mla_rope, b));
    RILL_TRY(exactly("v_head_dim", c.mla.v_head_dim, l.mla_v, b));
    RILL_TRY(exactly("kv_lora_rank", c.mla.kv_lora_rank, l.mla_kv_lora, b));
  }
  const MoeConfig& m = c.moe;
  if (m.n_experts > 0) {
    if (l.max_experts > 0 && m.n_experts > l.max_experts)
      return invalid_argument("config field num_experts = {} is more than the {} backend's router takes ({})",
                              m.n_experts, b, l.max_experts);
    if (m.grouped() && l.max_groups > 0 && m.n_groups > l.max_groups)
      return invalid_argument("config field num_expert_group = {} is more than the {} backend's router takes ({})",
                              m.n_groups, b, l.max_groups);
  }
  if (c.family == ModelFamily::KimiK3 && l.max_attn_res_candidates > 0 &&
      c.attn_res_max_blocks() + 1 > l.max_attn_res_candidates)
    return invalid_argument(
        "config fields num_hidden_layers = {} / attn_res_block_size = {}: {} AttnRes blocks, the {} backend mixes at "
        "most {} candidates",
        c.n_layers, c.attn_res_block_size, c.attn_res_max_blocks(), b, l.max_attn_res_candidates - 1);
  return {};
}

}  // namespace rill::model
