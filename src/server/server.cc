#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <new>
#include <thread>

#include "core/log.h"
#include "core/version.h"
#include "server/generation_defaults.h"
#include "server/http_server.h"
#include "server/serving_context.h"
#include "server/serving_files.h"
#include "server/stats_logger.h"
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
  RILL_LOG_ERROR("rill serve: {}", st.message());
  ctx.set_phase(Phase::Failed, st.message());
}

// Where the chat prompts come from, for the start-up summary (ChatTemplate::load's order).
std::string chat_template_source(const ServerOptions& options, bool kimi_k3, const Status& chat_error) {
  if (kimi_k3) return "the native Kimi K3 renderer (text/k3)";
  if (!chat_error.ok()) return "none (" + chat_error.message() + ")";
  if (!options.chat_template_file.empty()) return options.chat_template_file + " (--chat-template)";
  const std::filesystem::path dir(options.model_dir);
  std::error_code ec;
  if (std::filesystem::exists(dir / "chat_template.jinja", ec)) return (dir / "chat_template.jinja").string();
  return (dir / "tokenizer_config.json").string() + " chat_template";
}

// Load progress in the log as in /health: every 10% of the weights.
model::LoadProgress logged_progress(ServingContext& ctx) {
  auto last_decile = std::make_shared<int>(-1);
  const auto start = Clock::now();
  return [&ctx, last_decile, start](int64_t done, int64_t total) {
    ctx.set_load_progress(done, total);
    if (total <= 0) return;
    const int decile = int(10 * done / total);
    if (decile == *last_decile) return;
    *last_decile = decile;
    RILL_LOG_INFO("loading weights: {}% ({:.2f} / {:.2f} GB, {:.1f} s)", 10 * decile, double(done) / 1e9,
                  double(total) / 1e9, std::chrono::duration<double>(Clock::now() - start).count());
  };
}

