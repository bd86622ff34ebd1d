#include "model/config.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <initializer_list>
#include <set>

#include "io/checkpoint.h"

namespace rill::model {
namespace {

using Json = nlohmann::ordered_json;

// The accepted range of a config.json integer. Zero is let through where a field may be unused (a width of a
// layer kind the model lacks): `validate` then requires a positive value of every field the model uses. The
// upper bounds are sanity bounds, each far above the released Kimi models (Kimi K3: vocab 163840, hidden
// 7168, 93 layers, 896 experts of width 3072 on a 3584 latent), chosen so that every size derived from them
// fits int64 without a check at each use: vocab x hidden <= 2^40, one expert stack experts x width x ffn <=
// 2^48, the whole model < 2^60 bytes; and every width fits the int32 indices of the kernels.
struct Range {
  int64_t lo, hi;
  const char* why = "";
};
constexpr int64_t kInt32Max = INT32_MAX;
constexpr Range kVocabRange{0, 1 << 24, " (sanity bound: 2^24 ids, 100x Kimi's 163840)"};
constexpr Range kTokenIdRange{0, (1 << 24) - 1, " (a token id below the 2^24 vocabulary bound)"};
constexpr Range kWidthRange{0, 1 << 16, " (sanity bound: 65536, 9x Kimi K3's hidden_size 7168)"};
constexpr Range kFfnWidthRange{0, 1 << 20, " (sanity bound: 2^20, 50x Kimi K3's widest MLP)"};
constexpr Range kLayersRange{0, 1024, " (sanity bound: 1024 layers, 11x Kimi K3's 93)"};
constexpr Range kHeadsRange{0, 1024, " (sanity bound: 1024 heads)"};
constexpr Range kHeadDimRange{0, 1024, " (sanity bound: 1024 per head)"};
constexpr Range kExpertsRange{0, 4096, " (sanity bound: 4096 experts, 4.5x Kimi K3's 896)"};
constexpr Range kCountRange{0, 1024, " (sanity bound: 1024)"};
constexpr Range kLayerIndexRange{0, kInt32Max, " (a 32-bit layer count)"};
// Positions are int32 in the batch layout; the released models have 1M (Kimi Linear) and 256K (K3).
constexpr Range kPositionsRange{1, kInt32Max, " (positions are 32-bit)"};
// Weight specs and their names are declared per routed expert and layer; this keeps the table of a model
// below ~1M entries (~300 MB of host memory before anything is checked). Kimi K3: 896 x 92 = 82432.
constexpr int64_t kMaxRoutedExpertLayers = 1 << 18;

// Reads fields of one JSON object, accepting the aliases the spec lists (§1.5) and collecting every
// problem, so a bad config.json is reported completely in one go.
class FieldReader {
 public:
  FieldReader(const Json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  // The value of the first alias present; an error if two aliases are present with different values.
  const Json* find(std::initializer_list<const char*> names) {
    const Json* found = nullptr;
    const char* found_name = nullptr;
    for (const char* n : names) {
      auto it = obj_.find(n);
      if (it == obj_.end() || it->is_null()) continue;
      if (found && *found != *it) {
        errors_.push_back(fmt::format("{}{} ({}) contradicts {}{} ({})", path_, found_name, found->dump(), path_,
                                      n, it->dump()));
      }
      if (!found) {
        found = &*it;
        found_name = n;
      }
    }
    return found;
  }

  // An integer inside `range`, read as a 64-bit value before narrowing so that 2^32 + 128 is refused rather
  // than wrapped to 128; an error names the field and the value.
  int64_t wide_integer(std::initializer_list<const char*> names, Range range,
                       std::optional<int64_t> fallback = std::nullopt) {
    const Json* v = find(names);
    if (!v) {
      if (fallback) return *fallback;
      errors_.push_back(fmt::format("missing field {}{}", path_, *names.begin()));
      return 0;
    }
    return in_range(*v, path_ + *names.begin(), range);
  }

  // `v`, named `name` in errors, as an integer inside `range` (0 and an error otherwise).
  int64_t in_range(const Json& v, const std::string& name, Range range) {
    if (!v.is_number_integer()) {
      errors_.push_back(fmt::format("{} must be an integer, got {}", name, v.dump()));
      return 0;
    }
    const bool fits = !v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t(INT64_MAX);
    if (!fits || v.get<int64_t>() < range.lo || v.get<int64_t>() > range.hi) {
      errors_.push_back(
          fmt::format("{} = {} is outside {}..{}{}", name, v.dump(), range.lo, range.hi, range.why));
      return 0;
    }
    return v.get<int64_t>();
  }

  int integer(std::initializer_list<const char*> names, Range range,
              std::optional<int> fallback = std::nullopt) {
    return int(wide_integer(names, range, fallback));  // every Range below fits an int
  }

  std::optional<int> optional_integer(std::initializer_list<const char*> names, Range range) {
    if (!find(names)) return std::nullopt;
    return integer(names, range);
  }

  double number(std::initializer_list<const char*> names, std::optional<double> fallback = std::nullopt) {
    const Json* v = find(names);
    if (!v) {
      if (fallback) return *fallback;
      errors_.push_back(fmt::format("missing field {}{}", path_, *names.begin()));
      return 0;
    }
    if (!v->is_number()) {
      errors_.push_back(fmt::format("{}{} must be a number, got {}", path_, *names.begin(), v->dump()));
      return 0;
    }
    // 1e400 parses as infinity; every float field is a finite scale, epsilon or bound.
    if (!std::isfinite(v->get<double>()) || std::abs(v->get<double>()) > FLT_MAX) {
      errors_.push_back(
          fmt::format("{}{} = {} is not a finite 32-bit float", path_, *names.begin(), v->dump()));
      return 0;
    }
    return v->get<double>();
  }

  bool boolean(std::initializer_list<const char*> names, bool fallback) {
    const Json* v = find(names);
    if (!v) return fallback;
    if (!v->is_boolean()) {
      errors_.push_back(fmt::format("{}{} must be true or false, got {}", path_, *names.begin(), v->dump()));
      return fallback;
    }
    return v->get<bool>();
  }

  std::string string(std::initializer_list<const char*> names, std::string fallback) {
    const Json* v = find(names);
    if (!v) return fallback;
    if (!v->is_string()) {
      errors_.push_back(fmt::format("{}{} must be a string, got {}", path_, *names.begin(), v->dump()));
      return fallback;
    }
    return v->get<std::string>();
  }

  void error(std::string message) { errors_.push_back(std::move(message)); }
  std::vector<std::string>& errors() { return errors_; }
  const std::string& path() const { return path_; }

 private:
  const Json& obj_;
  std::string path_;
  std::vector<std::string> errors_;
};

// Moonshot form: 1-based kda_layers / full_attn_layers, every layer in exactly one list.
std::vector<LayerKind> layer_kinds_from_lists(const Json& lac, int n_layers, FieldReader& r) {
  std::vector<int> owner(n_layers, -1);
  const char* lists[2] = {"kda_layers", "full_attn_layers"};
  for (int which = 0; which < 2; ++which) {
    const std::string name = fmt::format("linear_attn_config.{}", lists[which]);
    auto it = lac.find(lists[which]);
    if (it == lac.end() || !it->is_array()) {
      r.error(fmt::format("{} must be a list of 1-based layer numbers", name));
      continue;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& v = (*it)[i];
      if (!v.is_number_integer()) {
        r.error(fmt::format("{}[{}] must be an integer layer number (1-based), got {}", name, i, v.dump()));
        continue;
      }
      const int64_t layer = v.get<int64_t>();
      if (layer < 1 || layer > n_layers) {
        r.error(fmt::format("{}[{}] = {} is outside 1..num_hidden_layers ({})", name, i, layer, n_layers));
        continue;
      }
      if (owner[layer - 1] != -1) {
        r.error(fmt::format("layer {} (1-based) is listed twice in linear_attn_config.{}{}", layer,
                            lists[owner[layer - 1]], owner[layer - 1] == which ? "" : " and " + name));
        continue;
      }
      owner[layer - 1] = which;
    }
  }
  std::vector<LayerKind> kinds(n_layers, LayerKind::Kda);
  for (int i = 0; i < n_layers; ++i) {
    if (owner[i] == -1) r.error(fmt::format("layer {} (1-based) is in neither kda_layers nor full_attn_layers", i + 1));
    kinds[i] = owner[i] == 1 ? LayerKind::Mla : LayerKind::Kda;
  }
  return kinds;
}

// transformers form: 0-based list of "linear_attention" / "full_attention".
std::vector<LayerKind> layer_kinds_from_types(const Json& types, int n_layers, FieldReader& r) {
  std::vector<LayerKind> kinds(n_layers, LayerKind::Kda);
  if (!types.is_array() || int(types.size()) != n_layers) {
    r.error(fmt::format("layer_types must be a list of num_hidden_layers ({}) strings", n_layers));
    return kinds;
  }
  for (int i = 0; i < n_layers; ++i) {
    const Json& t = types[i];
    if (t == "linear_attention") kinds[i] = LayerKind::Kda;
    else if (t == "full_attention") kinds[i] = LayerKind::Mla;
    else r.error(fmt::format("layer_types[{}] must be \"linear_attention\" or \"full_attention\", got {}", i, t.dump()));
  }
  return kinds;
}

std::vector<FfnKind> ffn_kinds_from(const Json& json, int n_layers, FieldReader& r) {
  std::vector<FfnKind> kinds(n_layers, FfnKind::Moe);
  const int first_dense = r.integer({"first_k_dense_replace"}, kLayerIndexRange, 0);
  const int freq = r.integer({"moe_layer_freq"}, kLayerIndexRange, 1);
  if (freq < 1) r.error(fmt::format("moe_layer_freq must be >= 1, got {}", freq));
  for (int i = 0; i < n_layers; ++i)
    kinds[i] = (i >= first_dense && freq >= 1 && i % freq == 0) ? FfnKind::Moe : FfnKind::Dense;
  auto it = json.find("mlp_layer_types");
  if (it != json.end() && !it->is_null()) {
    if (!it->is_array() || int(it->size()) != n_layers) {
      r.error(fmt::format("mlp_layer_types must be a list of num_hidden_layers ({}) strings", n_layers));
      return kinds;
    }
    const bool have_moonshot = json.contains("first_k_dense_replace");
    for (int i = 0; i < n_layers; ++i) {
      const Json& t = (*it)[i];
      FfnKind k;
      if (t == "dense") k = FfnKind::Dense;
      else if (t == "sparse") k = FfnKind::Moe;
      else {
        r.error(fmt::format("mlp_layer_types[{}] must be \"dense\" or \"sparse\", got {}", i, t.dump()));
        continue;
      }
      if (have_moonshot && k != kinds[i])
        r.error(fmt::format("mlp_layer_types[{}] = {} contradicts first_k_dense_replace/moe_layer_freq", i, t.dump()));
      kinds[i] = k;
    }
  }
  return kinds;
}

void parse_kimi_linear(const Json& json, ModelConfig& c, FieldReader& r) {
  c.vocab_size = r.integer({"vocab_size"}, kVocabRange);
  c.hidden_size = r.integer({"hidden_size"}, kWidthRange);
  c.n_layers = r.integer({"num_hidden_layers"}, kLayersRange);
  c.intermediate_size = r.integer({"intermediate_size"}, kFfnWidthRange);
  c.rms_norm_eps = float(r.number({"rms_norm_eps"}, 1e-5));
  // Not used by the models rill runs (their MLA layers have no RoPE), but a checkpoint that states them
  // must state sane ones: a non-positive base or scale means a broken config (issue #32).
  if (const double theta = r.number({"rope_theta"}, 10000.0); !(theta > 0))
    r.error(fmt::format("rope_theta must be positive, got {}", theta));
  if (const Json* scaling = json.contains("rope_scaling") ? &json["rope_scaling"] : nullptr;
      scaling && scaling->is_object() && scaling->contains("factor")) {
    const Json& f = (*scaling)["factor"];
    if (!f.is_number() || !std::isfinite(f.get<double>()) || !(f.get<double>() > 0))
      r.error(fmt::format("rope_scaling.factor must be a positive number, got {}", f.dump()));
  }
  c.tie_word_embeddings = r.boolean({"tie_word_embeddings"}, false);
  c.max_position_embeddings =
      r.wide_integer({"model_max_length", "max_position_embeddings"}, kPositionsRange, 1048576);
  c.bos_token_id = r.optional_integer({"bos_token_id"}, kTokenIdRange);
  if (const Json* eos = r.find({"eos_token_id"})) {
    if (eos->is_number_integer()) {
      c.eos_token_ids = {r.integer({"eos_token_id"}, kTokenIdRange)};
    } else if (eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i)
        c.eos_token_ids.push_back(
            int32_t(r.in_range((*eos)[i], fmt::format("{}eos_token_id[{}]", r.path(), i), kTokenIdRange)));
    } else {
      r.error(fmt::format("eos_token_id must be an integer or a list of integers, got {}", eos->dump()));
    }
  }

