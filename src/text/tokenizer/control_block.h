// The 256-id control block after the BPE ranks: names from `tokenizer_config.json` and how to find them
// in text when special tokens are allowed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace rill::text {

inline constexpr int32_t kControlBlockSize = 256;

// Ids n_ranks .. n_ranks+255. Names: `added_tokens_decoder[id].content` where present, else
// `<|reserved_token_{id}|>` (the reference's rule). `special`: false only for added tokens whose entry says
// `"special": false` (K2's tool-call markers and think tags, K3's <|open|> <|close|> <|sep|>): those are text
// that decoding with skip_special_tokens keeps, as Hugging Face does; reserved ids are special.
struct ControlBlock {
  std::vector<std::string> names;
  std::vector<bool> special;
};
// Entries outside the block, non-string contents, a non-boolean `special`, empty or duplicate names, and JSON
// syntax errors are reported with the file name (and line for syntax errors).
Result<ControlBlock> parse_control_block(std::string_view config_json, std::string_view file_name,
                                         int32_t n_ranks);

// Finds special-token names in text: the leftmost occurrence (the longest name if two start there).
class SpecialMatcher {
 public:
  SpecialMatcher() = default;
  SpecialMatcher(const std::vector<std::string>& names, int32_t first_id);

  struct Match {
    size_t pos = std::string_view::npos;  // npos: none
    size_t len = 0;
    int32_t id = -1;
  };
  Match find(std::string_view text, size_t from) const;
  // Exact name -> id, or -1.
  int32_t id_of(std::string_view name) const;

 private:
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, NameHash, std::equal_to<>> ids_;
  std::vector<size_t> lengths_;  // distinct name lengths, longest first
  bool first_byte_[256] = {};
};

}  // namespace rill::text
