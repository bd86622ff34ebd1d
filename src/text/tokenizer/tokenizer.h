// Tokenizer: tiktoken-style byte-level BPE with the Kimi pre-tokenizer and the 256-id control block.
// Loads `tiktoken.model` (base64 token bytes + rank per line) and the special tokens of
// `tokenizer_config.json` (`added_tokens_decoder`). Ids [0, n_ranks) are BPE ranks; ids
// [n_ranks, n_ranks + 256) are the control block: named tokens from the config, the rest
// `<|reserved_token_N|>`. vocab_size() == n_ranks + 256 (163840 for Kimi).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace rill::text {

class Tokenizer {
 public:
  // MODEL_DIR/tiktoken.model + MODEL_DIR/tokenizer_config.json.
  static Result<Tokenizer> load(const std::filesystem::path& model_dir);
  static Result<Tokenizer> from_files(const std::filesystem::path& tiktoken_model,
                                      const std::filesystem::path& tokenizer_config_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // allow_special: special-token strings in `text` become their ids; otherwise they are plain bytes.
  std::vector<int32_t> encode(std::string_view text, bool allow_special) const;
  // Same, appending to `out` (segment-wise encoders call this once per segment).
  void encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;
  // Concatenated token bytes (specials as their names), invalid UTF-8 replaced by U+FFFD.
  // Fails, naming the id, for ids outside [0, vocab_size()).
  Result<std::string> decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const;
  int32_t n_ranks() const;
  bool is_special(int32_t id) const;  // in the control block
  // A control-block id that skip_special_tokens leaves out of text (Hugging Face's special tokens): every id
  // of the block except added tokens marked `"special": false`, which stay text that output parsers read.
  bool is_skipped_special(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view special_name) const;  // "<|im_end|>" -> 163586
  // Raw bytes of a rank token, or the name of a special token. Precondition: 0 <= id < vocab_size().
  std::string_view token_bytes(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streams text out of generated ids: never emits a broken UTF-8 sequence, never drops bytes.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  // Appends one id; returns the newly completed text (possibly empty while a UTF-8 sequence is open).
  Result<std::string> push(int32_t id);
  // Emits whatever is left; an incomplete trailing sequence becomes U+FFFD. The concatenation of every
  // push() and the final flush() equals tokenizer.decode(all ids).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;
};

}  // namespace rill::text
