// Writes a checkpoint with seeded random weights for any kimi_linear or kimi_k3 config, in the real Hugging
// Face layout (original tensor names and stored shapes; F32 for A_log, dt_bias, conv taps and the router bias,
// BF16 for everything else). Values keep activations O(1): matrices ~ N(0, 1/fan_in), embeddings ~ N(0, 1),
// norms ~ 1 + N(0, 0.1^2). Used by `rill tiny-model` and by tests that want a fresh model every run.
// Kimi K3 (spec §2.3-§2.5): tensors under `language_model.`, A_log zero-padded to [max(heads, head_dim)],
// AttnRes pseudo-queries stored [1, H] (~ N(0, 1/H), so depth mixes are far from uniform), o_norm in F32,
// routed experts as MXFP4 `weight_packed` (random E2M1 codes) + `weight_scale` (E8M0 near 1/sqrt(fan_in))
// when the config has the mxfp4 quantization_config, and a few vision tensors the text model must skip.
#pragma once

#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::model {

// n_shards > 1 writes `model-0000k-of-0000n.safetensors` files and `model.safetensors.index.json`.
Status write_random_checkpoint(const std::filesystem::path& dir, const nlohmann::ordered_json& config, uint64_t seed,
                               int n_shards = 1);

// A tiny Kimi K3 config.json in the released layout (spec §1.2): nested `text_config` with the MXFP4
// quantization_config inside, real per-head sizes (KDA 128, MLA 512 + 64 / 128), hidden 128, latent MoE width
// 64, 7 layers with AttnRes blocks of 3 (snapshots at layers 0, 3, 6), MLA at 0-based layers 2, 5, 6 (the
// double-MLA tail), 8 experts (top 2) and 2 shared experts.
nlohmann::ordered_json tiny_kimi_k3_config(int vocab_size, int bos_token_id, int eos_token_id);

}  // namespace rill::model