  const std::string act = r.string({"hidden_act"}, "silu");
  if (act == "silu") {
    c.activation = GluActivation::Silu;
  } else if (act == "situ") {
    c.activation = GluActivation::Situ;
    // Spec §7.10: a missing beta silently corrupts outputs, so both are required.
    c.situ_beta = float(r.number({"activation_situ_beta"}));
    c.situ_linear_beta = float(r.number({"activation_situ_linear_beta"}));
  } else {
    r.error(fmt::format("hidden_act \"{}\" is not supported (expected \"silu\" or \"situ\")", act));
  }

  // Layer schedule.
  if (c.n_layers > 0) {
    auto lac = json.find("linear_attn_config");
    const bool have_lists = lac != json.end() && lac->is_object() && lac->contains("kda_layers");
    auto types = json.find("layer_types");
    const bool have_types = types != json.end() && !types->is_null();
    if (have_lists) c.layer_kinds = layer_kinds_from_lists(*lac, c.n_layers, r);
    if (have_types) {
      auto from_types = layer_kinds_from_types(*types, c.n_layers, r);
      if (have_lists && from_types != c.layer_kinds && r.errors().empty())
        r.error("layer_types contradicts linear_attn_config.kda_layers/full_attn_layers");
      c.layer_kinds = from_types;
    }
    if (!have_lists && !have_types)
      r.error("missing layer schedule: need linear_attn_config.kda_layers/full_attn_layers or layer_types");
    c.ffn_kinds = ffn_kinds_from(json, c.n_layers, r);
  }

