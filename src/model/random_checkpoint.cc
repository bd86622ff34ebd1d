#include "model/random_checkpoint.h"

#include <algorithm>
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
Shape stored_shape(const ModelConfig& c, const std::string& name, const Shape& s) {
  if (contains(name, "_conv1d.weight")) return {s[0], 1, s[1]};
  if (contains(name, ".A_log"))
    return c.family == ModelFamily::KimiK3 ? Shape{std::max<int64_t>(s[0], c.kda.head_dim)}
                                           : Shape{1, 1, s[0], 1};
  if (contains(name, "_res_proj.weight")) return {1, s[0]};
  return s;
}

// One random tensor in its stored dtype and shape.
HostTensor random_tensor(const ModelConfig& c, const WeightSpec& s, uint64_t seed) {
  const std::string& n = s.name;
  const uint64_t ns = name_seed(seed, n);
  const Shape shape = stored_shape(c, n, s.shape);
  if (s.role == WeightRole::Packed) {
    HostTensor t = HostTensor::zeros(DType::U8, shape);
    // Logical fan-in: two codes per packed byte, 32 columns per scale.
    const bool scale = contains(n, "weight_scale");
    const float fan_in = float(s.shape[1]) * (scale ? 32.0f : 2.0f);
    // E2M1 codes uniform over all 16 have rms ~2.95; pick 2^(s-127) so weights have rms ~ 1/sqrt(fan_in).
    const int center = 127 + int(std::lround(std::log2(1.0f / (std::sqrt(fan_in) * 2.95f))));
    for (int64_t i = 0; i < t.view.numel(); ++i) {
      const float u = uniform01(ns, uint64_t(i));
      t.view.ptr<uint8_t>()[i] = scale ? uint8_t(center - 1 + int(u * 2.0f)) : uint8_t(u * 256.0f);
    }
    return t;
  }
  const bool f32 = contains(n, "A_log") || contains(n, "dt_bias") || contains(n, "_conv1d") ||
                   contains(n, "correction_bias") ||
                   (c.family == ModelFamily::KimiK3 && contains(n, "o_norm"));
  HostTensor t = HostTensor::zeros(f32 ? DType::F32 : DType::BF16, shape);
  const float fan_in = float(s.shape[s.shape.rank() - 1]);
  for (int64_t i = 0; i < t.view.numel(); ++i) {
    const uint64_t k = uint64_t(i);
    float v;
    if (contains(n, "A_log"))
      v = i < s.shape.numel() ? std::log(0.5f + 2.5f * uniform01(ns, k)) : 0.0f;  // zero pad
    else if (contains(n, "correction_bias") || contains(n, "dt_bias"))
      v = 0.3f * normal(ns, k);
    else if (contains(n, "gate.weight") && s.role == WeightRole::Matrix && contains(n, "block_sparse_moe"))
      v = 3.0f * normal(ns, k) / std::sqrt(fan_in);  // spread router scores: top-k choices are not near-ties
    else if (contains(n, "_res_proj.weight"))
      v = normal(ns, k) / std::sqrt(fan_in);
    else if (s.role == WeightRole::Vector && !contains(n, "_conv1d"))
      v = 1.0f + 0.1f * normal(ns, k);
    else if (contains(n, "embed_tokens"))
      v = normal(ns, k);
    else
      v = normal(ns, k) / std::sqrt(fan_in);
    if (f32)
      t.view.ptr<float>()[i] = v;
    else
      t.view.ptr<uint16_t>()[i] = f32_to_bf16(v);
  }
  return t;
}

std::string shard_name(int k, int n) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n);
}

}  // namespace

