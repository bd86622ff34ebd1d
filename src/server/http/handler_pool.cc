#include "server/http/handler_pool.h"

#include <system_error>

namespace rill::server {

HandlerPool::HandlerPool(int n_threads) {
  // A thread the system refuses (RLIMIT_NPROC, memory for its stack) ends the count here rather than the
  // process: the owner compares size() with what it asked for and reports it.
  try {
    for (int i = 0; i < n_threads; ++i) threads_.emplace_back([this] { work(); });
  } catch (const std::system_error&) {
  }
}

bool HandlerPool::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void HandlerPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

void HandlerPool::work() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace rill::server
