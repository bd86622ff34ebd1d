// FP8 weights (issue #35) on the CPU reference:
//  - checkpoints made by an independent script (tools/fp8_fixture/make_fp8_checkpoint.py: DeepSeek-V3's
//    block layout and compressed-tensors' channel layout, from tests/data/kimi_linear_tiny_a) load to exactly
//    the script's own dequantized values (FNV-1a 64 of every quantized matrix, float32), whether rill keeps
//    the matrix FP8 or dequantizes it at load;
//  - `--quantization fp8` on the bf16 fixture gives the same codes and scales as the script (same algorithm,
//    written independently), and logits close to the bf16 run; on the trained demo model each position's
//    logits stay within a stated relative L2 of the unquantized model's, with the same top-1 token;
//  - unsupported FP8 variants are refused naming their field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cpu/weight_rows.h"
#include "model/fixture.h"
#include "model/model.h"
#include "model/sequence_session.h"
#include "test_paths.h"

namespace rill::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

uint64_t fnv1a64(const std::vector<float>& v) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * 4; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// The loaded values of one declared matrix (a whole tensor or a stack's part), in fp32, whatever its format.
std::vector<float> loaded_matrix(const WeightTable& t, const WeightSpec& s) {
  const int64_t rows = s.shape[0], cols = s.shape[1];
  backend::LinearWeight w;
  int64_t row0 = 0;
  if (s.stack < 0) {
    w = *s.fp8.linear;
  } else {
    const WeightStack& k = t.stacks()[size_t(s.stack)];
    const int64_t total_rows = k.shape.numel() / cols;
    row0 = s.stack_offset / cols;
    w.weight = k.dest->reshape({total_rows, cols});
    w.format = *k.format;
    if (w.format == backend::WeightFormat::Fp8) {
      w.block = *k.block;
      w.scales = k.scales->reshape({w.block.scale_rows(total_rows), w.block.scale_cols(cols)});
    }
  }
  std::vector<float> out(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) backend::cpu::linear_row(w, row0 + r, &out[size_t(r * cols)]);
  return out;
}

struct Counts {
  int fp8 = 0, dense = 0;
};

// Every matrix in the reference against the loaded model; returns how many were checked in each format.
Counts expect_matches_reference(const Model& m, const fs::path& reference) {
  std::ifstream f(reference);
  const Json ref = Json::parse(f)["tensors"];
  Counts n;
  const WeightTable& t = m.weight_table();
  for (const WeightSpec& s : t.specs()) {
    if (s.role != WeightRole::Matrix || !ref.contains(s.name)) continue;
    const std::vector<float> v = loaded_matrix(t, s);
    const Json& want = ref[s.name];
    EXPECT_EQ(int64_t(v.size()), want["numel"].get<int64_t>()) << s.name;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(v)));
    EXPECT_EQ(std::string(hex), want["fnv1a64"].get<std::string>())
        << s.name << ": first value " << v[0] << " (script: " << want["first"][0].get<std::string>() << ")";
    const bool fp8 = s.stack >= 0 ? t.stacks()[size_t(s.stack)].fp8_target : s.fp8.target;
    ++(fp8 ? n.fp8 : n.dense);
  }
  return n;
}

std::vector<float> prompt_logits(Model& m) {
  const std::vector<int32_t> ids = {1, 17, 300, 42, 5, 99, 250, 7, 64, 128, 3, 511};
  StepLimits lim;
  lim.max_tokens = 64;
  lim.max_seqs = 1;
  lim.max_logit_rows = 64;
  lim.max_context = 64;
  EXPECT_TRUE(m.reserve_workspace(lim).ok());
  auto s = SequenceSession::create(m, 64);
  EXPECT_TRUE(s.ok());
  auto logits = s->feed(ids, 0, true);
  EXPECT_TRUE(logits.ok()) << logits.status().message();
  return logits.ok() ? *logits : std::vector<float>{};
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

class Fp8Checkpoint : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Checkpoint, LoadsTheScriptsDequantizedValues) {
  auto be = backend::make_cpu_backend();
  const fs::path dir = testing::data_dir() / GetParam();
  auto m = load_model(dir, *be);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Counts n = expect_matches_reference(**m, dir / "reference.json");
  // Both paths are exercised: matrices kept FP8, and those rill keeps dense (KDA gates, kv_b, or a stack whose
  // parts are narrower than the checkpoint's 128-row blocks) dequantized at load.
  EXPECT_GT(n.fp8, 10) << GetParam();
  EXPECT_GT(n.dense, 10) << GetParam();
  std::printf("%s: %d matrices FP8, %d dequantized at load, all equal to the script's\n", GetParam().c_str(), n.fp8,
              n.dense);
}

