// rill tiny-model OUT_DIR: the project's own small Kimi Linear checkpoint (or with --kimi-k3 a Kimi K3 one),
// written in the real Hugging Face layout (Moonshot config.json, safetensors with the original tensor names)
// with seeded random weights, a byte-level BPE tokenizer trained on the project's LICENSE text and (Kimi
// Linear) a chat template. Used by the README's demo and the tests.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/tiny_model_spec.h"
#include "model/config.h"
#include "model/random_checkpoint.h"

namespace rill::cli {

int run_tiny_model(int argc, char** argv) {
  CLI::App app{
      "Write the project's own small random Kimi Linear (or Kimi K3) model: config, weights, tokenizer."};
  std::string out_dir;
  uint64_t seed = 20261130;
  bool force = false, k3 = false;
  app.add_option("OUT_DIR", out_dir, "directory to create")->required();
  app.add_flag(
      "--kimi-k3", k3,
      "a tiny Kimi K3 instead (nested config, AttnRes, latent MoE, MXFP4 experts; runs on CPU and CUDA)");
  app.add_option("--seed", seed, "weight seed")->capture_default_str();
  app.add_flag("--force", force, "overwrite an existing model");
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;

  const std::filesystem::path dir(out_dir);
  if (std::filesystem::exists(dir / "model.safetensors") && !force) {
    std::fprintf(stderr, "rill tiny-model: %s already holds a model (use --force to rebuild)\n",
                 out_dir.c_str());
    return 0;
  }
  const nlohmann::ordered_json config = k3 ? tiny_k3_model_config() : tiny_model_config();
  if (Status st = model::write_random_checkpoint(dir, config, seed); !st.ok())
    return report_error("tiny-model", st);
  if (Status st = write_tiny_tokenizer(dir, k3); !st.ok()) return report_error("tiny-model", st);
  auto cfg = model::ModelConfig::from_json(config, "tiny-model");
  std::fprintf(stderr, "wrote %s: %s, %d layers, hidden %d, vocab %d (seed %llu)\n", out_dir.c_str(),
               model::family_name(cfg->family), cfg->n_layers, cfg->hidden_size, cfg->vocab_size,
               static_cast<unsigned long long>(seed));
  return 0;
}

}  // namespace rill::cli
