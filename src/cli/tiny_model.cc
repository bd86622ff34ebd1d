// rill tiny-model OUT_DIR: the project's own small Kimi Linear checkpoint, written in the real Hugging Face
// layout (Moonshot config.json, safetensors with the original tensor names) with seeded random weights and a
// byte-level BPE tokenizer trained on the project's LICENSE text. Used by the README's demo and the tests.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/tiny_model_spec.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace rill::cli {
namespace {

namespace fs = std::filesystem;

// N(0, 1) from the counter-based generator (Box-Muller), so the weights depend only on (seed, name, index).
float normal(uint64_t seed, uint64_t i) {
  const float u1 = std::max(uniform01(seed, 2 * i), 1e-7f), u2 = uniform01(seed, 2 * i + 1);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = seed;
  for (char ch : name) h = mix64(h ^ uint8_t(ch));
  return h;
}

// The stored (Hugging Face) shape of a tensor the model declares in its own shape.
Shape stored_shape(const std::string& name, const Shape& s) {
  auto ends_with = [&](const char* suf) { return name.size() >= std::strlen(suf) && name.compare(name.size() - std::strlen(suf), std::string::npos, suf) == 0; };
  if (ends_with("_conv1d.weight")) return {s[0], 1, s[1]};
  if (ends_with(".A_log")) return {1, 1, s[0], 1};
  return s;
}

}  // namespace

int run_tiny_model(int argc, char** argv) {
  CLI::App app{"Write the project's own small random Kimi Linear model (config, weights, tokenizer)."};
  std::string out_dir;
  uint64_t seed = 20261130;
  bool force = false;
  app.add_option("OUT_DIR", out_dir, "directory to create")->required();
  app.add_option("--seed", seed, "weight seed")->capture_default_str();
  app.add_flag("--force", force, "overwrite an existing directory");
  if (int rc = parse_args(app, argc, argv); rc >= 0) return rc;

  const fs::path dir(out_dir);
  if (fs::exists(dir / "config.json") && !force) {
    std::fprintf(stderr, "rill tiny-model: %s already holds a model (use --force to rebuild)\n", out_dir.c_str());
    return 0;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return report_error("tiny-model", invalid_argument("cannot create {}: {}", out_dir, ec.message()));

  const nlohmann::ordered_json config = tiny_model_config();
  {
    std::ofstream f(dir / "config.json");
    f << config.dump(2) << "\n";
    if (!f) return report_error("tiny-model", invalid_argument("cannot write {}/config.json", out_dir));
  }
  auto cfg = model::ModelConfig::from_json(config, "tiny-model config");
  if (!cfg.ok()) return report_error("tiny-model", cfg.status());
  auto cpu = backend::make_cpu_backend();
  auto m = model::build_model(*cfg, *cpu);
  if (!m.ok()) return report_error("tiny-model", m.status());

  // Every declared tensor, in the dtype real checkpoints use: F32 for A_log, dt_bias, conv taps and the
  // router bias; BF16 for everything else.
  std::vector<HostTensor> storage;
  std::vector<io::NamedTensor> tensors;
  for (const model::WeightSpec& s : (*m)->weight_table().specs()) {
    const bool f32 = s.name.find("A_log") != std::string::npos || s.name.find("dt_bias") != std::string::npos ||
                     s.name.find("_conv1d") != std::string::npos || s.name.find("correction_bias") != std::string::npos;
    const bool vector = s.role == model::WeightRole::Vector;
    HostTensor t = HostTensor::zeros(f32 ? DType::F32 : DType::BF16, stored_shape(s.name, s.shape));
    const uint64_t ns = name_seed(seed, s.name);
    const float fan_in = float(s.shape[s.shape.rank() - 1]);
    for (int64_t i = 0; i < t.view.numel(); ++i) {
      float v;
      if (s.name.find("A_log") != std::string::npos) v = std::log(0.5f + 2.5f * uniform01(ns, uint64_t(i)));
      else if (s.name.find("correction_bias") != std::string::npos || s.name.find("dt_bias") != std::string::npos) v = 0.3f * normal(ns, uint64_t(i));
      else if (vector && s.name.find("_conv1d") == std::string::npos) v = 1.0f + 0.1f * normal(ns, uint64_t(i));
      else if (s.name.find("embed_tokens") != std::string::npos) v = normal(ns, uint64_t(i));
      else v = normal(ns, uint64_t(i)) / std::sqrt(fan_in);
      if (f32) t.view.ptr<float>()[i] = v;
      else t.view.ptr<uint16_t>()[i] = f32_to_bf16(v);
    }
    tensors.push_back({s.name, t.view});
    storage.push_back(std::move(t));
  }
  if (Status st = io::write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}, {"producer", "rill tiny-model"}});
      !st.ok())
    return report_error("tiny-model", st);
  if (Status st = write_tiny_tokenizer(dir); !st.ok()) return report_error("tiny-model", st);
  std::fprintf(stderr, "wrote %s: %zu tensors, %.1f M parameters, vocab %d\n", out_dir.c_str(), tensors.size(),
               double((*m)->weight_table().n_params()) / 1e6, cfg->vocab_size);
  return 0;
}

}  // namespace rill::cli
