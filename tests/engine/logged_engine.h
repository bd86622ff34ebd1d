// An engine over a checkpoint on a given backend that records the logits of every row it samples, per
// request (EngineOptions::logits_hook) — what the engine tests compare runs by — and the random prompts they
// feed it.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <fstream>

#include "engine/engine.h"
#include "model/model.h"
#include "test_backend_options.h"

namespace rill::testing {

class LoggedEngine {
 public:
  // No engine (ok() false) when `be` is null: the backend is not available here (a test then skips).
  LoggedEngine(std::unique_ptr<backend::Backend> be, const std::filesystem::path& model_dir,
               engine::EngineOptions o, std::shared_ptr<const text::Tokenizer> tokenizer = nullptr)
      : be_(std::move(be)), log_(std::make_shared<Log>()) {
    if (!be_) return;
    auto m = model::load_model(model_dir, *be_);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return;
    std::shared_ptr<Log> log = log_;
    o.logits_hook = [log](uint64_t id, int32_t, std::span<const float> row) {
      std::lock_guard lock(log->mu);
      log->rows[id].emplace_back(row.begin(), row.end());
    };
    auto e = engine::Engine::create(std::move(m).value(), std::move(tokenizer), o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    if (e.ok()) engine_ = std::move(e).value();
  }
  ~LoggedEngine() {
    if (engine_) engine_->shutdown(false);
  }
  bool ok() const { return engine_ != nullptr; }
  engine::Engine& engine() { return *engine_; }
  // The rows sampled for request `id` so far, in order.
  std::vector<std::vector<float>> logits(uint64_t id) {
    std::lock_guard lock(log_->mu);
    return log_->rows[id];
  }

 private:
  struct Log {
    std::mutex mu;
    std::map<uint64_t, std::vector<std::vector<float>>> rows;
  };
  std::unique_ptr<backend::Backend> be_;  // outlives the engine (declared first)
  std::shared_ptr<Log> log_;
  std::unique_ptr<engine::Engine> engine_;
};

// The CUDA backend, or null where there is no GPU.
// Null only where there is no GPU (Unavailable: the test then skips); any other failure to make the backend
// (out of memory beside other test processes, say) fails the test instead of skipping it silently.
inline std::unique_ptr<backend::Backend> cuda_backend_or_null() {
  auto be = testing::make_test_backend("cuda");
  if (!be.ok()) {
    EXPECT_EQ(be.status().code(), StatusCode::Unavailable) << be.status().to_string();
    return nullptr;
  }
  return std::move(be).value();
}

// ||got - want|| / ||want|| of two logit rows (infinity where the sizes differ or a value is not finite).
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
}

// A copy of the checkpoint `src` (in a fresh temporary folder, removed with the object) whose MoE layers route
// every token to every expert: top-k over all experts, no expert groups. Top-k selection is discontinuous, so
// on the tiny random models bf16 rounding that differs between two GPU runs (a GEMM against a GEMV, another
// chunking) flips near-tied experts, and the logits of that position move by order 1 (the model tests replay
// the routing for this reason: tests/model/logit_compare.h). With every expert chosen the model is a
// continuous function of its inputs, so engine runs that batch or split the same tokens differently on the GPU
// differ by bf16 rounding alone, and a wrong state still moves them by order 1. The weights are the same files.
class ContinuousRoutingCopy {
 public:
  explicit ContinuousRoutingCopy(const std::filesystem::path& src) {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "rill-all-experts-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) {
      ADD_FAILURE() << "mkdtemp failed for " << tmpl;
      return;
    }
    dir_ = tmpl;
    for (const auto& e : fs::directory_iterator(src))
      if (e.path().filename() != "config.json") fs::create_symlink(fs::absolute(e.path()), dir_ / e.path().filename());
    nlohmann::json c = nlohmann::json::parse(std::ifstream(src / "config.json"));
    c["num_experts_per_token"] = c.at("num_experts");
    c["use_grouped_topk"] = false;
    c["topk_group"] = c.value("num_expert_group", 1);
    std::ofstream(dir_ / "config.json") << c.dump(2);
  }
  ~ContinuousRoutingCopy() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  ContinuousRoutingCopy(const ContinuousRoutingCopy&) = delete;
  ContinuousRoutingCopy& operator=(const ContinuousRoutingCopy&) = delete;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

// `n` ordinary token ids of the tiny fixtures (no EOS or special ids).
inline std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(3 + rng() % 500);
  return t;
}

}  // namespace rill::testing
