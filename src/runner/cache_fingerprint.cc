#include "runner/cache_fingerprint.h"

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "core/dtype.h"

namespace rill::runner {
namespace {

// FNV-1a, 64-bit: a stable, dependency-free hash of the description below (not a security boundary: it keeps
// honest mismatches apart).
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

std::string describe_config(const model::ModelConfig& c) {
  std::string s = fmt::format(
      "family {} vocab {} hidden {} layers {} [{}, {}) ffn {} eps {} act {} situ {} {} attn_res {} mxfp4 {} "
      "mtp {} tie {} prefix {}\n",
      model::family_name(c.family), c.vocab_size, c.hidden_size, c.n_layers, c.first_layer, c.end_layer,
      c.intermediate_size, c.rms_norm_eps, int(c.activation), c.situ_beta, c.situ_linear_beta,
      c.attn_res_block_size, c.mxfp4_experts, c.n_mtp_layers, c.tie_word_embeddings, c.tensor_prefix);
  for (size_t i = 0; i < c.layer_kinds.size(); ++i)
    s += fmt::format("{}{}", int(c.layer_kinds[i]), i < c.ffn_kinds.size() ? int(c.ffn_kinds[i]) : 9);
  s += fmt::format("\nkda {} {} {} {} {}\n", c.kda.n_heads, c.kda.head_dim, c.kda.conv_kernel,
                   c.kda.gate_lower_bound ? *c.kda.gate_lower_bound : -1.0f, c.kda.full_rank_output_gate);
  s += fmt::format("mla {} {} {} {} {} {} {} {}\n", c.mla.n_heads, c.mla.q_lora_rank, c.mla.kv_lora_rank,
                   c.mla.qk_nope_head_dim, c.mla.qk_rope_head_dim, c.mla.v_head_dim, c.mla.output_gate,
                   c.mla.latent_norm_eps);
  s += fmt::format("moe {} {} {} {} {} {} {} {} {} {} {}\n", c.moe.n_experts, c.moe.n_experts_per_token,
                   c.moe.n_shared_experts, c.moe.intermediate_size, c.moe.renormalize, c.moe.routed_scaling_factor,
                   c.moe.n_groups, c.moe.topk_group, int(c.moe.activation), c.moe.latent_size, c.moe.latent_norm);
  s += fmt::format("fp8 {} {} {}\n", int(c.fp8.source), c.fp8.block_rows, c.fp8.block_cols);
  return s;
}

}  // namespace

Result<uint64_t> cache_fingerprint(const model::Model& model, const model::ModelCaches& caches, int block_size,
                                   std::string_view identity) {
  uint64_t h = 0xcbf29ce484222325ull;
  const std::string config = describe_config(model.config());
  h = fnv1a(h, config.data(), config.size());
  const model::ModelShard& sh = model.shard();
  const std::string shard = fmt::format("tp {}/{} ep {}/{} moe_tp {}/{} pp {}/{} block {}\n", sh.tp_rank, sh.tp_size,
                                        sh.ep_rank, sh.ep_size, sh.moe_tp_rank, sh.moe_tp_size, sh.pp_rank,
                                        sh.pp_size, block_size);
  h = fnv1a(h, shard.data(), shard.size());
  for (const model::LayerCache& L : caches.layers)
    for (const TensorView* t : {&L.mla_kv, &L.kda_state, &L.kda_conv}) {
      std::string row = "-";
      if (!t->empty()) {
        std::vector<int64_t> dims(t->shape.begin() + 1, t->shape.end());  // a row: the slot or block axis dropped
        row = fmt::format("{}{}", dtype_name(t->dtype), fmt::join(dims, "x"));
      }
      h = fnv1a(h, row.data(), row.size());
    }
  h = fnv1a(h, identity.data(), identity.size());
  // The weights: names, shapes and the first bytes of each (one small copy per tensor, once at start-up).
  backend::Backend& be = model.backend();
  std::vector<char> sample(64);
  for (const model::WeightSpec& w : model.weight_table().specs()) {
    const std::string name = fmt::format("{}{}", w.name, w.shape.to_string());
    h = fnv1a(h, name.data(), name.size());
    if (!w.dest || w.dest->empty()) continue;
    const size_t n = std::min(sample.size(), w.dest->nbytes());
    RILL_TRY(be.copy_to_host(sample.data(), w.dest->data, n));
    h = fnv1a(h, sample.data(), n);
  }
  for (const model::WeightStack& w : model.weight_table().stacks()) {
    if (!w.dest || w.dest->empty()) continue;
    const size_t n = std::min(sample.size(), w.dest->nbytes());
    RILL_TRY(be.copy_to_host(sample.data(), w.dest->data, n));
    h = fnv1a(h, sample.data(), n);
  }
  return h;
}

}  // namespace rill::runner