  // KDA (linear attention).
  static const Json kEmpty = Json::object();
  auto lac_it = json.find("linear_attn_config");
  const Json& lac = (lac_it != json.end() && lac_it->is_object()) ? *lac_it : kEmpty;
  FieldReader lr(lac, "linear_attn_config.");
  FieldReader& top = r;
  auto pick_int = [&](std::initializer_list<const char*> nested, std::initializer_list<const char*> flat,
                      Range range) {
    const bool in_nested = lr.find(nested) != nullptr;
    const bool in_flat = top.find(flat) != nullptr;
    if (in_nested && in_flat && lr.integer(nested, range) != top.integer(flat, range))
      r.error(fmt::format("linear_attn_config.{} contradicts {}", *nested.begin(), *flat.begin()));
    return in_nested ? lr.integer(nested, range) : top.integer(flat, range);
  };
  if (c.layer_kinds.empty() || std::count(c.layer_kinds.begin(), c.layer_kinds.end(), LayerKind::Kda) > 0) {
    c.kda.head_dim = pick_int(
        {"head_dim"}, {"linear_head_dim", "linear_key_head_dim", "linear_value_head_dim"}, kHeadDimRange);
    c.kda.n_heads = pick_int(
        {"num_heads"}, {"linear_num_heads", "linear_num_key_heads", "linear_num_value_heads"}, kHeadsRange);
    c.kda.conv_kernel = pick_int({"short_conv_kernel_size"}, {"linear_conv_kernel_dim"}, kHeadDimRange);
    const Json* lb = lr.find({"gate_lower_bound", "forget_gate_lower_bound"});
    if (!lb) lb = top.find({"forget_gate_lower_bound", "gate_lower_bound"});
    if (lb) {
      if (lb->is_number() && std::isfinite(lb->get<double>()) && std::abs(lb->get<double>()) <= FLT_MAX)
        c.kda.gate_lower_bound = lb->get<float>();
      else
        r.error(fmt::format("gate_lower_bound must be a finite number, got {}", lb->dump()));
    }
    c.kda.full_rank_output_gate = lr.boolean({"use_full_rank_gate", "use_full_rank_output_gate"},
                                             top.boolean({"use_full_rank_output_gate"}, false));
  }
  for (auto& e : lr.errors()) r.error(e);

