#include "engine/mask_pool.h"

#include "text/constraint/token_constraint.h"

namespace rill::engine {

void ConstraintMask::accept(int32_t token) {
  constraint_->accept(token);
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
    mask->constraint_->allowed_tokens(mask->words_);
    mask->ready_.store(true, std::memory_order_release);
  }
}

}  // namespace rill::engine
