// Model: a loaded Kimi model on a backend. Owns the weights and the step workspace; runs one StepBatch at a
// time against caches it does not own (the cache manager, or a test, owns them).
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/forward_context.h"
#include "model/shard.h"
#include "model/step_batch.h"
#include "model/weights/loader.h"
#include "model/weights/weight_table.h"

namespace rill::model {

// Speculative decoding's replay records (kda_rollback "records"): `n_tokens` tokens' records for each of the
// first `n_slots` state slots (the sequence slots), in every KDA layer (LayerCache::kda_records).
struct RecordShape {
  int n_slots = 0, n_tokens = 0;
};

// Device memory for the KDA state slots, conv windows and paged MLA latent cache of every layer, and the replay
// records where speculative decoding takes them.
struct ModelCaches {
  int n_slots = 0, n_blocks = 0, block_size = 64;
  RecordShape records;
  TensorView fold_args;  // I32 [2, records.n_slots]: a fold's slots, then its counts (the runner's kda_fold input)
  std::vector<LayerCache> layers;
  std::vector<backend::DeviceAllocation> storage;

  static Result<ModelCaches> allocate(backend::Backend& be, const ModelConfig& c, int n_slots, int n_blocks,
                                      int block_size = 64, RecordShape records = {});
  static int64_t bytes_needed(const ModelConfig& c, DType act, int n_slots, int n_blocks, int block_size = 64);
  // The replay records' bytes over every KDA layer this rank holds (0 for an empty shape).
  static int64_t record_bytes(const ModelConfig& c, DType act, RecordShape records);
};

// The largest step the workspace must hold.
struct StepLimits {
  int max_tokens = 2048;     // tokens per step (prefill chunks + decode tokens)
  int max_seqs = 16;         // sequences per step
  int max_logit_rows = 16;   // rows of logits per step
  int max_context = 4096;    // longest sequence (start_pos + n_new)
};

struct LoadOptions {
  bool dummy_weights = false;  // --load-format dummy: seeded random weights, no checkpoint files
  uint64_t dummy_seed = 0;
  LoadProgress progress;
  ModelShard shard;  // the part of the model this rank loads (default: all of it)
  std::string quantization;  // --quantization: "" (as stored) or "fp8" (apply_quantization)
};

class Model {
 public:
  virtual ~Model() = default;

  // This rank's config: under tensor parallelism the KDA and MLA head counts are the rank's (shard_config).
  const ModelConfig& config() const { return config_; }
  const ModelShard& shard() const { return shard_; }
  backend::Backend& backend() const { return *be_; }
  const WeightTable& weight_table() const { return table_; }
  int64_t weight_bytes() const { return weights_.device_bytes; }
  size_t workspace_bytes() const { return workspace_.size(); }

  // Sizes the workspace with planning passes of the forward over the worst-case batches (on a
  // backend::WorkspacePlanner: nothing runs, the backend is left as it is), then allocates it once.
  Status reserve_workspace(const StepLimits& limits);
  const StepLimits& limits() const { return limits_; }

  // Runs one step and returns the F32 logits [batch.n_logit_rows(), vocab] in device memory, valid until the
  // next call. Every token id must be inside the vocabulary. For tests and tools: check_step, the batch's
  // layout (StepBatch::to_layout), prepare(), then run_prepared() — the runner does these steps itself.
  Result<TensorView> forward(const StepBatch& batch, const ModelCaches& caches);

  // Whether this model can run `batch` on `caches`: within the workspace limits, token ids inside the
  // vocabulary, state and snapshot slots inside the caches, in-step snapshots only where the backend takes them.
  Status check_step(const StepBatch& batch, const ModelCaches& caches) const;

  // Where a graphed step's inputs live: the layout in runner-owned device memory at count-only offsets
  // (Backend::upload_layout_fixed), planned from the counts only (BatchLayoutHost::count_only_plan).
  struct FixedInputs {
    void* layout = nullptr;
    size_t layout_bytes = 0;
    int block_table_stride = 0;
  };
  // The host half of a step: copies its inputs (the layout, token ids, logits rows) to the device. `layout` is
  // `batch`'s (StepBatch::to_layout, after check_step), built by the caller, who keeps it alive and unchanged
  // until the step's last run_prepared(). With `fixed` (the layout then plans from the counts only), a step of
  // the same counts puts every input at the same address.
  Status prepare(const StepBatch& batch, const backend::BatchLayoutHost& layout, const ModelCaches& caches,
                 const FixedInputs* fixed = nullptr);
  // The device half of the prepared step: kernel launches only (capturable into a graph); returns the logits.
  // Running it again for the same prepare issues the same work on the same buffers.
  Result<TensorView> run_prepared(const ModelCaches& caches);
  bool tapping() const { return taps_ != nullptr; }

