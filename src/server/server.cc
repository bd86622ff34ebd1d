#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <new>
#include <thread>

#include "server/http_server.h"
#include "server/serving_context.h"
#include "server/serving_files.h"
#include "text/tokenizer/tokenizer.h"

namespace rill::server {
namespace {

using Clock = std::chrono::steady_clock;

// Signals are taken by one thread (sigtimedwait) rather than a handler, so shutdown runs as ordinary code.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any thread starts: all inherit the mask
    thread_ = std::thread([this] {
      const timespec tick{0, 100 * 1000 * 1000};
      while (!stop_) {
        if (sigtimedwait(&set_, nullptr, &tick) > 0) {
          count_.fetch_add(1);
          std::lock_guard<std::mutex> lock(mu_);
          cv_.notify_all();
        }
      }
    });
  }
  ~SignalWatcher() {
    stop_ = true;
    thread_.join();
    pthread_sigmask(SIG_UNBLOCK, &set_, nullptr);
  }
  int count() const { return count_.load(); }
  // Waits until the signal count exceeds `seen` or `pred` holds, or `deadline` passes.
  template <typename Pred>
  void wait(int seen, Clock::time_point deadline, Pred pred) {
    std::unique_lock<std::mutex> lock(mu_);
    while (count_.load() <= seen && !pred() && Clock::now() < deadline)
      cv_.wait_for(lock, std::chrono::milliseconds(50));
  }

 private:
  sigset_t set_;
  std::atomic<bool> stop_{false};
  std::atomic<int> count_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

void fail_load(ServingContext& ctx, const Status& st) {
  std::fprintf(stderr, "rill serve: %s\n", st.message().c_str());
  ctx.set_phase(Phase::Failed, st.message());
}

void load_checked(const ServerOptions& options, const ModelLoader& loader, ServingContext& ctx) {
  auto fail = [&](const Status& st) { fail_load(ctx, st); };
  // Everything besides the weights first, checked as `rill inspect` checks it: a bad directory fails in
  // seconds, not after the weights have loaded.
  auto dir_config = model::ModelConfig::load(options.model_dir);
  if (!dir_config.ok()) return fail(dir_config.status());
  auto files = load_serving_files(options.model_dir, *dir_config);
  if (!files.ok()) return fail(files.status());
  if (!files->chat_error.ok())
    std::fprintf(stderr, "rill serve: warning: %s: /v1/chat/completions will answer 400\n",
                 files->chat_error.message().c_str());
  const std::shared_ptr<const text::Tokenizer> shared_tokenizer = files->tokenizer;
  auto loaded = loader([&ctx](int64_t done, int64_t total) { ctx.set_load_progress(done, total); });
  if (!loaded.ok()) return fail(loaded.status());
  const model::ModelConfig& config = loaded->model->config();
  ModelInfo info;
  info.kimi_k3 = config.family == model::ModelFamily::KimiK3;
  info.vocab_size = config.vocab_size;
  info.eos_token_ids = files->eos_token_ids;
  auto engine = engine::Engine::create(std::move(loaded->model), shared_tokenizer, options.engine);
  if (!engine.ok()) return fail(engine.status());
  info.max_model_len = (*engine)->max_model_len();
  ctx.metrics().set_cache_config(CacheConfigInfo{
      options.engine.block_size, options.engine.enable_prefix_caching, options.engine.kda_snapshot_interval});
  std::fprintf(stderr, "%s\n", (*engine)->memory_plan().c_str());
  auto chat = ChatPrompt::load(options.model_dir, info.kimi_k3, shared_tokenizer);
  ctx.set_ready(std::move(loaded->backend), std::move(engine).value(), shared_tokenizer, std::move(chat),
                std::move(info));
}

// Sizes are checked against the memory available before anything is allocated (config.cc, check_available);
// std::bad_alloc is the last resort, reported as a failed load rather than terminating the process.
void load(const ServerOptions& options, const ModelLoader& loader, ServingContext& ctx) {
  try {
    load_checked(options, loader, ctx);
  } catch (const std::bad_alloc&) {
    fail_load(ctx, resource_exhausted("out of memory while loading {} (std::bad_alloc)", options.model_dir));
  }
}

// Each connection is a file descriptor: lift the soft limit towards the hard one so --max-connections, not
// EMFILE, is what refuses connections (a warning when even the hard limit is lower).
void raise_open_file_limit(int max_connections) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  const rlim_t want = rlim_t(max_connections) + 256;  // + the model files, logs, the engine's own
  if (lim.rlim_cur >= want) return;
  lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? want : std::min(want, lim.rlim_max);
  setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < want)
    std::fprintf(stderr,
                 "rill serve: warning: the open-file limit (%llu) is below --max-connections + 256: new "
                 "connections may fail before the cap\n",
                 (unsigned long long)lim.rlim_cur);
}

}  // namespace

