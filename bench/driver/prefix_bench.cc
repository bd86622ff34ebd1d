#include "bench/driver/prefix_bench.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.h"
#include "bench/driver/model_bench.h"
#include "engine/engine.h"
#include "model/model.h"

namespace rill::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Submits `prompt` for one token and waits for it: milliseconds from submit to the first token.
Result<double> time_to_first_token(engine::Engine& e, const std::vector<int32_t>& prompt, int* cached) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 1;
  p.ignore_eos = true;
  const auto t0 = std::chrono::steady_clock::now();
  RILL_ASSIGN_OR_RETURN(auto stream, e.submit({prompt, p}));
  engine::StreamEvent ev;
  double ms = -1;
  while (stream->next(&ev, std::chrono::minutes(10))) {
    if (ms < 0 && !ev.token_ids.empty())
      ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (ev.finish) {
      if (*ev.finish == engine::FinishReason::Error) return ev.error;
      *cached = ev.cached_tokens;
      return ms;
    }
  }
  return internal_error("prefix bench: no answer within 10 minutes");
}

}  // namespace

std::string PrefixBenchResult::describe(const PrefixBenchOptions& o) const {
  return fmt::format(
      "prefix reuse ({}-token snapshot interval, {} tokens a step): {}\n"
      "  cold, caching off  {:6}-token prompt:                     TTFT {:10.2f} ms\n"
      "  cold, caching on   {:6}-token prompt:                     TTFT {:10.2f} ms\n"
      "  warm, caching on   {:6}-token prompt, {:6} tokens cached: TTFT {:10.2f} ms   "
      "({:.2f}x faster than cold with caching on, {:.2f}x than caching off)\n",
      o.snapshot_interval, o.max_num_tokens, memory_plan, o.prompt_tokens, cold_off_ms, o.prompt_tokens,
      cold_ms, o.prompt_tokens, cached_tokens, warm_ms, ratio(), ratio_vs_off()) +
         (o.host_tier_gib > 0
              ? fmt::format("  from the host tier {:6}-token prompt, {:6} tokens cached: TTFT {:10.2f} ms   "
                            "({:.2f}x faster than cold with caching on; {:.1f} MiB back at {:.1f} GB/s if the "
                            "TTFT were all copy, ceiling {:.1f} GB/s)\n",
                            o.prompt_tokens, host_cached_tokens, host_ms, host_ms > 0 ? cold_ms / host_ms : 0,
                            host_bytes / (1 << 20), host_ms > 0 ? host_bytes / (host_ms * 1e-3) / 1e9 : 0,
                            copy_ceiling_gbps)
              : std::string()) +
         (!o.disk_dir.empty()
              ? fmt::format("  from the disk tier {:6}-token prompt, {:6} tokens cached: TTFT {:10.2f} ms   "
                            "({:.2f}x faster than cold with caching on; {:.1f} MiB read)\n",
                            o.prompt_tokens, disk_cached_tokens, disk_ms, disk_ms > 0 ? cold_ms / disk_ms : 0,
                            disk_bytes / (1 << 20))
              : std::string());
}

std::string PrefixBenchResult::markdown_row(const PrefixBenchOptions& o) const {
  return fmt::format(
      "| prefix reuse | {} tokens, {} cached (interval {}, {} a step) | {:.2f} ms | {:.2f} ms | "
      "{:.2f} ms | {:.2f}x | {:.2f}x |\n",
      o.prompt_tokens, cached_tokens, o.snapshot_interval, o.max_num_tokens, cold_off_ms, cold_ms, warm_ms,
      ratio(), ratio_vs_off());
}

