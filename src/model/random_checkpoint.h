// Writes a checkpoint with seeded random weights for any kimi_linear config, in the real Hugging Face
// layout (original tensor names and stored shapes; F32 for A_log, dt_bias, conv taps and the router bias,
// BF16 for everything else). Values keep activations O(1): matrices ~ N(0, 1/fan_in), embeddings ~ N(0, 1),
// norms ~ 1 + N(0, 0.1^2). Used by `rill tiny-model` and by tests that want a fresh model every run.
#pragma once

#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::model {

Status write_random_checkpoint(const std::filesystem::path& dir, const nlohmann::ordered_json& config, uint64_t seed);

}  // namespace rill::model
