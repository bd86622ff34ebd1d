#include "server/serving_files.h"

#include <algorithm>

namespace rill::server {
namespace {

// An id the config names must be one the model can produce (a logit) and the tokenizer can decode.
Status check_token_id(const char* field, int32_t id, const model::ModelConfig& config,
                      const text::Tokenizer& tokenizer) {
  const int32_t n = std::min(config.vocab_size, tokenizer.vocab_size());
  if (id >= 0 && id < n) return {};
  return invalid_argument(
      "config.json: {} {} is outside the vocabulary [0, {}) (config vocab_size {}, tokenizer {} ids): the "
      "config and the tokenizer files must come from the same checkpoint",
      field, id, n, config.vocab_size, tokenizer.vocab_size());
}

// The model's embedding and lm_head may have more rows than the tokenizer has ids (padding to a multiple, ids
// the decoder skips), never fewer: an id the tokenizer produces (the control block holds BOS, EOS and the
// chat markers) must have a row, or every request carrying it is refused (spec §2.5 item 9, §6.3). Padding
// beyond 1024 rows is no padding scheme in use: the files come from different checkpoints.
constexpr int32_t kMaxVocabPadding = 1024;

Status check_vocab_sizes(const model::ModelConfig& config, const text::Tokenizer& tokenizer) {
  const int32_t model_ids = config.vocab_size, tokenizer_ids = tokenizer.vocab_size();
  if (tokenizer_ids > model_ids)
    return invalid_argument(
        "config.json: vocab_size {} is smaller than the tokenizer's {} ids (tiktoken.model ranks + 256 "
        "control "
        "tokens): ids {}..{} would have no embedding row; the config and the tokenizer files must come from "
        "the "
        "same checkpoint",
        model_ids, tokenizer_ids, model_ids, tokenizer_ids - 1);
  if (model_ids - tokenizer_ids >= kMaxVocabPadding)
    return invalid_argument(
        "config.json: vocab_size {} exceeds the tokenizer's {} ids by {}, more than padding (< {} rows): the "
        "config and the tokenizer files must come from the same checkpoint",
        model_ids, tokenizer_ids, model_ids - tokenizer_ids, kMaxVocabPadding);
  return {};
}

}  // namespace

Result<ServingFiles> load_serving_files(const std::filesystem::path& model_dir,
                                        const model::ModelConfig& config,
                                        const std::filesystem::path& template_file) {
  auto tokenizer = text::Tokenizer::load(model_dir);
  if (!tokenizer.ok())
    return Status(tokenizer.status().code(),
                  fmt::format("tokenizer: {} (tiktoken.model and tokenizer_config.json ship with the model's "
                              "Hugging Face checkpoint: copy both into {})",
                              tokenizer.status().message(), model_dir.string()));
  ServingFiles files;
  files.tokenizer = std::make_shared<const text::Tokenizer>(std::move(tokenizer).value());
  const text::Tokenizer& tok = *files.tokenizer;
  RILL_TRY(check_vocab_sizes(config, tok));
  if (config.bos_token_id) RILL_TRY(check_token_id("bos_token_id", *config.bos_token_id, config, tok));
  for (int32_t id : config.eos_token_ids) RILL_TRY(check_token_id("eos_token_id", id, config, tok));
  files.eos_token_ids = config.eos_token_ids;
  for (const char* name : {"[EOS]", "[EOT]", "<|im_end|>", "<|end_of_msg|>"}) {
    auto id = tok.token_id(name);
    if (id && *id < config.vocab_size &&
        std::find(files.eos_token_ids.begin(), files.eos_token_ids.end(), *id) == files.eos_token_ids.end())
      files.eos_token_ids.push_back(*id);
  }
  if (config.family != model::ModelFamily::KimiK3) {
    text::ChatTemplateOptions options;
    options.template_file = template_file;
    auto tmpl = text::ChatTemplate::load(model_dir, std::move(options));
    if (tmpl.ok())
      files.chat_template.emplace(std::move(tmpl).value());
    else
      files.chat_error = tmpl.status();
  }
  return files;
}

}  // namespace rill::server
