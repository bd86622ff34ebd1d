// Engine: the one API that the server, `rill chat`, `rill generate` and the benchmarks use (design.md §4,
// style.md §7.3). One engine thread loops schedule -> execute (runner/: forward and sample) -> emit; callers
// submit requests from any thread and read each request's events from its stream. PIMPL: no CUDA or model
// headers reach the callers.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/spec/acceptance.h"
#include "engine/spec/drafter.h"
#include "engine/spec/speculative_config.h"

namespace rill::model {
class Model;
}
namespace rill::runner {
class Executor;
struct RunnerOptions;
}
namespace rill::text {
class Tokenizer;
}
namespace rill::text::constraint {
class TokenConstraint;
}

namespace rill::engine {

class Engine;

// Per-request sampling and stopping (OpenAI / vLLM semantics). An aggregate: use designated initialisers.
struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0: all tokens
  float min_p = 0.0f;
  std::optional<uint64_t> seed;     // reproducible sampling per request; unset: drawn at submit
  float presence_penalty = 0.0f;    // OpenAI: over generated tokens, [-2, 2]
  float frequency_penalty = 0.0f;   // OpenAI: over generated tokens, [-2, 2]
  float repetition_penalty = 1.0f;  // vLLM: over prompt and generated tokens, > 0
  int32_t max_tokens = 16;          // generated tokens (clamped to the context left)
  // vLLM: the first min_tokens tokens are never EOS or stop ids (masked before sampling), and stop strings
  // only count when they end in the text of a later token.
  int32_t min_tokens = 0;
  std::vector<std::string> stop;            // stop strings, matched in the text the caller gets
  bool include_stop_str_in_output = false;  // vLLM: keep the matched stop string (or stop id's text)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  // vLLM (and Hugging Face decode): special tokens add no text — Tokenizer::is_skipped_special; the added
  // tokens that output parsers read (tool-call markers, think tags, K3 tags) are not special and stay.
  bool skip_special_tokens = true;
  std::vector<int32_t> allowed_token_ids;  // vLLM: sample only these (empty: the whole vocabulary)
  int32_t logprobs = -1;  // -1: none; 0: the sampled token's logprob; n: plus the n most likely
  // Checks ranges against the model: errors name the parameter (OpenAI-style 400 material).
  Status validate(int32_t vocab_size) const;
};

struct Request {
  std::vector<int32_t> prompt;
  SamplingParams params;
  int32_t reported_prompt_tokens =
      -1;  // K3 counts the prompt minus its 3-token generation stub; -1: prompt size
  // Grammar-constrained decoding (K3 tool_choice "required", response_format): which tokens may be sampled
  // next. One per request (it is stateful); null: unconstrained.
  std::shared_ptr<text::constraint::TokenConstraint> constraint;
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // the most likely tokens at this position, best first
};

// What a request's stream yields: new tokens with their text, then (once) the finish.
struct StreamEvent {
  std::vector<int32_t> token_ids;  // generated ids in this event
  std::string text;  // their text: complete UTF-8, no skipped specials, stop strings cut and held back safely
  std::vector<TokenLogprob> logprobs;  // one per token when requested
  std::optional<FinishReason> finish;  // set on the last event
  std::string stop_reason;             // the stop string or id that ended it, if any
  Status error;                        // when finish == Error
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // usage, on the last event
  // On the last event (vLLM's request_queue_time / request_prefill_time): seconds from submit() to the first
  // step that scheduled the request, and from that step to the one that sampled its first token (preemptions
  // included). -1: not measured (the request never got that far); the server then leaves the queue, prefill
  // and inference histograms alone.
  double queue_seconds = -1, prefill_seconds = -1;
};

// A request's event channel: the engine pushes, the caller pops (blocking with a deadline).
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }
  // Waits until an event is ready or `timeout` passes; false on timeout.
  bool next(StreamEvent* ev, std::chrono::milliseconds timeout);
  void push(StreamEvent ev);
  // Called (on the pushing thread, no lock held) after every push from now on, and at once if an event is
  // already waiting: lets a caller that does not block in next() (the server's stepped streams) learn that
  // it has something to read. It must be quick.
  void set_on_push(std::function<void()> on_push);

 private:
  uint64_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::function<void()> on_push_;
};