TEST_P(Fp8Checkpoint, LogitsStayCloseToTheBf16Model) {
  auto be = backend::make_cpu_backend();
  auto bf16 = load_model(testing::data_dir() / "kimi_linear_tiny_a", *be);
  auto fp8 = load_model(testing::data_dir() / GetParam(), *be);
  ASSERT_TRUE(bf16.ok() && fp8.ok());
  const double e = rel_l2(prompt_logits(**fp8), prompt_logits(**bf16));
  std::printf("%s: logits rel-L2 vs bf16 = %.4f\n", GetParam().c_str(), e);
  // A sanity bound, not an accuracy claim: this random 64-wide model amplifies weight noise (top-2 of 8 experts
  // flip, gates saturate): measured 0.25 (128 x 128 blocks, one scale per small matrix) and 0.07 (per channel).
  // A misplaced scale or a transposed block gives > 1. Accuracy is measured on the trained demo model (README).
  EXPECT_LT(e, 0.4);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8Checkpoint, ::testing::Values("kimi_linear_fp8_block", "kimi_linear_fp8_channel"));

TEST(Fp8Quantization, AtLoadEqualsTheScriptsBlockQuantization) {
  auto be = backend::make_cpu_backend();
  LoadOptions o;
  o.quantization = "fp8";
  auto m = load_model(testing::data_dir() / "kimi_linear_tiny_a", *be, o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  // The script quantized every matrix in 128 x 128 blocks; rill quantizes the same ones that it keeps FP8 with
  // the same blocks (stacks of parts narrower than 128 rows use smaller blocks, and kept-dense ones stay bf16:
  // those are skipped here).
  std::ifstream f(testing::data_dir() / "kimi_linear_fp8_block" / "reference.json");
  const Json ref = Json::parse(f)["tensors"];
  const WeightTable& t = (*m)->weight_table();
  int checked = 0;
  for (const WeightSpec& s : t.specs()) {
    if (s.role != WeightRole::Matrix || !ref.contains(s.name)) continue;
    const bool fp8 = s.stack >= 0 ? t.stacks()[size_t(s.stack)].fp8_target : s.fp8.target;
    const backend::Fp8Blocks b = s.stack >= 0 ? t.stacks()[size_t(s.stack)].fp8_block : s.fp8.target_block;
    if (!fp8 || b.rows != 128) continue;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(loaded_matrix(t, s))));
    EXPECT_EQ(std::string(hex), ref[s.name]["fnv1a64"].get<std::string>()) << s.name;
    ++checked;
  }
  EXPECT_GT(checked, 10);
  auto bf16 = load_model(testing::data_dir() / "kimi_linear_tiny_a", *be);
  ASSERT_TRUE(bf16.ok());
  const double e = rel_l2(prompt_logits(**m), prompt_logits(**bf16));
  std::printf("--quantization fp8 on kimi_linear_tiny_a: %d matrices equal to the script's, logits rel-L2 %.4f\n",
              checked, e);
  EXPECT_LT(e, 0.4);  // measured 0.245: see LogitsStayCloseToTheBf16Model
}

// Per-position agreement of `--quantization fp8` with the unquantized model (issue #35's must-show: relative L2
// of each position's logits, median and worst, and top-1 agreement), on the CPU, where activations are fp32 and
// the FP8 weights dequantize exactly, so the difference is the weights' quantization alone. The input is the
// unquantized model's own greedy continuation of a short prompt (text the model finds likely, as served text
// is), fed in one step with every position's logits.
struct PositionAgreement {
  double median = 0, worst = 0, top1 = 0;
  int positions = 0;
};

