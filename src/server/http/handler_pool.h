// The threads route code runs on: a fixed number (`--http-threads`: requests handled at once) taking tasks
// in arrival order. The I/O threads never run a route, so a slow route cannot stall a socket.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rill::server {

class HandlerPool {
 public:
  explicit HandlerPool(int n_threads);
  ~HandlerPool() { stop(); }

  // The threads that could be started (fewer than asked when the system refused one).
  int size() const { return int(threads_.size()); }
  // False once stop() has begun (the task is dropped).
  bool submit(std::function<void()> task);
  // Runs what was queued, then joins the threads. Idempotent.
  void stop();

 private:
  void work();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace rill::server