struct EngineOptions {
  int max_batch_size = 64;    // sequences per step (and KDA state slots)
  int max_num_tokens = 2048;  // tokens per step: decode tokens first, prefill chunks fill the rest
  int max_model_len = 0;      // 0: the model's max_position_embeddings capped by the cache
  int max_queue = 1024;       // waiting requests before submit answers ResourceExhausted (HTTP 429)
  bool chunked_prefill = true;
  double kv_cache_fraction = 0.9;  // GPU: fraction of free memory (after weights) for caches
  int num_kv_blocks = 0;  // explicit MLA block count (overrides the fraction; CPU default: from limits)
  int block_size = 64;
  // Prefix caching (--enable-prefix-caching): full blocks and KDA state snapshots are kept after a request
  // and reused by requests that start with the same tokens.
  bool enable_prefix_caching = false;
  int kda_snapshot_interval =
      256;  // tokens between KDA snapshots while prefilling (a multiple of block_size)
  int kda_snapshot_budget_mib = 2048;  // memory for KDA snapshots
  // Prefix caching's host tier (vLLM's --kv-offloading-backend native --kv-offloading-size GiB; 0: none):
  // MLA blocks and KDA snapshots evicted from the device go to this much host memory (pinned on CUDA) and
  // come back for a prefix hit (cache/README.md). Needs enable_prefix_caching.
  double kv_offloading_gib = 0;
  // Its disk tier (issue #38; --kv-offloading-dir DIR, --kv-offloading-disk-size GiB; "": none): items pushed
  // out of the host tier are written to files in this directory in the background and read back for a hit
  // (also after a restart: the files are indexed at start). 0 GiB: no cap but the disk's. Needs
  // kv_offloading_gib. What identifies the checkpoint goes into the files' fingerprint (`model_identity`,
  // rill serve: config.json), with the config, weights and cache layout the runner sees.
  std::string kv_offloading_dir;
  double kv_offloading_disk_gib = 0;
  std::string model_identity;
  // Take KDA snapshots inside prefill steps where the backend can (else chunks end at every snapshot
  // position). Tests turn it off to cover the chunk-cutting path on the CPU.
  bool kda_snapshots_in_step = true;
  // Threads computing constrained requests' token masks (0: an eighth of the hardware threads, 1 to 4).
  int mask_threads = 0;
  // CUDA graphs off (vLLM's --enforce-eager); graphs are on by default on CUDA: decode steps replay a graph
  // captured per batch-size bucket (runner/).
  bool enforce_eager = false;
  // runner::RunnerOptions::capture_graphs (false: decode steps run padded as graphs would, eagerly; tests).
  bool capture_graphs = true;
  // Tests only: each step first waits for every constrained sequence's next-token mask instead of leaving the
  // sequence out of the step while it is computed, so which sequences share a step (and so the padded shapes and
  // their roundings) does not depend on the mask threads' timing: two engines compared token for token.
  bool wait_for_masks = false;
  // Tests only: called on the engine thread with every sampled row's logits (copied to the host: slow).
  std::function<void(uint64_t request_id, int32_t position, std::span<const float> logits)> logits_hook;
  // Tests only: whether the logits row that samples request_id's output token n_generated (0 = the first) is
  // overwritten with NaN before sampling (a broken forward for one row of a batch).
  std::function<bool(uint64_t request_id, int32_t n_generated)> poison_logits;
  // vLLM's --gpu-memory-utilization: the fraction of the device's TOTAL memory the whole process may hold
  // (weights + workspace + caches; the caches get what is left of it); 0: unset (kv_cache_fraction applies).
  // Sized by runner/memory_plan.cc (RunnerOptions); ignored where memory is the host's.
  double gpu_memory_utilization = 0;
  // Speculative decoding (vLLM's --speculative-config; off while num_speculative_tokens is 0): requests get
  // up to num_speculative_tokens drafts per step, verified in the step; greedy and seeded output is the
  // output without speculation, unseeded sampling has its distribution. Every sequence slot gets a
  // checkpoint state slot (rill inspect and the memory plan show the memory).
  spec::SpeculativeConfig speculative;
  // Tests only: the drafter used instead of the one `speculative` names (which must still be enabled).
  std::shared_ptr<spec::Drafter> drafter;
  // Method draft_model: the executor loads the checkpoint `speculative.draft_model` on the target's device
  // (rank 0's) and runs it beside the target (runner/draft_proposer.h); its vocabulary must be the target's.
  // With dummy weights (--load-format dummy) where this is set.
  bool draft_dummy_weights = false;
  // When a sequence stops speculating (its acceptance below break-even; spec/acceptance.h).
  spec::BreakEvenRule speculation_break_even;
};