  // Records every named intermediate of the following forward passes (tests, debugging); nullptr to stop.
  void set_tap_recorder(TapRecorder* taps) { taps_ = taps; }

  // One token per logits row (sampling on the backend; only the ids come back to the host).
  Status sample(TensorView logits, std::span<const backend::SamplingRow> rows, std::vector<int32_t>* ids);

 protected:
  Model(const ModelConfig& global, backend::Backend& be, const ModelShard& shard)
      : config_(shard_config(global, shard)), be_(&be), shard_(shard) {}
  // The architecture: fills `logits` ([rows, vocab] F32) from the batch; `rows` are the token indices.
  virtual Status forward_impl(ForwardContext& cx, TensorView ids, TensorView rows, const ModelCaches& caches,
                              TensorView logits) = 0;
  // Declares every weight into table_ (called once by the loader).
  virtual void declare_weights() = 0;
  // Declares the lm_head [V, H] (vocab-parallel: this rank's V / tp rows).
  void declare_lm_head(const std::string& name, backend::LinearWeight* head);
  // logits[R, V] = normed[R, H] x lm_head^T; under tensor parallelism every rank computes its vocabulary rows
  // and the rows are gathered into every rank's logits.
  Status project_logits(ForwardContext& cx, TensorView normed, const backend::LinearWeight& head,
                        TensorView logits);
  Status project_local_logits(ForwardContext& cx, TensorView normed, const backend::LinearWeight& head,
                              TensorView logits);

  friend Result<std::unique_ptr<Model>> load_model(const std::filesystem::path&, backend::Backend&,
                                                   const LoadOptions&);
  friend Result<std::unique_ptr<Model>> build_model(const ModelConfig&, backend::Backend&, const ModelShard&);
  friend Result<std::unique_ptr<Model>> load_dummy_model(const ModelConfig&, backend::Backend&, uint64_t,
                                                         const ModelShard&);

  ModelConfig config_;
  backend::Backend* be_;
  ModelShard shard_;
  WeightTable table_;
  LoadedWeights weights_;

 private:
  // Caches of the right dtypes and shapes that hold no memory (the workspace's planning passes).
  ModelCaches null_caches(int block_size) const;
  // On `be`: the model's backend, or for reserve_workspace's passes a planner for it (WorkspacePlanner).
  Status upload_inputs(backend::Backend& be, const StepBatch& batch, const backend::BatchLayoutHost& layout,
                       const ModelCaches& caches, Arena& ws, const FixedInputs* fixed);
  Status launch(backend::Backend& be, const ModelCaches& caches, Arena& ws, TensorView* logits);

  StepLimits limits_;
  TapRecorder* taps_ = nullptr;
  backend::DeviceAllocation workspace_;
  Arena arena_;
  backend::BatchLayout layout_;  // the prepared step's, on the device; its `host` is the caller's layout
  // The prepared step: its token ids and logits rows (device), and the workspace mark after them.
  TensorView ids_, rows_;
  TensorView iota_;  // 0, 1, ..., rows - 1 (placing gathered vocabulary parts, tensor parallelism only)
  std::vector<int32_t> iota_host_;  // its source, alive until the upload is done
  size_t prepared_mark_ = 0;
  bool prepared_ = false;
};

// Reads MODEL_DIR/config.json, builds the architecture, checks and loads the weights (or dummy weights).
Result<std::unique_ptr<Model>> load_model(const std::filesystem::path& dir, backend::Backend& be,
                                          const LoadOptions& options = {});

// `config` with seeded random weights filled on the backend (--load-format dummy): no files needed.
Result<std::unique_ptr<Model>> load_dummy_model(const ModelConfig& config, backend::Backend& be, uint64_t seed,
                                                const ModelShard& shard = {});

// The architecture of `config` (this rank's part of it) with its weight table declared but nothing loaded
// (rill inspect, tests).
Result<std::unique_ptr<Model>> build_model(const ModelConfig& config, backend::Backend& be,
                                           const ModelShard& shard = {});

}  // namespace rill::model
