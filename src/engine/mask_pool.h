// Next-token masks of constrained sequences, computed on a few worker threads instead of the engine thread:
// a mask is started as soon as the previous token is accepted, so it overlaps the model's forward, and a
// sequence whose mask is not ready yet is left out of the step (Scheduler) instead of stalling it for every
// other sequence.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace rill::text::constraint {
class TokenConstraint;
}

namespace rill::engine {

// One constrained sequence's constraint and the mask for its current state. The engine thread starts a
// computation (MaskPool::start), reads the mask once ready() and only then accepts the sampled token, so
// the worker's allowed_tokens and the engine thread's accept never overlap: start's queue lock and the
// ready flag order them.
class ConstraintMask {
 public:
  ConstraintMask(std::shared_ptr<text::constraint::TokenConstraint> constraint, size_t words)
      : constraint_(std::move(constraint)), words_(words) {}

  bool ready() const { return ready_.load(std::memory_order_acquire); }
  // The mask for the current state (ceil(vocab / 32) words); only while ready().
  std::span<const uint32_t> words() const { return words_; }
  // Tells the constraint the sampled token (engine thread, while ready()); the mask is stale until the next
  // MaskPool::start computes it.
  void accept(int32_t token);

  // Speculative decoding (engine thread, before MaskPool::start; not while a computation is under way): the
  // drafts the next step may feed. The computation then also walks a fork of the constraint along them and
  // keeps the longest prefix in which each draft is allowed by the mask before it, with the mask after each.
  void set_drafts(std::vector<int32_t> drafts);
  // While ready(): that prefix (empty when the constraint cannot fork), and the mask of the position after
  // drafts()[0..j] — the mask of a verify step's row j + 1.
  std::span<const int32_t> drafts() const { return drafts_; }
  std::span<const uint32_t> draft_words(size_t j) const { return draft_words_[j]; }

 private:
  friend class MaskPool;
  void compute();  // on a worker

  std::shared_ptr<text::constraint::TokenConstraint> constraint_;
  std::vector<uint32_t> words_;
  std::vector<int32_t> drafts_;
  std::vector<std::vector<uint32_t>> draft_words_;
  std::atomic<bool> ready_{false};
};

class MaskPool {
 public:
  explicit MaskPool(int n_threads);
  ~MaskPool();  // joins the workers; a computation under way finishes first, queued ones are dropped
  MaskPool(const MaskPool&) = delete;
  MaskPool& operator=(const MaskPool&) = delete;

  // Marks the mask not ready and queues its computation. The queue holds weak references: a mask whose
  // sequence has gone (finished, cancelled) before its turn is skipped, and one being computed is kept
  // alive by its worker until done, so no job touches freed state.
  void start(const std::shared_ptr<ConstraintMask>& mask);
  int size() const { return int(threads_.size()); }

 private:
  void work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::weak_ptr<ConstraintMask>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace rill::engine
