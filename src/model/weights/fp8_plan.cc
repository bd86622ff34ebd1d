#include "model/weights/fp8_plan.h"

#include <regex>
#include <string_view>

namespace rill::model {
namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// "x.weight" -> "x": the module name quantizers' ignore lists use.
std::string module_of(const std::string& weight_name) {
  return ends_with(weight_name, ".weight") ? weight_name.substr(0, weight_name.size() - 7) : weight_name;
}

// Never quantized by FP8 checkpoints (not Linear layers to the quantizers: vLLM's ParallelLMHead and
// VocabParallelEmbedding are skipped by its fp8 method).
bool never_stored(const std::string& name) {
  return ends_with(name, "embed_tokens.weight") || ends_with(name, "lm_head.weight");
}

}  // namespace

bool Fp8Plan::keeps_dense(const std::string& name) {
  // The embedding is a table lookup and lm_head sets the logits' precision (the demo model's perplexity moves
  // by more with it quantized). The router's scores choose experts: a flipped top-k choice costs more than its
  // bytes save (H x E). kv_b is absorbed into MLA's decode attention, which reads it as bf16. KDA's low-rank
  // gate projections (f_a/f_b, g_a/g_b) and b_proj feed exponentials and sigmoids and are <1% of the bytes.
  for (std::string_view tail : {"embed_tokens.weight", "lm_head.weight", ".gate.weight", "kv_b_proj.weight",
                                "f_a_proj.weight", "f_b_proj.weight", "g_a_proj.weight", "g_b_proj.weight",
                                "b_proj.weight"})
    if (ends_with(name, tail)) return true;
  return false;
}

bool Fp8Plan::ignored(const std::string& module) const {
  for (const std::string& pattern : config_.ignore) {
    if (pattern.rfind("re:", 0) == 0) {
      if (std::regex_match(module, std::regex(pattern.substr(3)))) return true;
    } else if (module == pattern || ends_with(module, "." + pattern)) {
      return true;
    }
  }
  return false;
}

bool Fp8Plan::stored(const std::string& name) const {
  return config_.source == Fp8Source::Checkpoint && !never_stored(name) && !ignored(module_of(name));
}

bool Fp8Plan::target(const std::string& name) const {
  if (keeps_dense(name)) return false;
  switch (config_.source) {
    case Fp8Source::None: return false;
    case Fp8Source::Checkpoint: return stored(name);
    case Fp8Source::QuantizeAtLoad: return true;
  }
  return false;
}

std::string Fp8Plan::scale_name(const std::string& name) const { return module_of(name) + "." + config_.scale_suffix; }

backend::Fp8Blocks Fp8Plan::stored_blocks() const { return {config_.block_rows, config_.block_cols}; }

backend::Fp8Blocks Fp8Plan::quant_blocks(int64_t row_unit) const {
  if (config_.block_rows == 1) return {1, backend::Fp8Blocks::kWholeRow};  // ptpc_fp8: a scale per row
  int32_t rows = kFp8QuantBlock;
  while (rows > 1 && row_unit % rows != 0) rows /= 2;
  return {rows, kFp8QuantBlock};
}

}  // namespace rill::model
