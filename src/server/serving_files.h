// What `rill serve` needs from MODEL_DIR besides the weights, loaded and checked in one place: `rill serve`
// loads it before the weights, and `rill inspect` (which loads no weights) reports it, so that inspect's
// "validation ok" means serve starts. The tokenizer (tiktoken.model, tokenizer_config.json) with as many ids
// as the model's vocab_size (up to padding), BOS and EOS ids that both the vocabulary and the model's logits
// have, the serving stop set, and the chat template.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::server {

struct ServingFiles {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  // The serving stop set (serving.md §2.1): the config's EOS ids, plus [EOS], [EOT], <|im_end|> and
  // <|end_of_msg|> where the vocabulary has them.
  std::vector<int32_t> eos_token_ids;
  // The K2 family's Jinja chat template; unset for kimi_k3 (the native renderer) and when `chat_error` says
  // why there is none. serve starts without one, but /v1/chat/completions then answers 400 with that error.
  std::optional<text::ChatTemplate> chat_template;
  Status chat_error;
};

// Errors name the file or the config.json field and what to do about it. `template_file` (--chat-template)
// replaces the checkpoint's chat template.
Result<ServingFiles> load_serving_files(const std::filesystem::path& model_dir,
                                        const model::ModelConfig& config,
                                        const std::filesystem::path& template_file = {});

}  // namespace rill::server
