// rill inspect MODEL_DIR: what the config describes, what the checkpoint holds, what a sequence costs, and
// whether `rill serve` can run the directory (weights against the config, tokenizer, stop ids, chat template)
// — without loading any weights. Exit code 0 only when it can.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "server/serving_files.h"

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
  CLI::App app{
      "Describe a checkpoint: config, tensors, per-sequence memory, and whether `rill serve` can run it "
      "(weights, tokenizer files, stop ids, chat template). Loads no weights; exit code 1 names each "
      "problem."};
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
  std::printf(
      "kda          %d heads x %d, conv %d, gate %s, output gate %s\n", c.kda.n_heads, c.kda.head_dim,
      c.kda.conv_kernel,
      c.kda.gate_lower_bound ? fmt::format("bounded ({})", *c.kda.gate_lower_bound).c_str() : "softplus",
      c.kda.full_rank_output_gate ? "full-rank" : "low-rank");
  std::printf("mla          %d heads, q %s, latent %d + %d, nope %d, v %d (NoPE)\n", c.mla.n_heads,
              c.mla.q_lora_rank ? fmt::format("LoRA {}", c.mla.q_lora_rank).c_str() : "full",
              c.mla.kv_lora_rank, c.mla.qk_rope_head_dim, c.mla.qk_nope_head_dim, c.mla.v_head_dim);
  std::printf(
      "moe          %d experts, top-%d, %d shared, width %d, groups %d/%d, renormalize %s, scale %g\n",
      c.moe.n_experts, c.moe.n_experts_per_token, c.moe.n_shared_experts, c.moe.intermediate_size,
      c.moe.topk_group, c.moe.n_groups, c.moe.renormalize ? "yes" : "no", c.moe.routed_scaling_factor);
  const int64_t params = table.n_params();
  std::printf("parameters   %s (%.1f B), %zu tensors, %s in bf16%s\n", with_commas(params).c_str(),
              double(params) / 1e9, table.specs().size(), human_bytes(double(table.stored_bytes())).c_str(),
              c.mxfp4_experts ? " with MXFP4 routed experts" : "");
  std::printf("per token    %s B of MLA latent KV (bf16, %d layers x %d)\n",
              with_commas(c.kv_bytes_per_token(2)).c_str(), c.n_layers_of(model::LayerKind::Mla),
              c.mla.cache_width());
  std::printf("per sequence %s of fp32 KDA state + %s of conv windows (bf16)\n",
              human_bytes(double(c.kda_state_bytes_per_sequence())).c_str(),
              human_bytes(double(c.kda_conv_bytes_per_sequence(2))).c_str());
  // Speculative decoding's rollback keeps one checkpoint of each sequence's slot (engine/scheduler.h).
  std::printf(
      "speculation  +%s per sequence with --speculative-config (a checkpoint of its KDA state and conv "
      "windows)\n",
      human_bytes(double(c.kda_state_bytes_per_sequence() + c.kda_conv_bytes_per_sequence(2))).c_str());

  // Everything else rill serve needs; each problem is collected, so one run names them all.
  std::vector<std::string> problems;
  auto ckpt = io::Checkpoint::open(dir);
  if (!ckpt.ok()) {
    std::printf("weights      unreadable\n");
    problems.push_back(ckpt.status().message());
  } else if (!ckpt->has_weights()) {
    std::printf("weights      missing: no *.safetensors files in %s (config only)\n", dir.c_str());
    problems.push_back(
        fmt::format("weights: no *.safetensors files in {} (rill serve needs them; only "
                    "--load-format dummy runs without)",
                    dir));
  } else {
    std::map<std::string, int64_t> by_dtype;
    for (const std::string& n : ckpt->names())
      by_dtype[std::string(dtype_name(ckpt->find(n)->info->dtype))] += 1;
    std::string dtypes;
    for (const auto& [k, v] : by_dtype) dtypes += fmt::format("{}{} {}", dtypes.empty() ? "" : ", ", v, k);
    std::printf("checkpoint   %zu tensors in %zu file(s), %s (%s)\n", ckpt->n_tensors(), ckpt->files().size(),
                human_bytes(double(ckpt->total_bytes())).c_str(), dtypes.c_str());
    if (Status st = model::check_weights(table, *ckpt); !st.ok()) problems.push_back(st.message());
  }

  // The same loading and checks as rill serve's, so the two cannot disagree about a directory.
  auto files = server::load_serving_files(dir, c);
  if (!files.ok()) {
    std::printf("tokenizer    not loaded\n");
    problems.push_back(files.status().message());
  } else {
    const text::Tokenizer& tok = *files->tokenizer;
    std::printf("tokenizer    %d ids (%d BPE ranks + %d control tokens), stop ids %s\n", tok.vocab_size(),
                tok.n_ranks(), tok.vocab_size() - tok.n_ranks(),
                fmt::format("{}", fmt::join(files->eos_token_ids, ", ")).c_str());
    if (c.family == model::ModelFamily::KimiK3) {
      std::printf("chat         native Kimi K3 renderer\n");
    } else if (files->chat_template) {
      std::printf("chat         Jinja template (%s)\n",
                  fmt::format("{}", fmt::join(files->chat_template->template_names(), ", ")).c_str());
    } else {
      std::printf("chat         no template\n");
      problems.push_back(files->chat_error.message() +
                         ": rill serve starts without one, but /v1/chat/completions answers 400 (add "
                         "chat_template.jinja from the model's Hugging Face checkpoint)");
    }
  }

  if (!problems.empty()) {
    std::printf("validation   FAILED\n");
    for (const std::string& p : problems) std::printf("  - %s\n", p.c_str());
    return 1;
  }
  std::printf(
      "validation   ok: every tensor present with the expected shape and dtype; tokenizer, stop ids and chat "
      "template load as rill serve loads them\n");
  return 0;
}

}  // namespace rill::cli