Status write_random_checkpoint(const std::filesystem::path& dir, const nlohmann::ordered_json& config,
                               uint64_t seed, int n_shards) {
  if (n_shards < 1) return invalid_argument("n_shards must be positive, got {}", n_shards);
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
    storage.push_back(random_tensor(cfg, s, seed));
    tensors.push_back({s.name, storage.back().view});
  }
  if (cfg.family == ModelFamily::KimiK3) {
    // A multimodal checkpoint carries its vision tower; the text model must skip it.
    for (const char* name : {"vision_tower.patch_embed.proj.weight", "mm_projector.proj.0.weight"}) {
      storage.push_back(HostTensor::zeros(DType::BF16, {4, 8}));
      tensors.push_back({name, storage.back().view});
    }
  }
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"producer", "rill write_random_checkpoint"}, {"seed", std::to_string(seed)}};
  if (n_shards == 1) return io::write_safetensors(dir / "model.safetensors", tensors, meta);
  // Shards in contiguous runs of the declared order (roughly a few layers per file, like the real ones).
  nlohmann::ordered_json index = {{"metadata", {{"total_size", 0}}},
                                  {"weight_map", nlohmann::ordered_json::object()}};
  uint64_t total = 0;
  const size_t per = (tensors.size() + size_t(n_shards) - 1) / size_t(n_shards);
  for (int k = 0; k < n_shards; ++k) {
    const size_t b = std::min(tensors.size(), size_t(k) * per), e = std::min(tensors.size(), b + per);
    std::vector<io::NamedTensor> part(tensors.begin() + int64_t(b), tensors.begin() + int64_t(e));
    for (const auto& t : part) {
      index["weight_map"][t.name] = shard_name(k, n_shards);
      total += t.view.nbytes();
    }
    RILL_TRY(io::write_safetensors(dir / shard_name(k, n_shards), part, meta));
  }
  index["metadata"]["total_size"] = total;
  std::ofstream f(dir / "model.safetensors.index.json");
  f << index.dump(2) << "\n";
  if (!f) return invalid_argument("cannot write {}", (dir / "model.safetensors.index.json").string());
  return {};
}

nlohmann::ordered_json tiny_kimi_k3_config(int vocab_size, int bos_token_id, int eos_token_id) {
  using Json = nlohmann::ordered_json;
  const Json quantization = {
      {"quant_method", "compressed-tensors"},
      {"format", "mxfp4-pack-quantized"},
      {"quantization_status", "compressed"},
      {"config_groups",
       {{"group_0",
         {{"format", "mxfp4-pack-quantized"},
          {"targets", {"Linear"}},
          {"weights",
           {{"type", "float"},
            {"num_bits", 4},
            {"strategy", "group"},
            {"group_size", 32},
            {"symmetric", true},
            {"dynamic", false},
            {"scale_dtype", "torch.uint8"},
            {"actorder", nullptr},
            {"block_structure", nullptr}}},
          {"input_activations", nullptr},
          {"output_activations", nullptr}}}}},
      {"ignore",
       {"re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
        "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"}},
  };
  const Json text = {
      {"architectures", {"KimiLinearForCausalLM"}},
      {"model_type", "kimi_linear"},
      {"vocab_size", vocab_size},
      {"hidden_size", 128},
      {"num_hidden_layers", 7},
      {"intermediate_size", 192},
      {"num_attention_heads", 2},
      {"num_key_value_heads", 2},
      {"head_dim", 64},
      {"hidden_act", "situ"},
      {"activation_situ_beta", 4.0},
      {"activation_situ_linear_beta", 25.0},
      {"rms_norm_eps", 1e-5},
      {"max_position_embeddings", 1048576},
      {"q_lora_rank", 64},
      {"kv_lora_rank", 512},
      {"qk_nope_head_dim", 128},
      {"qk_rope_head_dim", 64},
      {"v_head_dim", 128},
      {"mla_use_nope", true},
      {"mla_use_output_gate", true},
      {"first_k_dense_replace", 1},
      {"moe_layer_freq", 1},
      {"num_experts", 8},
      {"num_experts_per_token", 2},
      {"num_shared_experts", 2},
      {"moe_intermediate_size", 32},
      {"routed_expert_hidden_size", 64},
      {"latent_moe_use_norm", true},
      {"moe_router_activation_func", "sigmoid"},
      {"moe_renormalize", true},
      {"routed_scaling_factor", 1.0},
      {"use_grouped_topk", true},
      {"num_expert_group", 1},
      {"topk_group", 1},
      {"topk_method", "noaux_tc"},
      {"num_nextn_predict_layers", 0},
      {"attn_res_block_size", 3},
      {"tie_word_embeddings", false},
      {"bos_token_id", bos_token_id},
      {"eos_token_id", eos_token_id},
      {"linear_attn_config",
       {{"head_dim", 128},
        {"num_heads", 2},
        {"short_conv_kernel_size", 4},
        {"gate_lower_bound", -5.0},
        {"use_full_rank_gate", true},
        {"kda_layers", {1, 2, 4, 5}},
        {"full_attn_layers", {3, 6, 7}}}},
      {"quantization_config", quantization},
  };
  return {
      {"architectures", {"KimiK3ForConditionalGeneration"}},
      {"model_type", "kimi_k3"},
      {"bos_token_id", bos_token_id},
      {"eos_token_id", eos_token_id},
      {"tie_word_embeddings", false},
      {"text_config", text},
      {"vision_config", {{"patch_size", 14}, {"vt_hidden_size", 8}, {"mm_projector_type", "patchmergerv2"}}},
  };
}

}  // namespace rill::model
