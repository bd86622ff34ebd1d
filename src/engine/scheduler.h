// Scheduler: which sequences run in the next step and with how many tokens (style.md §7.3, nano-vllm's
// shape). No threads, no device code, no I/O: unit-tested on the CPU against small caches.
//   schedule():    decode tokens first (one per running sequence), then prefill chunks from running and then
//                  waiting sequences under --max-num-tokens and --max-batch-size; a request is admitted only
//                  when its first chunk's blocks and a state slot can be had, starting after its longest
//                  cached prefix (prefix caching); when blocks run out for a running sequence, unreferenced
//                  cached blocks are evicted, then the newest running sequence is preempted (recomputed
//                  later). A sequence that would sample while its constraint's mask is still being
//                  computed (Sequence::can_sample) sits out the step: not preempted, caches untouched.
//   postprocess(): advances counters, commits the step to the caches (prefix caching), appends sampled
//   tokens,
//                  applies the token-level stop conditions.
// Every sequence that leaves (finished, cancelled, failed) gives back its caches exactly once; a release the
// caches refuse (an id released twice) finishes that request with an Internal error.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "cache/cache_manager.h"
#include "engine/sequence.h"
#include "engine/stop_checker.h"
#include "model/step_batch.h"

namespace rill::engine {

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int32_t n_new = 0;
  bool samples = false;  // this chunk reaches the end of the sequence: sample a token from its logits
  // Prefix caching: KDA snapshots the step takes inside this chunk (into staging slots), committed after it.
  std::vector<model::KdaSnapshotRequest> kda_snapshots;
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  bool empty() const { return seqs.empty(); }
  model::StepBatch to_batch() const;
};

struct SchedulerLimits {
  int max_batch_size = 64;
  int max_num_tokens = 2048;
  int max_model_len = 4096;
  bool chunked_prefill = true;
};

class Scheduler {
 public:
  Scheduler(cache::CacheManager& caches, SchedulerLimits limits, std::vector<int32_t> eos_ids)
      : caches_(caches), limits_(limits), eos_ids_(std::move(eos_ids)) {}

  void add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }
  StepPlan schedule();
  // Applies a step's sampled ids (one per `samples` entry, in plan order). Sequences that finish move to the
  // finished list (`take_finished`).
  void postprocess(const StepPlan& plan, const std::vector<int32_t>& sampled);
  // Ends a sequence now (cancel, stop string, error) and frees its caches. Unknown ids: no-op.
  void finish(uint64_t id, FinishReason reason, std::string detail = {});
  // Ends every running and waiting sequence (shutdown without drain).
  void finish_all(FinishReason reason);
  // Finished sequences with their reasons, removed from the scheduler. `detail`: the stop string or id, or
  // the error of a FinishReason::Error.
  struct Finished {
    std::unique_ptr<Sequence> seq;
    FinishReason reason;
    std::string detail;
  };
  std::vector<Finished> take_finished();

  int n_running() const { return int(running_.size()); }
  int n_waiting() const { return int(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  uint64_t preemptions() const { return preemptions_; }
  // Prompt tokens of admitted requests, and how many of them came from the prefix cache.
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }
  Sequence* find(uint64_t id);

 private:
  bool preempt_newest(const std::function<bool(const Sequence*)>& may_preempt);
  int chunk_size(const Sequence& s, int from, int budget) const;
  // The in-step snapshots of a chunk [from, from + n) of `s`, while staging slots last in this step.
  std::vector<model::KdaSnapshotRequest> plan_snapshots(const Sequence& s, int from, int n,
                                                        int* staging_used) const;
  // Frees `seq`'s caches and moves it to the finished list.
  void retire(std::unique_ptr<Sequence> seq, FinishReason reason, std::string detail);

  cache::CacheManager& caches_;
  SchedulerLimits limits_;
  std::vector<int32_t> eos_ids_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order (newest last)
  std::vector<Finished> finished_;
  uint64_t preemptions_ = 0, prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace rill::engine
