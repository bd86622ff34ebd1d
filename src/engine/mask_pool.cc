#include "engine/mask_pool.h"

#include "text/constraint/token_constraint.h"

namespace rill::engine {

void ConstraintMask::accept(int32_t token) {
  constraint_->accept(token);
}

void ConstraintMask::set_drafts(std::vector<int32_t> drafts) {
  drafts_ = std::move(drafts);
  draft_words_.resize(drafts_.size());
  for (auto& w : draft_words_) w.resize(words_.size());
}

// The current state's mask, then (speculative decoding) the drafts' masks on a fork, cut at the first draft
// the mask before it does not allow: a verify row after such a draft could never be reached by a sampled
// token, and the fork could not accept it.
void ConstraintMask::compute() {
  constraint_->allowed_tokens(words_);
  if (drafts_.empty()) return;
  std::unique_ptr<text::constraint::TokenConstraint> fork = constraint_->fork();
  size_t n = 0;
  if (fork) {
    std::span<const uint32_t> before = words_;
    const int64_t n_ids = int64_t(words_.size()) * 32;
    for (; n < drafts_.size(); ++n) {
      const int32_t d = drafts_[n];
      if (d < 0 || d >= n_ids || !((before[size_t(d) / 32] >> (d % 32)) & 1u)) break;
      fork->accept(d);
      fork->allowed_tokens(draft_words_[n]);
      before = draft_words_[n];
    }
  }
  drafts_.resize(n);
  draft_words_.resize(n);
}

MaskPool::MaskPool(int n_threads) {
  for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { work(); });
}

MaskPool::~MaskPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void MaskPool::start(const std::shared_ptr<ConstraintMask>& mask) {
  mask->ready_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);
    queue_.push_back(mask);
  }
  cv_.notify_one();
}

void MaskPool::work() {
  for (;;) {
    std::shared_ptr<ConstraintMask> mask;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      mask = queue_.front().lock();
      queue_.pop_front();
    }
    if (!mask) continue;  // its sequence is gone
    mask->compute();
    mask->ready_.store(true, std::memory_order_release);
  }
}

}  // namespace rill::engine