  // MLA.
  c.mla.n_heads = r.integer({"num_attention_heads"}, kHeadsRange);
  c.mla.q_lora_rank = r.optional_integer({"q_lora_rank"}, kWidthRange).value_or(0);
  c.mla.kv_lora_rank = r.integer({"kv_lora_rank"}, kWidthRange);
  c.mla.qk_nope_head_dim = r.integer({"qk_nope_head_dim"}, kHeadDimRange);
  c.mla.qk_rope_head_dim = r.integer({"qk_rope_head_dim"}, kHeadDimRange);
  c.mla.v_head_dim = r.integer({"v_head_dim"}, kHeadDimRange);
  c.mla.output_gate = r.boolean({"mla_use_output_gate"}, false);
  if (!r.boolean({"mla_use_nope"}, true))
    r.error("mla_use_nope = false (rotary MLA) is not supported: Kimi models are NoPE");

  // MoE.
  const bool any_moe = std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), FfnKind::Moe) > 0;
  if (any_moe) {
    MoeConfig& m = c.moe;
    m.n_experts = r.integer({"num_experts", "n_routed_experts", "num_local_experts"}, kExpertsRange);
    m.n_experts_per_token = r.integer({"num_experts_per_token", "num_experts_per_tok"}, kExpertsRange);
    m.n_shared_experts = r.integer({"num_shared_experts", "n_shared_experts"}, kExpertsRange, 0);
    m.intermediate_size = r.integer({"moe_intermediate_size"}, kFfnWidthRange);
    m.renormalize = r.boolean({"moe_renormalize", "norm_topk_prob"}, true);
    m.routed_scaling_factor = float(r.number({"routed_scaling_factor"}, 1.0));
    m.n_groups = r.integer({"num_expert_group", "n_group"}, kExpertsRange, 1);
    m.topk_group = r.integer({"topk_group"}, kExpertsRange, m.n_groups);
    if (!r.boolean({"use_grouped_topk"}, true)) m.topk_group = m.n_groups;  // grouping disabled
    const std::string fn = r.string({"moe_router_activation_func", "scoring_func"}, "sigmoid");
    if (fn == "sigmoid") m.activation = RouterActivation::Sigmoid;
    else if (fn == "softmax") m.activation = RouterActivation::Softmax;
    else r.error(fmt::format("moe_router_activation_func \"{}\" is not supported (sigmoid or softmax)", fn));
    m.latent_size = r.optional_integer({"routed_expert_hidden_size"}, kWidthRange).value_or(0);
    m.latent_norm = r.boolean({"latent_moe_use_norm"}, m.latent_size > 0);
  }
  c.attn_res_block_size = r.optional_integer({"attn_res_block_size"}, kLayersRange).value_or(0);
  c.n_mtp_layers = r.integer({"num_nextn_predict_layers", "num_mtp_layers"}, kCountRange, 0);
  if (c.n_mtp_layers < 0)
    r.error(fmt::format("num_nextn_predict_layers must not be negative, got {}", c.n_mtp_layers));
}