void load_checked(const ServerOptions& options, const ModelLoader& loader, ServingContext& ctx) {
  auto fail = [&](const Status& st) { fail_load(ctx, st); };
  // Everything besides the weights first, checked as `rill inspect` checks it: a bad directory fails in
  // seconds, not after the weights have loaded.
  auto dir_config = model::ModelConfig::load(options.model_dir);
  if (!dir_config.ok()) return fail(dir_config.status());
  auto files = load_serving_files(options.model_dir, *dir_config, options.chat_template_file);
  if (!files.ok()) return fail(files.status());
  if (!files->chat_error.ok())
    RILL_LOG_WARN("rill serve: {}: /v1/chat/completions will answer 400", files->chat_error.message());
  auto defaults = load_generation_defaults(options.generation_config, options.model_dir);
  if (!defaults.ok()) return fail(defaults.status());
  const std::shared_ptr<const text::Tokenizer> shared_tokenizer = files->tokenizer;
  const auto load_start = Clock::now();
  auto make_executor = loader(logged_progress(ctx));
  if (!make_executor.ok()) return fail(make_executor.status());
  auto engine = engine::Engine::create(*make_executor, shared_tokenizer, options.engine);
  if (!engine.ok()) return fail(engine.status());
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();  // -tp: in create
  const model::Model& lead = (*engine)->model();  // rank 0's shard when the model is split
  const model::ModelConfig& config = lead.config();
  const int64_t n_params = lead.weight_table().n_params();
  const int64_t weight_bytes = lead.weight_bytes();
  ModelInfo info;
  info.kimi_k3 = config.family == model::ModelFamily::KimiK3;
  info.vocab_size = config.vocab_size;
  info.eos_token_ids = files->eos_token_ids;
  info.sampling_defaults = defaults->sampling;
  info.default_max_tokens = defaults->max_tokens;
  const std::string device = (*engine)->device_description();
  info.max_model_len = (*engine)->max_model_len();
  const std::string params = n_params >= 1'000'000'000 ? fmt::format("{:.2f} B", double(n_params) / 1e9)
                                                       : fmt::format("{:.2f} M", double(n_params) / 1e6);
  RILL_LOG_INFO("model: {} ({}), {} parameters, {:.2f} GB of weights on {}{}, loaded in {:.1f} s",
                info.kimi_k3 ? "kimi_k3" : "kimi_linear", options.model_dir, params,
                double(weight_bytes) / 1e9, device,
                lead.shard().whole() ? "" : " (rank 0's shard: " + lead.shard().describe() + ")", load_s);
  RILL_LOG_INFO("cache plan: {}", (*engine)->memory_plan());
  RILL_LOG_INFO("chat template: {}", chat_template_source(options, info.kimi_k3, files->chat_error));
  RILL_LOG_INFO(
      "generation config: {}{}", defaults->source,
      defaults->sampling.empty() && !defaults->max_tokens
          ? ""
          : fmt::format(" (defaults {}{})", defaults->sampling.dump(),
                        defaults->max_tokens ? fmt::format(", max_tokens {}", defaults->max_tokens) : ""));
  ctx.metrics().set_cache_config(CacheConfigInfo{
      options.engine.block_size, options.engine.enable_prefix_caching, options.engine.kda_snapshot_interval});
  auto chat = ChatPrompt::load(options.model_dir, info.kimi_k3, shared_tokenizer, options.chat_template_file);
  ctx.set_ready(std::move(engine).value(), shared_tokenizer, std::move(chat), std::move(info));
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
    RILL_LOG_WARN(
        "rill serve: the open-file limit ({}) is below --max-connections + 256: new connections may fail "
        "before the cap",
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
  config.log_requests = options.log_requests;
  config.seed = options.seed;
  ServingContext ctx(std::move(config));
  SignalWatcher signals;
  HttpServer http(ctx, options.http);
  if (Status st = http.bind(options.host, options.port); !st.ok()) {
    RILL_LOG_ERROR("rill serve: {}", st.message());
    return 1;
  }
  RILL_LOG_INFO("rill {} serve: pid {}, log level {}", rill_version(), int(getpid()),
                log_level_name(log_level()));
  if (!options.startup_flags.empty()) {
    std::string flags;
    for (const std::string& f : options.startup_flags) flags += (flags.empty() ? "" : " ") + f;
    RILL_LOG_INFO("flags: {}", flags);
  }
  RILL_LOG_INFO("rill serve: listening on http://{}:{} (model '{}' loading from {})", options.host,
                http.port(), ctx.config().served_model_name, options.model_dir);
  std::thread listener([&http] { http.listen(); });
  std::atomic<bool> loaded{false};
  std::thread loading([&] {
    load(options, loader, ctx);
    loaded = true;
    if (ctx.phase() == Phase::Ready) {
      std::string names;
      const std::vector<std::string>& all = ctx.config().served_model_names;
      for (size_t i = 1; i < all.size(); ++i) names += (names.empty() ? "" : ", ") + all[i];
      RILL_LOG_INFO("rill serve: ready: http://{}:{}/v1 (model '{}'{}, max_model_len {})", options.host,
                    http.port(), ctx.config().served_model_name,
                    names.empty() ? "" : " also served as " + names, ctx.model_info().max_model_len);
    }
  });
  StatsLogger stats(ctx, options.log_stats_interval_s);

  signals.wait(0, Clock::time_point::max(), [&] { return ctx.phase() == Phase::Failed; });
  const bool failed = ctx.phase() == Phase::Failed;
  if (!failed && !loaded) {  // a signal during loading: nothing to drain, the load cannot be interrupted
    RILL_LOG_INFO("rill serve: interrupted while loading");
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
    RILL_LOG_INFO(
        "rill serve: shutting down: {} request(s) in flight, {:.0f} s grace (signal again to cancel)",
        ctx.in_flight(), options.shutdown_timeout_s);
    const auto grace = Clock::now() + std::chrono::milliseconds(int64_t(options.shutdown_timeout_s * 1000));
    signals.wait(1, grace, [&] { return ctx.in_flight() == 0; });
    if (ctx.in_flight() > 0 || signals.count() > 1) {
      RILL_LOG_INFO("rill serve: cancelling {} request(s)", ctx.in_flight());
      ctx.engine().shutdown(/*drain=*/false);
      ctx.set_phase(Phase::Stopped);  // requests still waiting on the engine finish as server_interrupted
      ctx.wait_idle(Clock::now() + std::chrono::seconds(10));
    }
  }
  http.stop();
  listener.join();
  stats.stop();  // it reads the engine
  if (auto engine = ctx.release_engine(); engine && ctx.phase() != Phase::Stopped)
    engine->shutdown(/*drain=*/true);
  RILL_LOG_INFO("rill serve: {}", failed ? "exiting: the model failed to load" : "stopped");
  return failed ? 1 : 0;
}

}  // namespace rill::server
