// Loader: a checkpoint that does not match the model is rejected with every missing, unexpected and
// mis-shaped (or wrongly typed) tensor named in one error; nothing is loaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/checkpoint.h"
#include "model/fixture.h"
#include "model/model.h"

namespace rill::model {
namespace {

namespace fs = std::filesystem;

// Copies fixture a into a temp dir, letting `edit` change the tensor list before it is written.
fs::path mutated_checkpoint(const std::string& tag,
                            const std::function<void(std::vector<io::NamedTensor>&, std::vector<HostTensor>&)>& edit) {
  const fs::path src = testing::data_dir() / "kimi_linear_tiny_a";
  const fs::path dst = fs::temp_directory_path() / ("rill_loader_test_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(dst);
  fs::create_directories(dst);
  fs::copy_file(src / "config.json", dst / "config.json");
  auto ckpt = io::Checkpoint::open(src);
  EXPECT_TRUE(ckpt.ok());
  std::vector<io::NamedTensor> tensors;
  std::vector<HostTensor> owned;
  for (const auto& n : ckpt->names()) tensors.push_back({n, ckpt->view(*ckpt->find(n))});
  edit(tensors, owned);
  EXPECT_TRUE(io::write_safetensors(dst / "model.safetensors", tensors).ok());
  return dst;
}

Status try_load(const fs::path& dir) {
  auto be = backend::make_cpu_backend();
  auto m = load_model(dir, *be);
  return m.ok() ? Status{} : m.status();
}

TEST(Loader, ReportsMissingUnexpectedAndMisshapedTogether) {
  const fs::path dir = mutated_checkpoint("all", [](auto& t, auto& owned) {
    std::erase_if(t, [](const io::NamedTensor& x) { return x.name == "model.layers.0.self_attn.q_proj.weight"; });
    for (auto& x : t) {
      if (x.name == "model.norm.weight") {  // wrong shape
        owned.push_back(HostTensor::zeros(DType::BF16, {32}));
        x.view = owned.back().view;
      }
      if (x.name == "model.layers.2.self_attn.kv_b_proj.weight") {  // wrong dtype
        owned.push_back(HostTensor::zeros(DType::I32, x.view.shape));
        x.view = owned.back().view;
      }
    }
    owned.push_back(HostTensor::zeros(DType::BF16, {4}));
    t.push_back({"model.layers.0.self_attn.mystery.weight", owned.back().view});
  });
  const Status st = try_load(dir);
  ASSERT_FALSE(st.ok());
  const std::string& m = st.message();
  EXPECT_NE(m.find("1 missing"), std::string::npos) << m;
  EXPECT_NE(m.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("model.norm.weight: shape [32] (expected [64])"), std::string::npos) << m;
  EXPECT_NE(m.find("kv_b_proj.weight: dtype I32"), std::string::npos) << m;
  EXPECT_NE(m.find("1 unexpected"), std::string::npos) << m;
  EXPECT_NE(m.find("mystery.weight"), std::string::npos) << m;
  fs::remove_all(dir);
}

TEST(Loader, AcceptsTheStoredShapeVariants) {
  // A_log stored flat [H] instead of [1, 1, H, 1] is the same tensor.
  const fs::path dir = mutated_checkpoint("alog", [](auto& t, auto& owned) {
    for (auto& x : t)
      if (x.name.find("A_log") != std::string::npos) x.view = x.view.reshape({x.view.numel()});
  });
  EXPECT_TRUE(try_load(dir).ok());
  fs::remove_all(dir);
}

TEST(Loader, MissingWeightsAndBadConfigAreClearErrors) {
  const fs::path dir = fs::temp_directory_path() / ("rill_loader_test_empty_" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(testing::data_dir() / "kimi_linear_tiny_a" / "config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  Status st = try_load(dir);
  EXPECT_EQ(st.code(), StatusCode::NotFound);
  EXPECT_NE(st.message().find("no *.safetensors"), std::string::npos) << st.message();
  std::ofstream(dir / "config.json") << "{\"model_type\": \"kimi_linear\", \"hidden_size\": ";
  st = try_load(dir);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("config.json"), std::string::npos) << st.message();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rill::model