void validate(ModelConfig& c, FieldReader& r) {
  auto positive = [&](int v, const char* name) {
    if (v <= 0) r.error(fmt::format("{} must be positive, got {}", name, v));
  };
  if (!r.errors().empty()) return;  // derived checks would only repeat earlier errors
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.n_layers, "num_hidden_layers");
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps <= 1))
    r.error(fmt::format("rms_norm_eps must be in (0, 1], got {}", c.rms_norm_eps));
  if (c.n_layers_of(LayerKind::Kda) > 0) {
    positive(c.kda.n_heads, "linear_attn_config.num_heads");
    positive(c.kda.head_dim, "linear_attn_config.head_dim");
    if (c.kda.conv_kernel < 1 || c.kda.conv_kernel > 16)
      r.error(fmt::format("linear_attn_config.short_conv_kernel_size must be in 1..16, got {}", c.kda.conv_kernel));
    if (c.kda.gate_lower_bound && !(*c.kda.gate_lower_bound < 0))
      r.error(fmt::format("gate_lower_bound must be negative, got {}", *c.kda.gate_lower_bound));
  }
  if (c.n_layers_of(LayerKind::Mla) > 0) {
    positive(c.mla.n_heads, "num_attention_heads");
    positive(c.mla.kv_lora_rank, "kv_lora_rank");
    positive(c.mla.qk_nope_head_dim, "qk_nope_head_dim");
    positive(c.mla.v_head_dim, "v_head_dim");
    if (c.mla.qk_rope_head_dim < 0) r.error("qk_rope_head_dim must not be negative");
    if (c.mla.q_lora_rank < 0) r.error("q_lora_rank must be null or positive");
  }
  if (std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), FfnKind::Dense) > 0) positive(c.intermediate_size, "intermediate_size");
  if (std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), FfnKind::Moe) > 0) {
    const MoeConfig& m = c.moe;
    positive(m.n_experts, "num_experts");
    positive(m.intermediate_size, "moe_intermediate_size");
    if (m.n_experts_per_token < 1 || m.n_experts_per_token > m.n_experts)
      r.error(fmt::format("num_experts_per_token ({}) must be in 1..num_experts ({})", m.n_experts_per_token, m.n_experts));
    if (m.n_shared_experts < 0) r.error("num_shared_experts must not be negative");
    if (!(m.routed_scaling_factor > 0))
      r.error(fmt::format("routed_scaling_factor must be positive, got {}", m.routed_scaling_factor));
    if (m.n_groups < 1 || m.n_experts % m.n_groups != 0)
      r.error(fmt::format("num_expert_group ({}) must divide num_experts ({})", m.n_groups, m.n_experts));
    else if (m.topk_group < 1 || m.topk_group > m.n_groups)
      r.error(fmt::format("topk_group ({}) must be in 1..num_expert_group ({})", m.topk_group, m.n_groups));
    else if (m.grouped() && m.n_experts / m.n_groups < 2)
      r.error("grouped top-k scores each group by its best two experts: groups need >= 2 experts");
    else if (m.grouped() && m.topk_group * (m.n_experts / m.n_groups) < m.n_experts_per_token)
      r.error("topk_group groups hold fewer experts than num_experts_per_token");
    const int64_t moe_layers = std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), FfnKind::Moe);
    if (int64_t(m.n_experts) * moe_layers > kMaxRoutedExpertLayers)
      r.error(
          fmt::format("num_experts ({}) x {} MoE layers = {} routed experts exceeds the sanity bound {} "
                      "(Kimi K3: 896 x 92)",
                      m.n_experts, moe_layers, int64_t(m.n_experts) * moe_layers, kMaxRoutedExpertLayers));
  }
  if (c.mxfp4_experts && std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), FfnKind::Moe) > 0) {
    const int width = c.moe.latent_size > 0 ? c.moe.latent_size : c.hidden_size;
    if (width % 32 != 0 || c.moe.intermediate_size % 32 != 0)
      r.error(
          fmt::format("MXFP4 experts need the expert input widths divisible by the group size 32: "
                      "routed_expert_hidden_size/hidden_size = {}, moe_intermediate_size = {}",
                      width, c.moe.intermediate_size));
  }
  for (int32_t id : c.eos_token_ids)
    if (id < 0) r.error(fmt::format("eos_token_id {} is negative", id));
}

