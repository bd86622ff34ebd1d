#include "cli/tiny_model_spec.h"

#include <fstream>

#include "io/checkpoint.h"
#include "model/random_checkpoint.h"
#include "text/tokenizer/bpe_trainer.h"

namespace rill::cli {

// The Apache-2.0 text of the repository's LICENSE file, embedded at build time (cli/CMakeLists.txt): English
// prose the tiny model's BPE is trained on, so the binary needs no data file.
extern const char* const kLicenseText;

namespace {

constexpr int kRanks = 1024;  // BPE ranks; the 256-id control block follows, as in the Kimi vocabulary

// A Kimi-Linear/K2-style chat template written for the tiny model (same markers and layout as the K2 family,
// spec §6.5): system, user, assistant (with tool calls), tool results, tool declarations.
constexpr const char* kChatTemplate = R"jinja({%- if tools -%}
<|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}<|im_end|>
{%- endif -%}
{%- if messages | length == 0 or messages[0].role != 'system' -%}
<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|>
{%- endif -%}
{%- for m in messages -%}
{%- if m.content is string -%}{%- set text = m.content -%}
{%- elif m.content is none or m.content is undefined -%}{%- set text = '' -%}
{%- else -%}{%- set ns = namespace(t='') -%}{%- for part in m.content -%}{%- if part.type == 'text' -%}{%- set ns.t = ns.t + part.text -%}{%- endif -%}{%- endfor -%}{%- set text = ns.t -%}
{%- endif -%}
{%- if m.role == 'system' -%}<|im_system|>system<|im_middle|>{{ text }}<|im_end|>
{%- elif m.role == 'user' -%}<|im_user|>user<|im_middle|>{{ text }}<|im_end|>
{%- elif m.role == 'tool' -%}<|im_system|>tool<|im_middle|>## Return of {{ m.tool_call_id }}
{{ text }}<|im_end|>
{%- elif m.role == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>{{ text }}
{%- if m.tool_calls -%}<|tool_calls_section_begin|>
{%- for tc in m.tool_calls -%}<|tool_call_begin|>{{ tc.id }}<|tool_call_argument_begin|>{{ tc.function.arguments if tc.function.arguments is string else tc.function.arguments | tojson }}<|tool_call_end|>
{%- endfor -%}<|tool_calls_section_end|>
{%- endif -%}<|im_end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%})jinja";

}  // namespace

nlohmann::ordered_json tiny_model_config() {
  return {
      {"architectures", {"KimiLinearForCausalLM"}},
      {"model_type", "kimi_linear"},
      {"vocab_size", kRanks + 256},
      {"hidden_size", 128},
      {"intermediate_size", 256},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 2},
      {"num_key_value_heads", 2},
      {"head_dim", 64},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", false},
      {"first_k_dense_replace", 1},
      {"moe_layer_freq", 1},
      {"moe_intermediate_size", 64},
      {"num_experts", 8},
      {"num_experts_per_token", 2},
      {"num_shared_experts", 1},
      {"moe_router_activation_func", "sigmoid"},
      {"moe_renormalize", true},
      {"routed_scaling_factor", 2.446},
      {"use_grouped_topk", true},
      {"num_expert_group", 1},
      {"topk_group", 1},
      {"q_lora_rank", nullptr},
      {"kv_lora_rank", 512},
      {"qk_nope_head_dim", 128},
      {"qk_rope_head_dim", 64},
      {"v_head_dim", 128},
      {"mla_use_nope", true},
      {"num_nextn_predict_layers", 0},
      {"linear_attn_config",
       {{"head_dim", 128}, {"num_heads", 2}, {"short_conv_kernel_size", 4}, {"kda_layers", {1, 2, 4}},
        {"full_attn_layers", {3}}}},
      {"model_max_length", 65536},
      {"bos_token_id", kRanks + 0},
      {"eos_token_id", kRanks + 2},  // <|im_end|>, as Kimi Linear stops on it
      {"pad_token_id", kRanks + 255},
      {"torch_dtype", "bfloat16"},
  };
}

nlohmann::ordered_json tiny_k3_model_config() {
  return model::tiny_kimi_k3_config(kRanks + 256, kRanks + 0, kRanks + 2);  // <|end_of_msg|> is offset 2
}

Status write_tiny_tokenizer(const std::filesystem::path& dir, bool k3) {
  const std::vector<std::string> ranks = text::train_bpe(kLicenseText, kRanks);
  if (int(ranks.size()) != kRanks)
    return internal_error("the BPE trainer produced {} ranks, {} wanted", ranks.size(), kRanks);
  if (!k3) return write_kimi_linear_tokenizer(dir, ranks);
  RILL_TRY(text::write_tiktoken_model(dir / "tiktoken.model", ranks));
  return text::write_tokenizer_config(dir / "tokenizer_config.json", kRanks, text::ControlBlockLayout::K3);
}

Status write_kimi_linear_tokenizer(const std::filesystem::path& dir, const std::vector<std::string>& ranks) {
  RILL_TRY(text::write_tiktoken_model(dir / "tiktoken.model", ranks));
  const auto config_path = dir / "tokenizer_config.json";
  RILL_TRY(
      text::write_tokenizer_config(config_path, int32_t(ranks.size()), text::ControlBlockLayout::KimiLinear));
  RILL_ASSIGN_OR_RETURN(auto json, io::read_json_file(config_path));
  json["chat_template"] = kChatTemplate;
  std::ofstream f(config_path);
  f << json.dump(2) << "\n";
  if (!f) return invalid_argument("cannot write {}", config_path.string());
  return {};
}

}  // namespace rill::cli
