#include "model/fixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

namespace rill::testing {

Reference::Reference(const std::filesystem::path& dir) {
  auto f = io::SafetensorsFile::open(dir / "reference.safetensors");
  if (!f.ok()) throw std::runtime_error(f.status().to_string());
  file_ = std::make_unique<io::SafetensorsFile>(std::move(f).value());
}

std::unique_ptr<model::Model> load_fixture_model(const std::filesystem::path& dir, backend::Backend& be) {
  auto m = model::load_model(dir, be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return nullptr;
  model::StepLimits lim;
  lim.max_tokens = 256;
  lim.max_seqs = 8;
  lim.max_logit_rows = 256;
  lim.max_context = 512;
  EXPECT_TRUE((*m)->reserve_workspace(lim).ok());
  return std::move(m).value();
}

std::vector<std::string> kimi_k3_fixtures() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir(), ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("kimi_k3_", 0) == 0 && std::filesystem::exists(e.path() / "reference.safetensors"))
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool Reference::has(const std::string& name) const { return file_->find(name) != nullptr; }

int Reference::n_prompts() const {
  int n = 0;
  while (file_->find("prompt_" + std::to_string(n))) ++n;
  return n;
}

std::vector<int32_t> Reference::ints(const std::string& name) const {
  const io::TensorInfo* t = file_->find(name);
  if (!t || t->dtype != DType::I32) throw std::runtime_error("reference has no I32 tensor " + name);
  std::vector<int32_t> v(static_cast<size_t>(t->shape.numel()));
  std::memcpy(v.data(), file_->view(*t).data, v.size() * 4);
  return v;
}

std::vector<float> Reference::floats(const std::string& name) const {
  const io::TensorInfo* t = file_->find(name);
  if (!t || t->dtype != DType::F32) throw std::runtime_error("reference has no F32 tensor " + name);
  std::vector<float> v(static_cast<size_t>(t->shape.numel()));
  std::memcpy(v.data(), file_->view(*t).data, v.size() * 4);
  return v;
}

Shape Reference::shape(const std::string& name) const { return file_->find(name)->shape; }

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

}  // namespace rill::testing