PositionAgreement fp8_agreement(const fs::path& dir, int n_tokens, const std::string& quantization = "fp8") {
  auto be = backend::make_cpu_backend();
  LoadOptions o;
  o.quantization = quantization;
  auto ref = load_model(dir, *be);
  auto fp8 = load_model(dir, *be, o);
  EXPECT_TRUE(ref.ok() && fp8.ok()) << dir;
  if (!ref.ok() || !fp8.ok()) return {};
  const int V = (*ref)->config().vocab_size;
  StepLimits lim;
  lim.max_tokens = n_tokens;
  lim.max_seqs = 1;
  lim.max_logit_rows = n_tokens;
  lim.max_context = n_tokens;
  EXPECT_TRUE((*ref)->reserve_workspace(lim).ok() && (*fp8)->reserve_workspace(lim).ok());
  const auto argmax = [V](const float* row) { return int32_t(std::max_element(row, row + V) - row); };
  // The greedy continuation.
  std::vector<int32_t> ids = {1, 17, 300 % V, 42};
  {
    auto s = SequenceSession::create(**ref, n_tokens);
    EXPECT_TRUE(s.ok());
    if (!s.ok()) return {};
    auto logits = s->feed(ids, 0, false);
    while (logits.ok() && int(ids.size()) < n_tokens) {
      ids.push_back(argmax(logits->data()));
      logits = s->feed(std::span<const int32_t>(&ids.back(), 1), 0, false);
    }
    EXPECT_TRUE(logits.ok()) << logits.status().message();
  }
  const auto all_logits = [&](Model& m) {
    auto s = SequenceSession::create(m, n_tokens);
    auto l = s.ok() ? s->feed(ids, 0, true) : Result<std::vector<float>>(s.status());
    EXPECT_TRUE(l.ok()) << l.status().message();
    return l.ok() ? *l : std::vector<float>(size_t(n_tokens) * size_t(V));
  };
  const std::vector<float> a = all_logits(**fp8), b = all_logits(**ref);
  std::vector<double> rel;
  int agree = 0;
  for (int p = 0; p < n_tokens; ++p) {
    const float* x = &a[size_t(p) * size_t(V)];
    const float* y = &b[size_t(p) * size_t(V)];
    double num = 0, den = 0;
    for (int v = 0; v < V; ++v) num += double(x[v] - y[v]) * (x[v] - y[v]), den += double(y[v]) * y[v];
    rel.push_back(std::sqrt(num / den));
    agree += argmax(x) == argmax(y);
  }
  std::sort(rel.begin(), rel.end());
  return {rel[rel.size() / 2], rel.back(), double(agree) / n_tokens, n_tokens};
}

TEST(Fp8Quantization, PerPositionLogitsAgainstTheUnquantizedModel) {
  // The trained demo model (tracked in the tree): hidden 256 with Kimi Linear's real KDA and MLA head dims.
  // Measured: median 0.57%, worst 9.6%, top-1 98.4% of 128 positions. The random fixtures at the same head
  // dims are no measure of this: their flat logits and saturating gates turn FP8's weight noise into a median
  // 11-13%, a worst position above 100% and 64-66% top-1 (sanity-checked in LogitsStayCloseToTheBf16Model).
  // A misplaced scale or block gives errors of order 1 everywhere.
  const fs::path demo = fs::path(rill::testing::source_dir()) / "models" / "kimi-linear-demo";
  ASSERT_TRUE(fs::exists(demo / "model.safetensors")) << demo;
  const PositionAgreement r = fp8_agreement(demo, 128);
  std::printf("--quantization fp8 vs unquantized, the demo model (CPU, %d positions): rel L2 median %.4f, worst "
              "%.4f; top-1 agreement %.1f%%\n", r.positions, r.median, r.worst, 100 * r.top1);
  EXPECT_LT(r.median, 0.02);
  EXPECT_LT(r.worst, 0.2);
  EXPECT_GE(r.top1, 0.95);
  // ptpc_fp8: one scale per weight row instead of per 128 x 128 block. Measured: median 0.56%, worst 6.6%,
  // top-1 99.2% (the demo model's rows are 256-1024 wide: a row's scale spans at most 8 blocks').
  const PositionAgreement c = fp8_agreement(demo, 128, "ptpc_fp8");
  std::printf(
      "--quantization ptpc_fp8 vs unquantized, the demo model (CPU, %d positions): rel L2 median %.4f, "
      "worst %.4f; top-1 agreement %.1f%%\n",
      c.positions, c.median, c.worst, 100 * c.top1);
  EXPECT_LT(c.median, 0.02);
  EXPECT_LT(c.worst, 0.2);
  EXPECT_GE(c.top1, 0.95);
}

