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

#include "engine/engine.h"
#include "model/model.h"

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
inline std::unique_ptr<backend::Backend> cuda_backend_or_null() {
  auto be = backend::make_backend("cuda");
  return be.ok() ? std::move(be).value() : nullptr;
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

// `n` ordinary token ids of the tiny fixtures (no EOS or special ids).
inline std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(3 + rng() % 500);
  return t;
}

}  // namespace rill::testing
