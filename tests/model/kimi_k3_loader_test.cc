// Loading Kimi K3 checkpoints: the real layout loads (sharded, vision skipped, padded A_log, MXFP4 experts,
// alternative spellings), and each kind of malformed checkpoint is rejected with the tensor named.
#include <gtest/gtest.h>

#include <cstring>

#include "model/fixture.h"
#include "model/k3_checkpoint.h"
#include "model/model.h"
#include "model/sequence_session.h"

namespace rill::model {
namespace {

namespace fs = std::filesystem;
using testing::find_tensor;

constexpr const char* kLayer0 = "language_model.model.layers.0.";
constexpr const char* kLayer1 = "language_model.model.layers.1.";

class KimiK3Loader : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir("k3_loader_src");
    ASSERT_TRUE(testing::write_tiny_k3(dir_->path(), 77, 2).ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static Status load(const fs::path& dir) {
    auto be = backend::make_cpu_backend();
    auto m = load_model(dir, *be);
    return m.ok() ? Status{} : m.status();
  }

  // Loads a copy of the tiny K3 with `edit` applied; returns the load status.
  static Status load_edited(const std::string& tag, const testing::TensorEdit& edit,
                            const testing::ConfigEdit& edit_config = {}) {
    testing::TempDir dst("k3_loader_" + tag);
    EXPECT_TRUE(testing::copy_checkpoint(dir_->path(), dst.path(), edit, edit_config).ok());
    return load(dst.path());
  }

  static void expect_rejected(const Status& st, std::initializer_list<std::string> fragments) {
    ASSERT_FALSE(st.ok());
    for (const auto& f : fragments)
      EXPECT_NE(st.message().find(f), std::string::npos) << "want: " << f << "\n" << st.message();
  }

  static testing::TempDir* dir_;
};

testing::TempDir* KimiK3Loader::dir_ = nullptr;

TEST_F(KimiK3Loader, TheRealLayoutLoadsShardedWithTheVisionTowerSkipped) {
  ASSERT_TRUE(fs::exists(dir_->path() / "model.safetensors.index.json"));
  auto ckpt = io::Checkpoint::open(dir_->path());
  ASSERT_TRUE(ckpt.ok());
  // What the writer produced is the spec §2.3 layout.
  const auto* a_log = ckpt->find(std::string(kLayer0) + "self_attn.A_log");
  ASSERT_NE(a_log, nullptr);
  EXPECT_EQ(a_log->info->shape, (Shape{128}));
  EXPECT_EQ(a_log->info->dtype, DType::F32);
  const auto* packed = ckpt->find(std::string(kLayer1) + "block_sparse_moe.experts.3.w1.weight_packed");
  ASSERT_NE(packed, nullptr);
  EXPECT_EQ(packed->info->shape, (Shape{32, 32}));  // [I, latent / 2]
  EXPECT_EQ(packed->info->dtype, DType::U8);
  const auto* scale = ckpt->find(std::string(kLayer1) + "block_sparse_moe.experts.3.w2.weight_scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->info->shape, (Shape{64, 1}));  // [latent, I / 32]
  EXPECT_NE(ckpt->find("vision_tower.patch_embed.proj.weight"), nullptr);
  EXPECT_NE(ckpt->find(std::string(kLayer0) + "self_attention_res_proj.weight"), nullptr);
  const Status st = load(dir_->path());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST_F(KimiK3Loader, ALogMayBeUnpaddedButAPaddedTailMustBeZero) {
  const std::string name = std::string(kLayer0) + "self_attn.A_log";
  EXPECT_TRUE(load_edited("alog_flat", [&](auto& t, auto&) {
                auto* x = find_tensor(t, name);
                x->view = x->view.narrow(0, 0, 2);  // [num_heads]: what the HF module allocates
              }).ok());
  const Status st = load_edited("alog_tail", [&](auto& t, auto& owned) {
    auto* x = find_tensor(t, name);
    owned.push_back(HostTensor::zeros(DType::F32, {128}));
    std::memcpy(owned.back().view.data, x->view.data, 128 * 4);
    owned.back().view.template ptr<float>()[100] = 0.25f;
    x->view = owned.back().view;
  });
  expect_rejected(st,
                  {name + ": stored [128] is zero-padded past its 2 used values, but element 100 is 0.25"});
}

TEST_F(KimiK3Loader, BadPackedShapesAndDtypesAreNamed) {
  const std::string w1 = std::string(kLayer1) + "block_sparse_moe.experts.3.w1.weight_packed";
  const std::string w2 = std::string(kLayer1) + "block_sparse_moe.experts.5.w2.weight_packed";
  const std::string s3 = std::string(kLayer1) + "block_sparse_moe.experts.6.w3.weight_scale";
  const Status st = load_edited("packed_shapes", [&](auto& t, auto& owned) {
    owned.push_back(HostTensor::zeros(DType::U8, {32, 64}));  // unpacked width: one code per byte
    find_tensor(t, w1)->view = owned.back().view;
    owned.push_back(HostTensor::zeros(DType::BF16, {64, 16}));  // right shape, not bytes
    find_tensor(t, w2)->view = owned.back().view;
    owned.push_back(HostTensor::zeros(DType::U8, {32, 4}));  // a scale per 16 columns
    find_tensor(t, s3)->view = owned.back().view;
  });
  expect_rejected(st, {w1 + ": shape [32, 64] (expected [32, 32])", w2 + ": dtype BF16 (expected U8)",
                       s3 + ": shape [32, 4] (expected [32, 2])"});
}

TEST_F(KimiK3Loader, MissingScaleTensorsAreNamed) {
  const std::string scale = std::string(kLayer1) + "block_sparse_moe.experts.5.w2.weight_scale";
  const Status st = load_edited("no_scale", [&](auto& t, auto&) {
    std::erase_if(t, [&](const io::NamedTensor& x) { return x.name == scale; });
  });
  expect_rejected(st, {"1 missing", scale + " [64, 1]"});
}

TEST_F(KimiK3Loader, QuantizedTensorsOutsideTheRoutedExpertsAreRejected) {
  // The format packs only the routed experts (spec §1.4); a packed attention projection is a wrong file.
  const std::string dense = std::string(kLayer0) + "self_attn.q_proj.weight";
  const std::string base = std::string(kLayer0) + "self_attn.q_proj.";
  const Status st = load_edited("packed_q", [&](auto& t, auto& owned) {
    auto* x = find_tensor(t, dense);
    const int64_t rows = x->view.size(0), cols = x->view.size(1);
    std::erase_if(t, [&](const io::NamedTensor& y) { return y.name == dense; });
    owned.push_back(HostTensor::zeros(DType::U8, {rows, cols / 2}));
    t.push_back({base + "weight_packed", owned.back().view});
    owned.push_back(HostTensor::zeros(DType::U8, {rows, cols / 32}));
    t.push_back({base + "weight_scale", owned.back().view});
  });
  expect_rejected(st, {base + "weight_packed (quantized, but " + dense + " is a dense weight",
                       base + "weight_scale (", "1 missing", dense});
}

TEST_F(KimiK3Loader, PackedExpertsNeedTheQuantizationConfig) {
  const Status st =
      load_edited("no_qcfg", {}, [](auto& c) { c["text_config"].erase("quantization_config"); });
  expect_rejected(st, {std::string(kLayer1) + "block_sparse_moe.experts.0.w1.weight [32, 64]",
                       "w1.weight_packed (quantized, but", "mxfp4-pack-quantized quantization_config"});
}

TEST_F(KimiK3Loader, WrongQuantizationFormatAndMissingTextConfigAreConfigErrors) {
  Status st = load_edited(
      "fp8", {}, [](auto& c) { c["text_config"]["quantization_config"]["format"] = "float-quantized"; });
  expect_rejected(st, {"config.json", "text_config.quantization_config", "float-quantized"});
  st = load_edited("no_text", {}, [](auto& c) { c.erase("text_config"); });
  expect_rejected(st, {"config.json", "needs a \"text_config\" object"});
}

TEST_F(KimiK3Loader, MtpLayersAreSkippedOnlyWhenTheConfigDeclaresThem) {
  // The tiny K3 has 7 layers, so an MTP layer would be stored as layer 7 (spec §5).
  const std::string mtp = "language_model.model.layers.7.eh_proj.weight";
  auto add_mtp = [&](auto& t, auto& owned) {
    owned.push_back(HostTensor::zeros(DType::BF16, {128, 256}));
    t.push_back({mtp, owned.back().view});
  };
  expect_rejected(load_edited("mtp_undeclared", add_mtp), {"1 unexpected", mtp});
  const Status st =
      load_edited("mtp", add_mtp, [](auto& c) { c["text_config"]["num_nextn_predict_layers"] = 1; });
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST_F(KimiK3Loader, AlternativeSpellingsLoadTheSameModel) {
  // Converted mirrors: `*_res.{norm,proj}_weight` and `language_model.layers.` without the `model.` level.
  testing::TempDir alt("k3_loader_alt");
  ASSERT_TRUE(testing::copy_checkpoint(dir_->path(), alt.path(), [](auto& t, auto&) {
                for (auto& x : t) {
                  for (const char* part : {"self_attention_res", "mlp_res", "output_attn_res"})
                    for (const char* which : {"norm", "proj"}) {
                      const std::string from = std::string(part) + "_" + which + ".weight";
                      const size_t at = x.name.find(from);
                      if (at != std::string::npos)
                        x.name = x.name.substr(0, at) + part + "." + which + "_weight";
                    }
                  const std::string deep = "language_model.model.layers.";
                  if (x.name.rfind(deep, 0) == 0)
                    x.name = "language_model.layers." + x.name.substr(deep.size());
                }
              }).ok());
  auto logits_of = [](const fs::path& dir) -> std::vector<float> {
    auto be = backend::make_cpu_backend();
    auto m = load_model(dir, *be);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    EXPECT_TRUE((*m)->reserve_workspace({16, 1, 16, 64}).ok());
    auto s = SequenceSession::create(**m, 64);
    const std::vector<int32_t> ids = {5, 17, 300, 42, 9};
    auto l = s->feed(ids, 0, true);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    return l.ok() ? *l : std::vector<float>{};
  };
  const auto want = logits_of(dir_->path());
  const auto got = logits_of(alt.path());
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace rill::model
