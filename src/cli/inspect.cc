// rill inspect MODEL_DIR: what the config describes, what the checkpoint holds, what a sequence costs, and
// whether the two agree — without loading any weights.
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/common.h"
#include "io/checkpoint.h"
#include "model/config.h"

namespace rill::cli {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.{}f} {}", b, u ? 2 : 0, units[u]);
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

}  // namespace

int run_inspect(int argc, char** argv) {
  CLI::App app{"Describe a checkpoint: config, tensors, per-sequence memory, validation. Loads no weights."};
  std::string dir;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory")->required();
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;

  auto cfg = model::ModelConfig::load(dir);
  if (!cfg.ok()) return report_error("inspect", cfg.status());
  const model::ModelConfig& c = *cfg;
  auto cpu = backend::make_cpu_backend();
  auto m = model::build_model(c, *cpu);
  if (!m.ok()) return report_error("inspect", m.status());
  const model::WeightTable& table = (*m)->weight_table();

  std::printf("model        %s (%s)\n", dir.c_str(), model::family_name(c.family));
  std::printf("layers       %d: %d KDA + %d MLA; %d dense FFN + %d MoE\n", c.n_layers,
              c.n_layers_of(model::LayerKind::Kda), c.n_layers_of(model::LayerKind::Mla),
              int(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Dense)),
              int(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Moe)));
  std::printf("hidden       %d, vocab %d, max context %lld\n", c.hidden_size, c.vocab_size,
              static_cast<long long>(c.max_position_embeddings));
  std::printf("kda          %d heads x %d, conv %d, gate %s, output gate %s\n", c.kda.n_heads, c.kda.head_dim,
              c.kda.conv_kernel, c.kda.gate_lower_bound ? fmt::format("bounded ({})", *c.kda.gate_lower_bound).c_str() : "softplus",
              c.kda.full_rank_output_gate ? "full-rank" : "low-rank");
  std::printf("mla          %d heads, q %s, latent %d + %d, nope %d, v %d (NoPE)\n", c.mla.n_heads,
              c.mla.q_lora_rank ? fmt::format("LoRA {}", c.mla.q_lora_rank).c_str() : "full", c.mla.kv_lora_rank,
              c.mla.qk_rope_head_dim, c.mla.qk_nope_head_dim, c.mla.v_head_dim);
  std::printf("moe          %d experts, top-%d, %d shared, width %d, groups %d/%d, renormalize %s, scale %g\n",
              c.moe.n_experts, c.moe.n_experts_per_token, c.moe.n_shared_experts, c.moe.intermediate_size,
              c.moe.topk_group, c.moe.n_groups, c.moe.renormalize ? "yes" : "no", c.moe.routed_scaling_factor);
  const int64_t params = table.n_params();
  std::printf("parameters   %s (%.1f B), %zu tensors, %s in bf16%s\n", with_commas(params).c_str(),
              double(params) / 1e9, table.specs().size(), human_bytes(double(table.stored_bytes())).c_str(),
              c.mxfp4_experts ? " with MXFP4 routed experts" : "");
  std::printf("per token    %s B of MLA latent KV (bf16, %d layers x %d)\n", with_commas(c.kv_bytes_per_token(2)).c_str(),
              c.n_layers_of(model::LayerKind::Mla), c.mla.cache_width());
  std::printf("per sequence %s of fp32 KDA state + %s of conv windows (bf16)\n",
              human_bytes(double(c.kda_state_bytes_per_sequence())).c_str(),
              human_bytes(double(c.kda_conv_bytes_per_sequence(2))).c_str());

  auto ckpt = io::Checkpoint::open(dir);
  if (!ckpt.ok()) {
    std::printf("weights      unreadable: %s\n", ckpt.status().message().c_str());
    return 1;
  }
  if (!ckpt->has_weights()) {
    std::printf("weights      missing: no *.safetensors files in %s (config only)\n", dir.c_str());
    return 0;
  }
  std::map<std::string, int64_t> by_dtype;
  for (const std::string& n : ckpt->names()) by_dtype[std::string(dtype_name(ckpt->find(n)->info->dtype))] += 1;
  std::string dtypes;
  for (const auto& [k, v] : by_dtype) dtypes += fmt::format("{}{} {}", dtypes.empty() ? "" : ", ", v, k);
  std::printf("checkpoint   %zu tensors in %zu file(s), %s (%s)\n", ckpt->n_tensors(), ckpt->files().size(),
              human_bytes(double(ckpt->total_bytes())).c_str(), dtypes.c_str());
  if (Status st = model::check_weights(table, *ckpt); !st.ok()) {
    std::printf("validation   FAILED\n%s\n", st.message().c_str());
    return 1;
  }
  std::printf("validation   ok: every tensor present with the expected shape and dtype\n");
  return 0;
}

}  // namespace rill::cli