// An FP8 checkpoint's `quantization_config` (issue #35): DeepSeek-V3's `quant_method: fp8` with 128 x 128
// `weight_block_size` scales (`weight_scale_inv`), or compressed-tensors `float-quantized` with channel or
// 128 x 128 block `weight_scale`. Only weight-only use is supported: dynamic activation quantization is accepted
// (activations stay bf16, which is at least as accurate), static activation scales are refused, as are E5M2,
// other block sizes and per-tensor scales, each naming its field.
void parse_fp8_quantization(const Json& q, const std::string& path, ModelConfig& c, FieldReader& r) {
  Fp8Config f;
  f.source = Fp8Source::Checkpoint;
  auto err = [&](std::string m) { r.error(path + "." + std::move(m)); };
  auto strings = [&](const char* key) {
    auto it = q.find(key);
    if (it == q.end() || it->is_null()) return;
    if (!it->is_array()) return err(fmt::format("{} must be a list of module names", key));
    for (const auto& v : *it)
      if (v.is_string()) f.ignore.push_back(v.get<std::string>());
      else err(fmt::format("{} must be a list of module names, got {}", key, v.dump()));
  };
  const std::string method = q.value("quant_method", std::string());
  if (method == "fp8") {
    if (q.contains("fmt") && q["fmt"] != "e4m3")
      err(fmt::format("fmt {} is not supported (FP8 weights must be \"e4m3\")", q["fmt"].dump()));
    if (q.contains("activation_scheme") && q["activation_scheme"] != "dynamic")
      err(fmt::format("activation_scheme {} is not supported (only \"dynamic\": rill keeps activations bf16 and "
                      "has no use for static input scales)", q["activation_scheme"].dump()));
    auto b = q.find("weight_block_size");
    if (b == q.end() || b->is_null())
      err("weight_block_size is missing: per-tensor FP8 scales are not supported (blocks of [128, 128] are)");
    else if (*b != Json::array({128, 128}))
      err(fmt::format("weight_block_size {} is not supported (only [128, 128])", b->dump()));
    strings("modules_to_not_convert");
    strings("ignored_layers");
  } else {  // compressed-tensors float-quantized
    f.scale_suffix = "weight_scale";
    const std::string fmt_top = q.value("format", std::string("float-quantized"));
    if (fmt_top != "float-quantized")
      err(fmt::format("format \"{}\" is not supported (FP8 checkpoints are \"float-quantized\")", fmt_top));
    if (q.value("quantization_status", std::string("compressed")) != "compressed")
      err("quantization_status must be \"compressed\"");
    strings("ignore");
    auto groups = q.find("config_groups");
    if (groups == q.end() || !groups->is_object() || groups->empty())
      return err("config_groups must be an object with one group of FP8 weights");
    if (groups->size() != 1) err("config_groups: only one group of FP8 weights is supported");
    const auto first = groups->begin();
    const Json& g = first.value();
    const std::string gp = "config_groups." + first.key();
    if (!g.is_object()) return err(gp + " must be an object");
    if (g.contains("format") && g["format"] != "float-quantized")
      err(fmt::format("{}.format {} is not supported (expected \"float-quantized\")", gp, g["format"].dump()));
    if (g.contains("output_activations") && !g["output_activations"].is_null())
      err(gp + ".output_activations must be null");
    if (auto a = g.find("input_activations"); a != g.end() && !a->is_null() && a->value("dynamic", false) != true)
      err(gp + ".input_activations: static activation scales are not supported (only dynamic or null: rill "
               "keeps activations bf16)");
    auto w = g.find("weights");
    if (w == g.end() || !w->is_object()) return err(gp + ".weights must be an object");
    if (w->value("num_bits", 8) != 8 || w->value("type", std::string("float")) != "float")
      err(fmt::format("{}.weights: num_bits {} type {} is not FP8 E4M3 (expected 8, \"float\")", gp,
                      w->value("num_bits", Json(8)).dump(), w->value("type", Json("float")).dump()));
    if (w->value("symmetric", true) != true) err(gp + ".weights.symmetric must be true (FP8 has no zero point)");
    if (w->value("dynamic", false) != false) err(gp + ".weights.dynamic must be false");
    const std::string strategy = w->value("strategy", std::string());
    if (strategy == "channel") {
      f.block_rows = 1;
      f.block_cols = 1 << 30;  // backend::Fp8Blocks::kWholeRow
    } else if (strategy == "block") {
      if (w->value("block_structure", Json()) != Json::array({128, 128}))
        err(fmt::format("{}.weights.block_structure {} is not supported (only [128, 128])", gp,
                        w->value("block_structure", Json()).dump()));
    } else {
      err(fmt::format("{}.weights.strategy \"{}\" is not supported (\"channel\" or \"block\")", gp, strategy));
    }
  }
  c.fp8 = f;
}

