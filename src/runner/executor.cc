#include "runner/executor.h"

namespace rill::runner {
namespace {

class LocalExecutor final : public Executor {
 public:
  explicit LocalExecutor(std::unique_ptr<ModelRunner> runner) : runner_(std::move(runner)) {}
  Status bind_thread() override { return runner_->bind_thread(); }
  Result<StepOutput> execute(const model::StepBatch& batch, const SamplingBatch& sampling,
                             const cache::CacheOps& ops) override {
    return runner_->execute(batch, sampling, ops);
  }
  const model::Model& model() const override { return runner_->model(); }
  const cache::MemoryPlan& memory_plan() const override { return runner_->memory_plan(); }
  const cache::PrefixCacheOptions& prefix_options() const override { return runner_->prefix_options(); }
  int max_model_len() const override { return runner_->max_model_len(); }
  std::vector<cache::DiskRecord> take_disk_records() override {
    return runner_->disk_tier() ? runner_->disk_tier()->take_found() : std::vector<cache::DiskRecord>{};
  }
  std::vector<bool> load_from_disk(const std::vector<cache::DiskLoad>& loads) override {
    return runner_->load_from_disk(loads);
  }
  std::optional<DiskTierStats> disk_stats() const override {
    if (!runner_->disk_tier()) return std::nullopt;
    return runner_->disk_tier()->stats();
  }
  void drain_disk() override {
    if (runner_->disk_tier()) runner_->disk_tier()->drain();
  }
  std::unique_ptr<model::Model> release_model() override { return runner_->release_model(); }

 private:
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace

Result<std::unique_ptr<Executor>> make_local_executor(std::unique_ptr<model::Model> model,
                                                      const RunnerOptions& o) {
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, ModelRunner::create(std::move(model), o));
  return std::unique_ptr<Executor>(new LocalExecutor(std::move(runner)));
}

}  // namespace rill::runner
