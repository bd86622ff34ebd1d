// The shape of the project's own tiny model and its tokenizer (rill tiny-model).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::cli {

// Moonshot-form config.json: real per-head dimensions (KDA 128, MLA 512+64 / 128), tiny everything else.
nlohmann::ordered_json tiny_model_config();

// The tiny Kimi K3 (model/random_checkpoint's tiny_kimi_k3_config) over the same vocabulary, with K3's ids:
// bos = <|begin_of_text|>-slot, eos = <|end_of_msg|>.
nlohmann::ordered_json tiny_k3_model_config();

// tiktoken.model (BPE trained on the repository's LICENSE text) and tokenizer_config.json with the Kimi
// control-block layout and a K2-style chat template; with `k3`, K3's control block and no template (K3 chats
// are rendered natively).
Status write_tiny_tokenizer(const std::filesystem::path& dir, bool k3 = false);

// tiktoken.model from `ranks` and tokenizer_config.json with the Kimi Linear control block after them and the
// same K2-style chat template (rill train-tokenizer: the demo model's vocabulary).
Status write_kimi_linear_tokenizer(const std::filesystem::path& dir, const std::vector<std::string>& ranks);

}  // namespace rill::cli