// K3's `quantization_config` (spec §1.4): compressed-tensors `mxfp4-pack-quantized`, FP4 weights in groups of
// 32 along the input dimension with E8M0 scales, weight-only. Anything else is refused here rather than
// misread at load time.
void parse_quantization(const Json& q, const std::string& path, ModelConfig& c, FieldReader& r) {
  if (!q.is_object()) {
    r.error(fmt::format("{} must be an object, got {}", path, q.dump()));
    return;
  }
  FieldReader qr(q, path + ".");
  const std::string method = qr.string({"quant_method"}, "");
  const std::string format = qr.string({"format"}, "");
  if (method != "compressed-tensors" || format != "mxfp4-pack-quantized")
    r.error(fmt::format(
        "{}: quant_method \"{}\" with format \"{}\" is not supported (Kimi K3 ships compressed-tensors "
        "\"mxfp4-pack-quantized\")",
        path, method, format));
  const std::string status = qr.string({"quantization_status"}, "compressed");
  if (status != "compressed")
    r.error(fmt::format("{}.quantization_status must be \"compressed\" (packed tensors), got \"{}\"", path,
                        status));
  auto groups = q.find("config_groups");
  if (groups != q.end() && !groups->is_null()) {
    if (!groups->is_object())
      r.error(fmt::format("{}.config_groups must be an object", path));
    else
      for (const auto& [name, g] : groups->items()) {
        const std::string gp = fmt::format("{}.config_groups.{}", path, name);
        if (!g.is_object()) {
          r.error(fmt::format("{} must be an object", gp));
          continue;
        }
        if (g.contains("format") && g["format"] != "mxfp4-pack-quantized")
          r.error(fmt::format("{}.format {} is not supported (expected \"mxfp4-pack-quantized\")", gp,
                              g["format"].dump()));
        for (const char* act : {"input_activations", "output_activations"})
          if (g.contains(act) && !g[act].is_null())
            r.error(fmt::format("{}.{} must be null: only weight-only (W4A16) MXFP4 is supported", gp, act));
        auto w = g.find("weights");
        if (w == g.end() || !w->is_object()) {
          r.error(fmt::format("{}.weights must be an object", gp));
          continue;
        }
        auto expect = [&](const char* key, const Json& want) {
          auto it = w->find(key);
          if (it != w->end() && *it != want)
            r.error(fmt::format("{}.weights.{} = {} is not MXFP4 (expected {})", gp, key, it->dump(),
                                want.dump()));
        };
        expect("num_bits", 4);
        expect("type", "float");
        expect("group_size", 32);
        expect("strategy", "group");
      }
  }
  for (auto& e : qr.errors()) r.error(e);
  c.mxfp4_experts = true;
}

// Kimi K3 (spec §1.2): a multimodal root whose text decoder is `text_config` (itself kimi_linear-like) with
// the quantization config nested inside it; tensors live under `language_model.`.
void parse_kimi_k3(const Json& root, ModelConfig& c, FieldReader& r) {
  const Json& text = root["text_config"];
  c.family = ModelFamily::KimiK3;
  c.tensor_prefix = "language_model.";
  auto tmt = text.find("model_type");
  if (tmt != text.end() && *tmt != "kimi_linear")
    r.error(fmt::format("text_config.model_type must be \"kimi_linear\" (the K3 text decoder), got {}",
                        tmt->dump()));
  parse_kimi_linear(text, c, r);
  // Token ids: the text config's own, else the root's (both carry them in the released config).
  FieldReader rr(root, "");
  if (!c.bos_token_id) c.bos_token_id = rr.optional_integer({"bos_token_id"}, kTokenIdRange);
  if (c.eos_token_ids.empty())
    if (auto eos = rr.optional_integer({"eos_token_id"}, kTokenIdRange)) c.eos_token_ids = {*eos};
  for (auto& e : rr.errors()) r.error(e);
  auto in_text = text.find("quantization_config");
  auto in_root = root.find("quantization_config");
  const bool have_text = in_text != text.end() && !in_text->is_null();
  const bool have_root = in_root != root.end() && !in_root->is_null();
  if (have_text && have_root && *in_text != *in_root)
    r.error("quantization_config at the root contradicts text_config.quantization_config");
  if (have_text)
    parse_quantization(*in_text, "text_config.quantization_config", c, r);
  else if (have_root)
    parse_quantization(*in_root, "quantization_config", c, r);
  if (c.attn_res_block_size <= 0)
    r.error(
        fmt::format("text_config.attn_res_block_size must be a positive integer for kimi_k3 (Block AttnRes), "
                    "got {}",
                    c.attn_res_block_size));
}

}  // namespace

