#include "text/tokenizer/tokenizer.h"

#include "text/tokenizer/bpe_ranks.h"
#include "text/tokenizer/control_block.h"
#include "text/tokenizer/kimi_pretokenizer.h"
#include "text/tokenizer/reference_chunks.h"
#include "text/tokenizer/tiktoken_file.h"
#include "text/tokenizer/utf8.h"

namespace rill::text {

struct Tokenizer::Impl {
  BpeRanks ranks;
  ControlBlock control;  // ids n_ranks .. n_ranks + 255
  SpecialMatcher specials;
  KimiPreTokenizer pretokenizer;

  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
    pretokenizer.split(text, [&](std::string_view piece) { ranks.encode_piece(piece, out); });
  }

  // tiktoken's encode(allowed_special="all") on one chunk: the text between specials is split on its own.
  void encode_chunk(std::string_view chunk, bool allow_special, std::vector<int32_t>& out) const {
    if (!allow_special) {
      encode_ordinary(chunk, out);
      return;
    }
    for (size_t pos = 0;;) {
      const SpecialMatcher::Match m = specials.find(chunk, pos);
      if (m.pos == std::string_view::npos) {
        encode_ordinary(chunk.substr(pos), out);
        return;
      }
      encode_ordinary(chunk.substr(pos, m.pos - pos), out);
      out.push_back(m.id);
      pos = m.pos + m.len;
    }
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& model_dir) {
  return from_files(model_dir / "tiktoken.model", model_dir / "tokenizer_config.json");
}

Result<Tokenizer> Tokenizer::from_files(const std::filesystem::path& tiktoken_model,
                                        const std::filesystem::path& tokenizer_config_json) {
  RILL_ASSIGN_OR_RETURN(std::vector<std::string> ranks, read_tiktoken_model(tiktoken_model));
  RILL_ASSIGN_OR_RETURN(const std::string config, read_file(tokenizer_config_json));
  const auto n_ranks = static_cast<int32_t>(ranks.size());
  RILL_ASSIGN_OR_RETURN(ControlBlock control,
                        parse_control_block(config, tokenizer_config_json.string(), n_ranks));
  auto impl = std::make_unique<Impl>();
  impl->ranks = BpeRanks(ranks);
  impl->specials = SpecialMatcher(control.names, n_ranks);
  impl->control = std::move(control);
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  encode_append(text, allow_special, ids);
  return ids;
}

void Tokenizer::encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  for_each_reference_chunk(text,
                           [&](std::string_view chunk) { impl_->encode_chunk(chunk, allow_special, out); });
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return out_of_range("token id {} is outside the vocabulary [0, {})", id, vocab_size());
    }
    bytes += token_bytes(id);
  }
  std::string text;
  utf8_append_sanitized(bytes, text);
  return text;
}

int32_t Tokenizer::vocab_size() const {
  return n_ranks() + kControlBlockSize;
}
int32_t Tokenizer::n_ranks() const {
  return impl_->ranks.n_ranks();
}
bool Tokenizer::is_special(int32_t id) const {
  return id >= n_ranks() && id < vocab_size();
}
bool Tokenizer::is_skipped_special(int32_t id) const {
  return is_special(id) && impl_->control.special[size_t(id - n_ranks())];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view special_name) const {
  const int32_t id = impl_->specials.id_of(special_name);
  if (id < 0) return std::nullopt;
  return id;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < n_ranks()) return impl_->ranks.token(id);
  return impl_->control.names[size_t(id - n_ranks())];
}

Result<std::string> IncrementalDetokenizer::push(int32_t id) {
  if (id < 0 || id >= tokenizer_->vocab_size()) {
    return out_of_range("token id {} is outside the vocabulary [0, {})", id, tokenizer_->vocab_size());
  }
  pending_ += tokenizer_->token_bytes(id);
  // Hold back only a trailing sequence that the next token may still complete; everything before it
  // decodes exactly as it would in the whole text.
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out;
  utf8_append_sanitized(std::string_view(pending_).substr(0, pending_.size() - keep), out);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  utf8_append_sanitized(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace rill::text