std::string default_served_name(const std::string& model_dir) {
  std::filesystem::path p = std::filesystem::path(model_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() || name == "." ? "model" : name;
}

int run_server(const ServerOptions& options, const ModelLoader& loader) {
  signal(SIGPIPE, SIG_IGN);  // writes to a closed connection fail with EPIPE instead
  raise_open_file_limit(options.http.max_connections);
  std::vector<std::string> names = options.served_model_names;
  if (!options.served_model_name.empty() &&
      std::find(names.begin(), names.end(), options.served_model_name) == names.end())
    names.insert(names.begin(), options.served_model_name);
  if (names.empty()) names.push_back(default_served_name(options.model_dir));
  ServingConfig config{names.front(), options.model_dir, options.api_key, options.api_key_metrics,
                       names,         options.cors};
  ServingContext ctx(std::move(config));
  SignalWatcher signals;
  HttpServer http(ctx, options.http);
  if (Status st = http.bind(options.host, options.port); !st.ok()) {
    std::fprintf(stderr, "rill serve: %s\n", st.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "rill serve: listening on http://%s:%d (model '%s' loading from %s)\n",
               options.host.c_str(), http.port(), ctx.config().served_model_name.c_str(),
               options.model_dir.c_str());
  std::thread listener([&http] { http.listen(); });
  std::atomic<bool> loaded{false};
  std::thread loading([&] {
    load(options, loader, ctx);
    loaded = true;
    if (ctx.phase() == Phase::Ready)
      std::fprintf(stderr, "rill serve: ready: http://%s:%d/v1 (model '%s', max_model_len %d)\n",
                   options.host.c_str(), http.port(), ctx.config().served_model_name.c_str(),
                   ctx.model_info().max_model_len);
  });

  signals.wait(0, Clock::time_point::max(), [&] { return ctx.phase() == Phase::Failed; });
  const bool failed = ctx.phase() == Phase::Failed;
  if (!failed && !loaded) {  // a signal during loading: nothing to drain, the load cannot be interrupted
    std::fprintf(stderr, "rill serve: interrupted while loading\n");
    ctx.set_phase(Phase::Draining);
    http.stop();  // safe before listen() has begun: listen() then returns at once
    listener.join();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  loading.join();
  if (!failed) {
    ctx.set_phase(Phase::Draining);
    http.begin_drain();  // no new connections; idle and still-arriving ones closed now
    std::fprintf(
        stderr, "rill serve: shutting down: %d request(s) in flight, %.0f s grace (signal again to cancel)\n",
        ctx.in_flight(), options.shutdown_timeout_s);
    const auto grace = Clock::now() + std::chrono::milliseconds(int64_t(options.shutdown_timeout_s * 1000));
    signals.wait(1, grace, [&] { return ctx.in_flight() == 0; });
    if (ctx.in_flight() > 0 || signals.count() > 1) {
      std::fprintf(stderr, "rill serve: cancelling %d request(s)\n", ctx.in_flight());
      ctx.engine().shutdown(/*drain=*/false);
      ctx.set_phase(Phase::Stopped);  // requests still waiting on the engine finish as server_interrupted
      ctx.wait_idle(Clock::now() + std::chrono::seconds(10));
    }
  }
  http.stop();
  listener.join();
  if (auto engine = ctx.release_engine(); engine && ctx.phase() != Phase::Stopped)
    engine->shutdown(/*drain=*/true);
  std::fprintf(stderr, "rill serve: %s\n", failed ? "exiting: the model failed to load" : "stopped");
  return failed ? 1 : 0;
}

}  // namespace rill::server
