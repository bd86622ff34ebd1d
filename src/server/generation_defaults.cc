#include "server/generation_defaults.h"

#include <fstream>
#include <sstream>

namespace rill::server {

Result<GenerationDefaults> load_generation_defaults(const std::string& mode,
                                                    const std::filesystem::path& model_dir) {
  GenerationDefaults out;
  if (mode == "vllm") {
    out.source = "none (--generation-config vllm)";
    return out;
  }
  const std::filesystem::path file =
      (mode == "auto" ? model_dir : std::filesystem::path(mode)) / "generation_config.json";
  std::ifstream in(file);
  if (!in) {
    if (mode == "auto") {
      out.source = "none (no generation_config.json in the checkpoint)";
      return out;
    }
    return not_found("--generation-config {}: cannot read {}", mode, file.string());
  }
  std::stringstream text;
  text << in.rdbuf();
  const Json json = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object())
    return invalid_argument("--generation-config: {} is not a JSON object", file.string());
  for (const char* key : {"temperature", "top_p", "repetition_penalty"}) {
    if (!json.contains(key) || json[key].is_null()) continue;
    if (!json[key].is_number())
      return invalid_argument("--generation-config: {}: {} must be a number, got {}", file.string(), key,
                              json[key].dump());
    out.sampling[key] = json[key];
  }
  if (json.contains("top_k") && !json["top_k"].is_null()) {
    if (!json["top_k"].is_number_integer())
      return invalid_argument("--generation-config: {}: top_k must be an integer, got {}", file.string(),
                              json["top_k"].dump());
    out.sampling["top_k"] = json["top_k"];
  }
  if (json.contains("max_new_tokens") && !json["max_new_tokens"].is_null()) {
    const Json& v = json["max_new_tokens"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 30))
      return invalid_argument("--generation-config: {}: max_new_tokens must be a positive integer, got {}",
                              file.string(), v.dump());
    out.max_tokens = int(v.get<int64_t>());
  }
  out.source = file.string();
  return out;
}

}  // namespace rill::server