// The bf16 fixture's config with `quantization_config` replaced (the weights are never reached).
Status config_error(const Json& q) {
  std::ifstream f(testing::data_dir() / "kimi_linear_tiny_a" / "config.json");
  Json c = Json::parse(f);
  c["quantization_config"] = q;
  auto r = ModelConfig::from_json(c, "config.json");
  return r.ok() ? Status{} : r.status();
}

void expect_refused(const Json& q, const std::string& field) {
  const Status s = config_error(q);
  EXPECT_FALSE(s.ok()) << q.dump();
  EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
}

TEST(Fp8Quantization, UnsupportedVariantsAreRefusedNamingTheField) {
  const Json ok = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}};
  EXPECT_TRUE(config_error(ok).ok());
  Json q = ok;
  q["fmt"] = "e5m2";
  expect_refused(q, "quantization_config.fmt");
  q = ok;
  q["activation_scheme"] = "static";
  expect_refused(q, "quantization_config.activation_scheme");
  q = ok;
  q["weight_block_size"] = {64, 64};
  expect_refused(q, "quantization_config.weight_block_size");
  q = ok;
  q.erase("weight_block_size");
  expect_refused(q, "quantization_config.weight_block_size");

  std::ifstream f(testing::data_dir() / "kimi_linear_fp8_channel" / "config.json");
  const Json ct = Json::parse(f)["quantization_config"];
  EXPECT_TRUE(config_error(ct).ok());
  Json c = ct;
  c["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  expect_refused(c, "config_groups.group_0.weights.strategy");
  c = ct;
  c["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
  expect_refused(c, "config_groups.group_0.weights");
  c = ct;
  c["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
  expect_refused(c, "config_groups.group_0.input_activations");
  c = ct;
  c["config_groups"]["group_0"]["weights"]["strategy"] = "block";
  c["config_groups"]["group_0"]["weights"]["block_structure"] = {64, 128};
  expect_refused(c, "config_groups.group_0.weights.block_structure");
  expect_refused({{"quant_method", "awq"}}, "quantization_config is not supported for kimi_linear with quant_method");
}

TEST(Fp8Quantization, UnknownFlagValueIsRefused) {
  ModelConfig c;
  const Status s = apply_quantization(c, "int4");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--quantization"), std::string::npos) << s.message();
  EXPECT_TRUE(apply_quantization(c, "fp8").ok());
  EXPECT_EQ(c.fp8.source, Fp8Source::QuantizeAtLoad);
  EXPECT_EQ(c.fp8.block_rows, 128);
  EXPECT_EQ(quantization_flag(c), "fp8");
  ModelConfig p;
  EXPECT_TRUE(apply_quantization(p, "ptpc_fp8").ok());  // vLLM's per-token-per-channel FP8
  EXPECT_EQ(p.fp8.source, Fp8Source::QuantizeAtLoad);
  EXPECT_EQ(p.fp8.block_rows, 1);
  EXPECT_EQ(p.fp8.block_cols, backend::Fp8Blocks::kWholeRow);
  EXPECT_EQ(quantization_flag(p), "ptpc_fp8");
  EXPECT_EQ(quantization_flag(ModelConfig{}), "");
}

}  // namespace
}  // namespace rill::model