struct EngineStats {
  int running = 0, waiting = 0;
  int kv_blocks_used = 0, kv_blocks_total = 0;
  int state_slots_used = 0, state_slots_total = 0;
  uint64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  uint64_t requests_finished = 0, preemptions = 0, steps = 0;
  // Prefix caching: prompt tokens looked up at admission and those found; blocks in the index (held by
  // running requests or idle); KDA snapshots in use out of the pool; evictions under memory pressure.
  uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  int prefix_cache_blocks = 0, kda_snapshots_used = 0, kda_snapshots_total = 0;
  uint64_t prefix_cache_evicted_blocks = 0, kda_snapshots_evicted = 0;
  // Host tier (kv_offloading_gib): prompt tokens of hits whose blocks came back from it (the rest of
  // prefix_cache_hits came from the device); bytes moved each way; host seconds the steps spent on its copies
  // before running (CPU: the copies; CUDA: issuing them); blocks and snapshots in it, and its capacity.
  uint64_t prefix_cache_hits_host = 0;
  uint64_t kv_offload_bytes_to_host = 0, kv_offload_bytes_to_device = 0;
  double kv_offload_wait_seconds = 0;
  int host_tier_blocks = 0, host_tier_blocks_total = 0, host_tier_snapshots = 0, host_tier_snapshots_total = 0;
  // Disk tier (kv_offloading_dir): prompt tokens of hits read from it (not in prefix_cache_hits_host); bytes
  // written and read; its files and bytes; writes that failed, reads that failed their checks (or the file
  // was gone), writes dropped (the writer behind, the tier read-only or off after a failure).
  bool disk_tier = false;
  uint64_t prefix_cache_hits_disk = 0;
  uint64_t kv_offload_bytes_to_disk = 0, kv_offload_bytes_from_disk = 0;
  double kv_offload_disk_read_seconds = 0;  // the engine thread's wait for the tier's readers (no read-ahead)
  int64_t disk_tier_files = 0, disk_tier_bytes = 0;
  uint64_t disk_tier_write_errors = 0, disk_tier_read_errors = 0, disk_tier_writes_dropped = 0;
  // vLLM's iteration_tokens_total histogram, kept by the engine thread: per step, the prompt tokens it
  // computed plus the tokens it sampled (so the sum is prompt_tokens_total + generation_tokens_total).
  // iteration_tokens_counts[i] counts steps with tokens <= kIterationTokenBuckets[i] (and above the bucket
  // before it); the last entry counts those above every bound (+Inf). Not cumulative.
  static constexpr std::array<int, 13> kIterationTokenBuckets = {1,   8,    16,   32,   64,   128,  256,
                                                                 512, 1024, 2048, 4096, 8192, 16384};
  std::array<uint64_t, kIterationTokenBuckets.size() + 1> iteration_tokens_counts{};
  uint64_t iteration_tokens_sum = 0;
  // Speculative decoding (vLLM's spec_decode_* metrics): verify steps of a sequence with drafts, drafts fed,
  // drafts accepted; spec_acceptance_lengths[n - 1] counts those steps that emitted n tokens (accepted + 1),
  // n in [1, num_speculative_tokens + 1]. Empty without speculation.
  uint64_t spec_num_drafts = 0, spec_num_draft_tokens = 0, spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_acceptance_lengths;
  // Sequences that stopped speculating because their acceptance stayed below break-even
  // (spec::BreakEvenRule).
  uint64_t spec_num_stopped_sequences = 0;
  void observe_iteration_tokens(int tokens) {
    size_t i = 0;
    while (i < kIterationTokenBuckets.size() && tokens > kIterationTokenBuckets[i]) ++i;
    ++iteration_tokens_counts[i];
    iteration_tokens_sum += uint64_t(tokens);
  }
};

class Engine {
 public:
  // Takes the model; the tokenizer (optional) turns ids into text and enables stop strings.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<model::Model> model,
                                                std::shared_ptr<const text::Tokenizer> tokenizer,
                                                const EngineOptions& options);
  // With the executor the factory makes from the runner options the engine derives from `options` (one rank
  // that owns its backend: runner::local_executor_factory; several ranks: runner/parallel_executor.h).
  using ExecutorFactory =
      std::function<Result<std::unique_ptr<runner::Executor>>(const runner::RunnerOptions& options)>;
  static Result<std::unique_ptr<Engine>> create(const ExecutorFactory& make_executor,
                                                std::shared_ptr<const text::Tokenizer> tokenizer,
                                                const EngineOptions& options);
  ~Engine();

  // Validates and enqueues; errors: InvalidArgument (bad params, prompt too long: names the parameter),
  // ResourceExhausted (queue full), Unavailable (shutting down).
  Result<std::shared_ptr<RequestStream>> submit(Request request);
  // Ends a request now (finish = Cancelled); its blocks and slot are freed in the next step. Unknown ids:
  // no-op.
  void cancel(uint64_t id);
  EngineStats stats() const;
  // Evicts every cached block and snapshot no running request holds; returns once done (vLLM's
  // /reset_prefix_cache). A no-op without prefix caching.
  Status reset_prefix_cache();
  // With a host tier (kv_offloading_gib): moves every cached block and snapshot no running request holds
  // from the device to the host tier, as memory pressure would (benchmarks, tests); returns once done.
  Status offload_prefix_cache();
  // With a disk tier (kv_offloading_dir): moves every cached block and snapshot no running request holds to
  // the disk tier and waits until the files are written (tests, benchmarks; shutdown does the same).
  Status persist_prefix_cache();
  // Stops accepting; with `drain`, lets running and waiting requests finish, else cancels them; joins the
  // thread.
  void shutdown(bool drain);

  // Shuts down (cancelling what runs) and hands the model back, so a benchmark can compare engine settings on
  // one loaded model; the engine's caches are freed when it is destroyed. The engine serves nothing after.
  std::unique_ptr<model::Model> release_model();

  const model::Model& model() const;
  std::string device_description() const;  // the device the steps run on (rank 0's), for logs
  int max_model_len() const;
  std::string memory_plan() const;  // printed at start-up

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rill::engine
