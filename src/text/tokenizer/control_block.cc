#include "text/tokenizer/control_block.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include <nlohmann/json.hpp>

namespace rill::text {

Result<ControlBlock> parse_control_block(std::string_view config_json, std::string_view file_name,
                                         int32_t n_ranks) {
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(config_json);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("{}: {}", file_name, e.what());
  }
  ControlBlock block{std::vector<std::string>(kControlBlockSize), std::vector<bool>(kControlBlockSize, true)};
  std::vector<std::string>& names = block.names;
  for (int32_t i = 0; i < kControlBlockSize; ++i)
    names[i] = fmt::format("<|reserved_token_{}|>", n_ranks + i);
  if (!config.is_object()) return invalid_argument("{}: expected a JSON object", file_name);
  const auto decoder = config.find("added_tokens_decoder");
  if (decoder == config.end()) return block;
  if (!decoder->is_object()) return invalid_argument("{}: added_tokens_decoder must be an object", file_name);
  for (const auto& [key, entry] : decoder->items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size()) {
      return invalid_argument("{}: added_tokens_decoder key '{}' is not a token id", file_name, key);
    }
    if (id < n_ranks || id >= n_ranks + kControlBlockSize) {
      return invalid_argument("{}: added_tokens_decoder id {} is outside the control block [{}, {})",
                              file_name, id, n_ranks, n_ranks + kControlBlockSize);
    }
    const auto content = entry.is_object() ? entry.find("content") : entry.end();
    if (!entry.is_object() || content == entry.end() || !content->is_string() ||
        content->get_ref<const std::string&>().empty()) {
      return invalid_argument("{}: added_tokens_decoder[\"{}\"].content must be a non-empty string",
                              file_name, key);
    }
    names[id - n_ranks] = content->get<std::string>();
    if (const auto special = entry.find("special"); special != entry.end()) {
      if (!special->is_boolean())
        return invalid_argument("{}: added_tokens_decoder[\"{}\"].special must be a boolean", file_name, key);
      block.special[id - n_ranks] = special->get<bool>();
    }
  }
  std::unordered_map<std::string_view, int32_t> seen;
  for (int32_t i = 0; i < kControlBlockSize; ++i) {
    const auto [it, inserted] = seen.emplace(names[i], n_ranks + i);
    if (!inserted) {
      return invalid_argument("{}: special token '{}' names both id {} and id {}", file_name, names[i],
                              it->second, n_ranks + i);
    }
  }
  return block;
}

SpecialMatcher::SpecialMatcher(const std::vector<std::string>& names, int32_t first_id) {
  for (size_t i = 0; i < names.size(); ++i) {
    ids_.emplace(names[i], first_id + static_cast<int32_t>(i));
    if (std::find(lengths_.begin(), lengths_.end(), names[i].size()) == lengths_.end()) {
      lengths_.push_back(names[i].size());
    }
    first_byte_[static_cast<unsigned char>(names[i][0])] = true;
  }
  std::sort(lengths_.rbegin(), lengths_.rend());
}

SpecialMatcher::Match SpecialMatcher::find(std::string_view text, size_t from) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) continue;
    for (const size_t len : lengths_) {
      if (len > text.size() - pos) continue;
      const auto it = ids_.find(text.substr(pos, len));
      if (it != ids_.end()) return {pos, len, it->second};
    }
  }
  return {};
}

int32_t SpecialMatcher::id_of(std::string_view name) const {
  const auto it = ids_.find(name);
  return it == ids_.end() ? -1 : it->second;
}

}  // namespace rill::text
