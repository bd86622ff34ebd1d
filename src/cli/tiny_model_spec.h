// The shape of the project's own tiny model and its tokenizer (rill tiny-model).
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::cli {

// Moonshot-form config.json: real per-head dimensions (KDA 128, MLA 512+64 / 128), tiny everything else.
nlohmann::ordered_json tiny_model_config();

// tiktoken.model (BPE trained on the repository's LICENSE text) and tokenizer_config.json with the Kimi
// control-block layout and a K2-style chat template.
Status write_tiny_tokenizer(const std::filesystem::path& dir);

}  // namespace rill::cli