Result<PrefixBenchResult> bench_prefix_reuse(std::unique_ptr<model::Model> model,
                                             const PrefixBenchOptions& o) {
  if (o.cached_tokens < 0 || o.cached_tokens >= o.prompt_tokens)
    return invalid_argument("--prefix-cached-tokens {} must be in [0, --prefill-tokens {})", o.cached_tokens,
                            o.prompt_tokens);
  const int vocab = model->config().vocab_size;
  engine::EngineOptions eo;
  eo.max_batch_size = 1;
  eo.max_num_tokens = o.max_num_tokens;
  eo.max_model_len = o.prompt_tokens + 64;
  eo.kda_snapshot_interval = o.snapshot_interval;
  eo.kda_snapshot_budget_mib = o.snapshot_budget_mib;
  std::mt19937 rng(1234);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
    return t;
  };
  const int n_runs = std::max(o.repeats, 1);
  PrefixBenchResult r;
  int cached = 0;

  // Caching off: the cold reference.
  std::vector<double> cold_off, cold, warm, host, disk;
  {
    RILL_ASSIGN_OR_RETURN(auto engine, engine::Engine::create(std::move(model), nullptr, eo));
    RILL_TRY(
        time_to_first_token(*engine, tokens(o.prompt_tokens), &cached).status());  // warm-up (kernels, plans)
    for (int i = 0; i < n_runs; ++i) {
      RILL_ASSIGN_OR_RETURN(double ms, time_to_first_token(*engine, tokens(o.prompt_tokens), &cached));
      cold_off.push_back(ms);
    }
    model = engine->release_model();  // the engine's caches go with it, before the next one plans its memory
  }
  eo.enable_prefix_caching = true;
  eo.kv_offloading_gib = o.host_tier_gib;
  eo.kv_offloading_dir = o.disk_dir;
  backend::Backend& be = model->backend();
  RILL_ASSIGN_OR_RETURN(auto engine, engine::Engine::create(std::move(model), nullptr, eo));
  r.memory_plan = engine->memory_plan();
  RILL_TRY(time_to_first_token(*engine, tokens(o.prompt_tokens), &cached).status());
  for (int i = 0; i < n_runs; ++i) {
    // A fresh prefix each time, so the cold request really is cold.
    const std::vector<int32_t> prefix = tokens(o.cached_tokens);
    auto with_suffix = [&] {
      std::vector<int32_t> p = prefix;
      const auto s = tokens(o.prompt_tokens - o.cached_tokens);
      p.insert(p.end(), s.begin(), s.end());
      return p;
    };
    RILL_ASSIGN_OR_RETURN(double c, time_to_first_token(*engine, with_suffix(), &cached));
    if (cached != 0) return internal_error("prefix bench: the cold request found {} tokens cached", cached);
    RILL_ASSIGN_OR_RETURN(double w, time_to_first_token(*engine, with_suffix(), &cached));
    cold.push_back(c);
    warm.push_back(w);
    r.cached_tokens = cached;
    // The warm request again after everything cached moved to a lower tier: its TTFT, cached tokens and the
    // bytes it brought back (`moved`: the engine's counter of them).
    auto from_tier = [&](Status moved_there, uint64_t engine::EngineStats::*moved, std::vector<double>* ms,
                         int* tier_cached, double* bytes) -> Status {
      RILL_TRY(moved_there);
      const uint64_t before = engine->stats().*moved;
      RILL_ASSIGN_OR_RETURN(double t, time_to_first_token(*engine, with_suffix(), &cached));
      ms->push_back(t);
      *tier_cached = cached;
      *bytes = double(engine->stats().*moved - before);
      return {};
    };
    if (o.host_tier_gib > 0)
      RILL_TRY(from_tier(engine->offload_prefix_cache(), &engine::EngineStats::kv_offload_bytes_to_device, &host,
                         &r.host_cached_tokens, &r.host_bytes));
    if (!o.disk_dir.empty() && o.host_tier_gib > 0)
      RILL_TRY(from_tier(engine->persist_prefix_cache(), &engine::EngineStats::kv_offload_bytes_from_disk, &disk,
                         &r.disk_cached_tokens, &r.disk_bytes));
  }
  engine->shutdown(true);
  if (o.host_tier_gib > 0 && r.host_bytes > 0) {
    RILL_ASSIGN_OR_RETURN(r.copy_ceiling_gbps, host_copy_ceiling_gbps(be, size_t(r.host_bytes), false));
  }
  r.host_ms = median(host);
  r.disk_ms = median(disk);
  r.cold_off_ms = median(cold_off);
  r.cold_ms = median(cold);
  r.warm_ms = median(warm);
  return r;
}

}  // namespace rill::bench