const char* family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::KimiLinear: return "kimi_linear";
    case ModelFamily::KimiK3: return "kimi_k3";
  }
  return "?";
}

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::Kda: return "kda";
    case LayerKind::Mla: return "mla";
  }
  return "?";
}

Result<ModelConfig> ModelConfig::from_json(const nlohmann::ordered_json& json, std::string_view label) {
  if (!json.is_object()) return invalid_argument("{}: config must be a JSON object", label);
  auto mt = json.find("model_type");
  if (mt == json.end() || !mt->is_string())
    return invalid_argument("{}: missing \"model_type\" (expected \"kimi_linear\" or \"kimi_k3\")", label);
  const std::string model_type = mt->get<std::string>();
  const bool k3 = model_type == "kimi_k3";
  if (k3 && (!json.contains("text_config") || !json["text_config"].is_object()))
    return invalid_argument(
        "{}: model_type \"kimi_k3\" needs a \"text_config\" object (the text decoder's config)", label);
  if (!k3 && model_type != "kimi_linear")
    return invalid_argument("{}: unsupported model_type \"{}\" (rill serves \"kimi_linear\" and \"kimi_k3\")", label,
                            model_type);
  ModelConfig c;
  c.family = ModelFamily::KimiLinear;
  FieldReader r(k3 ? json["text_config"] : json, k3 ? "text_config." : "");
  if (k3) {
    parse_kimi_k3(json, c, r);
  } else {
    parse_kimi_linear(json, c, r);
    // The plain-residual Kimi Linear composition would silently ignore AttnRes weights.
    if (c.attn_res_block_size > 0)
      r.error("attn_res_block_size (Block AttnRes) is only supported with model_type \"kimi_k3\"");
    if (auto q = json.find("quantization_config"); q != json.end() && !q->is_null()) {
      const std::string method = q->is_object() ? q->value("quant_method", std::string()) : std::string();
      if (method == "fp8" || (method == "compressed-tensors" && q->value("format", std::string("float-quantized")) ==
                                                                    "float-quantized"))
        parse_fp8_quantization(*q, "quantization_config", c, r);
      else
        r.error(fmt::format("quantization_config is not supported for kimi_linear with quant_method \"{}\" (BF16, or "
                            "FP8: \"fp8\" with weight_block_size [128, 128], or compressed-tensors float-quantized)",
                            method));
    }
  }
  validate(c, r);
  if (!r.errors().empty()) {
    std::string msg = fmt::format("{}: invalid config", label);
    for (const auto& e : r.errors()) msg += "\n  - " + e;
    return invalid_argument("{}", msg);
  }
  return c;
}

Status apply_quantization(ModelConfig& c, const std::string& q) {
  if (q.empty() || q == "none") return {};
  if (q != "fp8" && q != "ptpc_fp8")
    return invalid_argument(
        "--quantization \"{}\" is not supported (fp8: FP8 E4M3 weights with 128 x 128 block "
        "scales; ptpc_fp8: one scale per weight row; both quantized at load)",
        q);
  if (c.fp8.source == Fp8Source::Checkpoint) return {};  // already FP8: loaded as stored
  c.fp8 = Fp8Config{};
  c.fp8.source = Fp8Source::QuantizeAtLoad;
  if (q == "ptpc_fp8") {
    c.fp8.block_rows = 1;
    c.fp8.block_cols = 1 << 30;  // backend::Fp8Blocks::kWholeRow
  }
  return {};
}

std::string quantization_flag(const ModelConfig& c) {
  if (c.fp8.source != Fp8Source::QuantizeAtLoad) return "";
  return c.fp8.block_rows == 1 ? "ptpc_fp8" : "fp8";
}

Result<ModelConfig> ModelConfig::load(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  RILL_ASSIGN_OR_RETURN(auto json, io::read_json_file(path));
  return from_json(json, path.string());
}

int ModelConfig::n_layers_of(LayerKind k) const {
  return int(std::count(layer_kinds.begin(), layer_kinds.end(), k));
}

int ModelConfig::n_held_layers_of(LayerKind k) const {
  int n = 0;
  for (int i = first_layer; i < stage_end(); ++i) n += layer_kinds[size_t(i)] == k;
  return n;
}

int64_t ModelConfig::kv_bytes_per_token(int elem_bytes) const {
  return int64_t(n_layers_of(LayerKind::Mla)) * mla.cache_width() * elem_bytes;
}

int64_t ModelConfig::kda_state_bytes_per_sequence() const {
  return int64_t(n_layers_of(LayerKind::Kda)) * kda.n_heads * kda.head_dim * kda.head_dim * 4;
}

int64_t ModelConfig::kda_conv_bytes_per_sequence(int elem_bytes) const {
  return int64_t(n_layers_of(LayerKind::Kda)) * 3 * kda.projection_size() * (kda.conv_kernel - 1) * elem_bytes;
}

}  // namespace rill::model
