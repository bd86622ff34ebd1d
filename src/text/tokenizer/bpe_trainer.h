// A small byte-level BPE trainer and the writers for a model directory's tokenizer files, so the project's
// own tiny demo model loads its tokenizer through the same Tokenizer::load as the real checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rill::text {

// Ranks 0..255 are the 256 single bytes in byte order; then, until n_ranks tokens exist, the most frequent
// adjacent pair inside the Kimi pre-tokenizer's pieces is merged (ties: the pair of lower (left, right)
// ranks). Deterministic. Returns fewer than n_ranks tokens only when no adjacent pair is left, and never
// fewer than 256. A merge whose bytes already form a token reuses that token instead of adding a rank.
std::vector<std::string> train_bpe(std::string_view corpus, int n_ranks);

Status write_tiktoken_model(const std::filesystem::path& path, const std::vector<std::string>& ranks);

// Which names the control block carries: Kimi Linear / K2 (`<|im_end|>`, `<|im_user|>`, ...) or K3
// (`<|end_of_msg|>`, `<|open|>`, `<|close|>`, `<|sep|>`, ...). Offsets are those of the real files.
enum class ControlBlockLayout { KimiLinear, K3 };

struct ControlToken {
  int32_t offset;  // id - n_ranks
  std::string_view name;
  bool special;  // the config's "special" flag (false for K2's tool-call markers, K3's tag markers)
};
std::span<const ControlToken> control_block_layout(ControlBlockLayout layout);

// tokenizer_config.json with `added_tokens_decoder` at ids n_ranks + offset, plus bos/eos/unk/pad.
Status write_tokenizer_config(const std::filesystem::path& path, int32_t n_ranks,
                              ControlBlockLayout layout = ControlBlockLayout::KimiLinear);

}  // namespace rill::text
