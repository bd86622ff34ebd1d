// --generation-config, as vLLM reads it: `auto` takes MODEL_DIR/generation_config.json, `vllm` none, any
// other value is a directory holding one. Its temperature, top_p, top_k and repetition_penalty become the
// defaults of requests that leave them out, max_new_tokens the default max_tokens of chat requests.
#pragma once

#include <filesystem>
#include <string>

#include "core/status.h"
#include "server/openai/errors.h"

namespace rill::server {

struct GenerationDefaults {
  Json sampling = Json::object();  // request field name -> value
  int max_tokens = 0;              // 0: none
  std::string source;              // the file read, or why none ("none (--generation-config vllm)")
};

// A missing file under `auto` is no error (most checkpoints have one; the tiny model has none); a missing
// file in a named directory, bad JSON or a value of the wrong type is, naming the file and field.
Result<GenerationDefaults> load_generation_defaults(const std::string& mode,
                                                    const std::filesystem::path& model_dir);

}  // namespace rill::server
