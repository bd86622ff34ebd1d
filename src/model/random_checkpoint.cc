#include "model/random_checkpoint.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include "backend/backend.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace rill::model {
namespace {

// N(0, 1) from the counter-based generator (Box-Muller): values depend only on (seed, index).
float normal(uint64_t seed, uint64_t i) {
  const float u1 = std::max(uniform01(seed, 2 * i), 1e-7f), u2 = uniform01(seed, 2 * i + 1);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = seed;
  for (char ch : name) h = mix64(h ^ uint8_t(ch));
  return h;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The stored (Hugging Face) shape of a tensor the model declares in its own shape.
Shape stored_shape(const std::string& name, const Shape& s) {
  if (contains(name, "_conv1d.weight")) return {s[0], 1, s[1]};
  if (contains(name, ".A_log")) return {1, 1, s[0], 1};
  return s;
}

}  // namespace

Status write_random_checkpoint(const std::filesystem::path& dir, const nlohmann::ordered_json& config, uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return invalid_argument("cannot create {}: {}", dir.string(), ec.message());
  {
    std::ofstream f(dir / "config.json");
    f << config.dump(2) << "\n";
    if (!f) return invalid_argument("cannot write {}", (dir / "config.json").string());
  }
  RILL_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::from_json(config, (dir / "config.json").string()));
  auto cpu = backend::make_cpu_backend();
  RILL_ASSIGN_OR_RETURN(auto m, build_model(cfg, *cpu));
  std::vector<HostTensor> storage;
  std::vector<io::NamedTensor> tensors;
  for (const WeightSpec& s : m->weight_table().specs()) {
    const bool f32 = contains(s.name, "A_log") || contains(s.name, "dt_bias") || contains(s.name, "_conv1d") ||
                     contains(s.name, "correction_bias");
    HostTensor t = HostTensor::zeros(f32 ? DType::F32 : DType::BF16, stored_shape(s.name, s.shape));
    const uint64_t ns = name_seed(seed, s.name);
    const float fan_in = float(s.shape[s.shape.rank() - 1]);
    for (int64_t i = 0; i < t.view.numel(); ++i) {
      const uint64_t k = uint64_t(i);
      float v;
      if (contains(s.name, "A_log")) v = std::log(0.5f + 2.5f * uniform01(ns, k));
      else if (contains(s.name, "correction_bias") || contains(s.name, "dt_bias")) v = 0.3f * normal(ns, k);
      else if (contains(s.name, "gate.weight") && s.role == WeightRole::Matrix && contains(s.name, "block_sparse_moe"))
        v = 3.0f * normal(ns, k) / std::sqrt(fan_in);  // spread router scores: top-k choices are not near-ties
      else if (s.role == WeightRole::Vector && !contains(s.name, "_conv1d")) v = 1.0f + 0.1f * normal(ns, k);
      else if (contains(s.name, "embed_tokens")) v = normal(ns, k);
      else v = normal(ns, k) / std::sqrt(fan_in);
      if (f32) t.view.ptr<float>()[i] = v;
      else t.view.ptr<uint16_t>()[i] = f32_to_bf16(v);
    }
    tensors.push_back({s.name, t.view});
    storage.push_back(std::move(t));
  }
  return io::write_safetensors(dir / "model.safetensors", tensors,
                               {{"format", "pt"}, {"producer", "rill write_random_checkpoint"}, {"seed", std::to_string(seed)}});
}

}  // namespace rill::model
