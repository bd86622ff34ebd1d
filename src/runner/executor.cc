#include "runner/executor.h"

namespace rill::runner {
namespace {

// Members in the order they are made, so destroyed in reverse: the runners before the backend they run on.
class LocalExecutor final : public Executor {
 public:
  LocalExecutor(std::unique_ptr<backend::Backend> backend, std::unique_ptr<DraftProposer> draft,
                std::unique_ptr<ModelRunner> runner)
      : backend_(std::move(backend)), draft_(std::move(draft)), runner_(std::move(runner)) {}
  Status bind_thread() override { return runner_->bind_thread(); }
  Result<StepOutput> execute(const model::StepBatch& batch, const SamplingBatch& sampling,
                             const cache::CacheOps& ops) override {
    return runner_->execute(batch, sampling, ops);
  }
  const model::Model& model() const override { return runner_->model(); }
  const cache::MemoryPlan& memory_plan() const override { return runner_->memory_plan(); }
  const cache::PrefixCacheOptions& prefix_options() const override { return runner_->prefix_options(); }
  int max_model_len() const override { return runner_->max_model_len(); }
  std::string device_description() const override { return runner_->model().backend().device_description(); }
  bool has_draft_model() const override { return draft_ != nullptr; }
  std::vector<std::vector<int32_t>> propose_drafts(std::span<const DraftRequest> requests) override {
    return draft_ ? draft_->propose(requests) : Executor::propose_drafts(requests);
  }
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
  // Not where the executor owns the backend: the model would outlive it.
  std::unique_ptr<model::Model> release_model() override {
    draft_.reset();
    return backend_ ? nullptr : runner_->release_model();
  }

 private:
  std::unique_ptr<backend::Backend> backend_;  // null: the caller's
  std::unique_ptr<DraftProposer> draft_;
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace

Result<std::unique_ptr<Executor>> make_local_executor(std::unique_ptr<model::Model> model, const RunnerOptions& o,
                                                      std::unique_ptr<backend::Backend> backend) {
  // Locals in the order they must outlive each other, whatever path returns: the backend last.
  std::unique_ptr<backend::Backend> owned = std::move(backend);
  std::unique_ptr<model::Model> target = std::move(model);
  if (!target) return invalid_argument("runner: no model");
  if (owned && owned.get() != &target->backend())
    return internal_error("make_local_executor: the model runs on another backend than the one handed over");
  // The draft first: its caches take their share of the memory before the target plans its own.
  std::unique_ptr<DraftProposer> draft;
  if (!o.draft.dir.empty()) {
    RILL_ASSIGN_OR_RETURN(draft, DraftProposer::create(target->backend(), o, target->config().vocab_size));
  }
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, ModelRunner::create(std::move(target), o));
  return std::unique_ptr<Executor>(new LocalExecutor(std::move(owned), std::move(draft), std::move(runner)));
}

ExecutorFactory local_executor_factory(std::unique_ptr<backend::Backend> backend,
                                       std::unique_ptr<model::Model> model) {
  struct Loaded {
    std::unique_ptr<backend::Backend> backend;
    std::unique_ptr<model::Model> model;
  };
  auto loaded = std::make_shared<Loaded>(Loaded{std::move(backend), std::move(model)});
  return [loaded](const RunnerOptions& o) -> Result<std::unique_ptr<Executor>> {
    if (!loaded->model) return internal_error("local_executor_factory: its model was handed out already");
    return make_local_executor(std::move(loaded->model), o, std::move(loaded->backend));
  };
}

}  // namespace rill::runner
