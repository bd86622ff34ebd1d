// ModelConfig: one validated description of a Kimi model, parsed from config.json in either the original
// Moonshot form (`linear_attn_config`, 1-based `kda_layers`/`full_attn_layers`, `num_experts`,
// `moe_renormalize`, ...) or the transformers-normalised form (`layer_types`, `n_routed_experts`,
// `norm_topk_prob`, ...). Spec §1.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::model {

enum class ModelFamily { KimiLinear, KimiK3 };
enum class LayerKind { Kda, Mla };        // the token mixer of a decoder layer
enum class FfnKind { Dense, Moe };        // the feed-forward of a decoder layer
enum class GluActivation { Silu, Situ };  // SwiGLU (Kimi Linear) or SiTU-GLU (K3)
enum class RouterActivation { Sigmoid, Softmax };

const char* family_name(ModelFamily f);
const char* layer_kind_name(LayerKind k);

struct KdaConfig {
  int n_heads = 0;
  int head_dim = 0;     // d_k == d_v
  int conv_kernel = 0;  // short causal conv width (4)
  // K3: g = lb * sigmoid(exp(A_log) * (g + dt_bias)); Kimi Linear (unset): g = -exp(A_log) * softplus(...).
  std::optional<float> gate_lower_bound;
  bool full_rank_output_gate = false;  // K3: one g_proj; Kimi Linear: g_b_proj(g_a_proj(x))
  int projection_size() const { return n_heads * head_dim; }
};

struct MlaConfig {
  int n_heads = 0;
  int q_lora_rank = 0;  // 0: a full q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;  // never rotated (NoPE), but part of the key
  int v_head_dim = 0;
  bool output_gate = false;       // K3: o = o * sigmoid(g_proj(u)) before o_proj
  float latent_norm_eps = 1e-6f;  // q_a_layernorm / kv_a_layernorm are built with the default eps (spec §7.1)
  int qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int cache_width() const { return kv_lora_rank + qk_rope_head_dim; }  // latent c + k_pe per token
};

struct MoeConfig {
  int n_experts = 0;
  int n_experts_per_token = 0;
  int n_shared_experts = 0;
  int intermediate_size = 0;  // per expert
  bool renormalize = true;
  float routed_scaling_factor = 1.0f;
  int n_groups = 1;
  int topk_group = 1;
  RouterActivation activation = RouterActivation::Sigmoid;
  int latent_size = 0;  // K3 latent MoE width (routed_expert_hidden_size); 0 = experts run on the hidden
  bool latent_norm = false;
  bool grouped() const { return n_groups > 1 && topk_group < n_groups; }
};

// FP8 (E4M3) weights, issue #35: read from an FP8 checkpoint (its quantization_config) or quantized from a bf16
// one at load (`--quantization fp8`). Weight-only: activations stay in the activation dtype.
enum class Fp8Source : uint8_t { None, Checkpoint, QuantizeAtLoad };
struct Fp8Config {
  Fp8Source source = Fp8Source::None;
  // The checkpoint's scale blocks (DeepSeek weight_block_size [128, 128], or per channel: 1 x the whole row,
  // backend::Fp8Blocks::kWholeRow), or those quantized to at load: 128 x 128 (`fp8`) or per channel
  // (`ptpc_fp8`).
  int32_t block_rows = 128, block_cols = 128;
  std::string scale_suffix = "weight_scale_inv";  // checkpoint: DeepSeek's; compressed-tensors': "weight_scale"
  // Checkpoint modules stored unquantized (modules_to_not_convert / ignored_layers / compressed-tensors ignore):
  // a module name, or "re:" + a regular expression matched against the whole module name.
  std::vector<std::string> ignore;
};

struct ModelConfig;
// --quantization (vLLM's flag): "" or "none" leave the checkpoint as stored; "fp8" quantizes its bf16
// matrices to FP8 E4M3 with 128 x 128 block scales at load, "ptpc_fp8" (vLLM's per-token-per-channel FP8)
// with one scale per weight row, and the FP8 prefill expert GEMMs then scale activations per token instead of
// per 128 columns (an FP8 checkpoint stays as it is). Anything else is refused.
Status apply_quantization(ModelConfig& config, const std::string& quantization);
// The --quantization value that gives this config's FP8 weights when they are quantized at load (""
// otherwise).
std::string quantization_flag(const ModelConfig& config);

struct ModelConfig {
  ModelFamily family = ModelFamily::KimiLinear;
  int vocab_size = 0;
  int hidden_size = 0;
  int n_layers = 0;
  int intermediate_size = 0;  // dense MLP width
  float rms_norm_eps = 1e-5f;
  GluActivation activation = GluActivation::Silu;
  float situ_beta = 0.0f, situ_linear_beta = 0.0f;
  std::vector<LayerKind> layer_kinds;
  std::vector<FfnKind> ffn_kinds;
  KdaConfig kda;
  MlaConfig mla;
  MoeConfig moe;
  int attn_res_block_size = 0;  // K3 Block AttnRes; 0 = plain residuals
  // K3: the routed experts are stored as compressed-tensors `mxfp4-pack-quantized` (weight_packed U8 [out,
  // in/2] + weight_scale E8M0 [out, in/32]), weight-only; everything else stays dense (spec §1.4, §2.4).
  bool mxfp4_experts = false;
  Fp8Config fp8;
  // num_nextn_predict_layers: MTP draft layers stored after the decoder (layers n_layers..); loaded by nobody
  // yet, so K3 checkpoints that carry them are accepted and the layers skipped (spec §5).
  int n_mtp_layers = 0;
  bool tie_word_embeddings = false;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  int64_t max_position_embeddings = 0;
  std::string tensor_prefix;  // "" for Kimi Linear, "language_model." for K3
  // The decoder layers this rank runs, [first_layer, end_layer) (a pipeline stage: shard_config); end_layer 0
  // means all of them. Caches are allocated for these layers only.
  int first_layer = 0, end_layer = 0;
  int stage_end() const { return end_layer > 0 ? end_layer : n_layers; }
  bool holds_layer(int i) const { return i >= first_layer && i < stage_end(); }
  bool first_stage() const { return first_layer == 0; }
  bool last_stage() const { return stage_end() == n_layers; }
  int n_held_layers_of(LayerKind k) const;

  static Result<ModelConfig> from_json(const nlohmann::ordered_json& json, std::string_view label);
  static Result<ModelConfig> load(const std::filesystem::path& model_dir);  // MODEL_DIR/config.json

  int n_layers_of(LayerKind k) const;
  // Per-token MLA latent cache bytes (all MLA layers) at the given element size.
  int64_t kv_bytes_per_token(int elem_bytes) const;
  // Per-sequence KDA state: fp32 recurrent state of every KDA layer; conv windows at the given element size.
  int64_t kda_state_bytes_per_sequence() const;
  int64_t kda_conv_bytes_per_sequence(int elem_bytes) const;
  // K3 Block AttnRes: how many block snapshots a forward pass holds at most (ceil(n_layers / S)).
  int attn_res_max_blocks() const {
    return attn_res_block_size > 0 ? (n_layers + attn_res_block_size - 1) / attn_res_block_size : 0;
  }
};

}  // namespace rill::model
