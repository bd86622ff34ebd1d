#include "bench/driver/multi_turn_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "bench/driver/model_bench.h"
#include "bench/serve/latency_stats.h"
#include "core/log.h"
#include "core/sizes.h"
#include "engine/engine.h"
#include "model/model.h"

namespace rill::bench {
namespace {

constexpr int kBlock = 64;  // EngineOptions::block_size
constexpr double kMiB = double(1 << 20), kGiB = double(1 << 30);

int blocks_for(int tokens) {
  return (tokens + kBlock - 1) / kBlock;
}

struct Turn {
  double ttft_ms = -1;
  std::vector<int32_t> ids;
  int cached = 0;
};

// Submits `prompt` (greedy, exactly `max_tokens` tokens) and waits for it to finish; TTFT from submit.
Result<Turn> run_turn(engine::Engine& e, const std::vector<int32_t>& prompt, int max_tokens) {
  engine::SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  const auto t0 = std::chrono::steady_clock::now();
  RILL_ASSIGN_OR_RETURN(auto stream, e.submit({prompt, p}));
  Turn t;
  engine::StreamEvent ev;
  while (stream->next(&ev, std::chrono::minutes(10))) {
    if (t.ttft_ms < 0 && !ev.token_ids.empty())
      t.ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    t.ids.insert(t.ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (ev.finish) {
      if (*ev.finish == engine::FinishReason::Error) return ev.error;
      t.cached = ev.cached_tokens;
      return t;
    }
  }
  return internal_error("multi-turn bench: no answer within 10 minutes");
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b,
                            const std::vector<int32_t>& c) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

// Every conversation's tokens, the same for each configuration; two warm-up conversations (kernels, plans and
// the tier's first copies before anything is timed; the second for the restarted engine) that are not
// counted.
struct Workload {
  std::vector<std::vector<int32_t>> histories, turns;
  std::vector<int32_t> warm_history[2], warm_turn[2];
};

Workload make_workload(const MultiTurnOptions& o, int vocab) {
  std::mt19937 rng(1234);
  auto tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
    return t;
  };
  Workload w;
  for (int k = 0; k < 2; ++k) {
    w.warm_history[k] = tokens(o.history_tokens);
    w.warm_turn[k] = tokens(o.turn_tokens);
  }
  for (int i = 0; i < o.conversations; ++i) {
    w.histories.push_back(tokens(o.history_tokens));
    w.turns.push_back(tokens(o.turn_tokens));
  }
  return w;
}

struct Restart {
  bool drop_page_cache = true;
  // The tier's files between the two engines (after any drop), and as the second turns begin: the new
  // engine's scan of their headers reads some of them back in (the kernel's read-ahead), as a server's start
  // would.
  TierFiles *at_restart = nullptr, *at_second_turns = nullptr;
};

// One configuration: an engine with `eo` on `model` (handed back at the end), a warm-up conversation, every
// first turn, optionally a restart (the engine goes, persisting its caches to disk, and a new one opens the
// same directory), then every second turn, timed.
Result<MultiTurnConfig> run_config(std::string name, std::unique_ptr<model::Model>& model,
                                   const engine::EngineOptions& eo, const Workload& w, int answer_tokens,
                                   const Restart* restart) {
  backend::Backend& be = model->backend();
  MultiTurnConfig r;
  r.name = std::move(name);
  // Progress in the log, so a run cut short still tells how far it got and where the time went.
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  RILL_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine,
                        engine::Engine::create(std::move(model), nullptr, eo));
  auto warm_up = [&](int k) -> Status {
    RILL_ASSIGN_OR_RETURN(Turn first, run_turn(*engine, w.warm_history[k], answer_tokens));
    return run_turn(*engine, concat(w.warm_history[k], first.ids, w.warm_turn[k]), 1).status();
  };
  RILL_TRY(warm_up(0));
  std::vector<std::vector<int32_t>> answers;
  for (const std::vector<int32_t>& history : w.histories) {
    RILL_ASSIGN_OR_RETURN(Turn t, run_turn(*engine, history, answer_tokens));
    r.first_ttft_ms.push_back(t.ttft_ms);
    answers.push_back(std::move(t.ids));
  }
  RILL_LOG_INFO("multi-turn, {}: {} first turns done at {:.1f} s (TTFT median {:.2f} ms)", r.name,
                r.first_ttft_ms.size(), seconds(), serve::percentile(r.first_ttft_ms, 50));
  if (restart) {
    model = engine->release_model();  // its shutdown moves everything cached to disk and waits for the writes
    engine.reset();
    RILL_ASSIGN_OR_RETURN(*restart->at_restart,
                          inspect_tier_files(eo.kv_offloading_dir, restart->drop_page_cache));
    RILL_ASSIGN_OR_RETURN(engine, engine::Engine::create(std::move(model), nullptr, eo));
    RILL_TRY(warm_up(1));
    RILL_ASSIGN_OR_RETURN(*restart->at_second_turns, inspect_tier_files(eo.kv_offloading_dir, false));
    RILL_LOG_INFO("multi-turn, {}: restarted at {:.1f} s over {} files ({})", r.name, seconds(),
                  restart->at_restart->files, format_bytes(double(restart->at_restart->bytes)));
  }
  const engine::EngineStats s0 = engine->stats();
  const backend::HostTierCopyTotals c0 = be.host_tier_copy_totals();
  for (size_t i = 0; i < w.histories.size(); ++i) {
    RILL_ASSIGN_OR_RETURN(Turn t, run_turn(*engine, concat(w.histories[i], answers[i], w.turns[i]), 1));
    r.second_ttft_ms.push_back(t.ttft_ms);
    r.cached_tokens += uint64_t(t.cached);
    r.turns_with_hits += t.cached > 0;
  }
  const backend::HostTierCopyTotals c1 = be.host_tier_copy_totals();  // waits for copies still running
  const engine::EngineStats s1 = engine->stats();
  r.hits_host = s1.prefix_cache_hits_host - s0.prefix_cache_hits_host;
  r.hits_disk = s1.prefix_cache_hits_disk - s0.prefix_cache_hits_disk;
  r.hits_device = s1.prefix_cache_hits - s0.prefix_cache_hits - r.hits_host - r.hits_disk;
  r.copies = {c1.bytes_to_host - c0.bytes_to_host, c1.bytes_to_device - c0.bytes_to_device,
              c1.batches - c0.batches, c1.seconds - c0.seconds};
  r.disk_bytes_read = s1.kv_offload_bytes_from_disk - s0.kv_offload_bytes_from_disk;
  r.disk_read_seconds = s1.kv_offload_disk_read_seconds - s0.kv_offload_disk_read_seconds;
  r.memory_plan = engine->memory_plan();
  RILL_LOG_INFO("multi-turn, {}: second turns done at {:.1f} s (TTFT median {:.2f} ms, {} of {} hit)", r.name,
                seconds(), r.median_ms(), r.turns_with_hits, r.second_ttft_ms.size());
  // Forget the cache first, so that the shutdown does not write this engine's entries to disk for nobody.
  RILL_TRY(engine->reset_prefix_cache());
  model = engine->release_model();
  return r;
}

double gbps(double bytes, double seconds) {
  return seconds > 0 ? bytes / seconds / 1e9 : 0;
}

}  // namespace

double MultiTurnConfig::median_ms() const {
  return serve::percentile(second_ttft_ms, 50);
}
double MultiTurnConfig::p90_ms() const {
  return serve::percentile(second_ttft_ms, 90);
}

Result<MultiTurnSizes> multi_turn_sizes(const MultiTurnOptions& o, const model::Model& m) {
  if (o.conversations < 2)
    return invalid_argument(
        "--conversations {} must be at least 2 (a returning conversation must have been "
        "pushed out by another)",
        o.conversations);
  if (o.history_tokens < kBlock)
    return invalid_argument("--history-tokens {} must be at least one {}-token block", o.history_tokens,
                            kBlock);
  if (o.answer_tokens < 1 || o.turn_tokens < 1)
    return invalid_argument("--answer-tokens {} and --turn-tokens {} must be at least 1", o.answer_tokens,
                            o.turn_tokens);
  MultiTurnSizes s;
  s.second_prompt_tokens = o.history_tokens + o.answer_tokens + o.turn_tokens;
  s.max_model_len = s.second_prompt_tokens + kBlock;
  const model::ModelConfig& c = m.config();
  const DType act = m.backend().act_dtype();
  using model::ModelCaches;
  s.block_bytes =
      ModelCaches::bytes_needed(c, act, 0, 2, kBlock) - ModelCaches::bytes_needed(c, act, 0, 1, kBlock);
  s.snapshot_bytes =
      ModelCaches::bytes_needed(c, act, 1, 1, kBlock) - ModelCaches::bytes_needed(c, act, 0, 1, kBlock);
  s.snapshot_interval = o.snapshot_interval > 0 ? o.snapshot_interval : blocks_for(o.history_tokens) * kBlock;
  // What one conversation holds after its second turn, and what one request needs at once.
  const int per_conversation = blocks_for(s.second_prompt_tokens + 1);
  const int one_request = blocks_for(s.max_model_len);
  if (o.gpu_blocks > 0 && o.gpu_blocks < one_request)
    return invalid_argument("--num-kv-blocks {} cannot hold one second turn ({} blocks of {} tokens)",
                            o.gpu_blocks, one_request, kBlock);
  s.gpu_blocks = o.gpu_blocks > 0
                     ? o.gpu_blocks
                     : std::max(std::max(o.conversations / 4, 1) * per_conversation, one_request);
  s.gpu_conversations = s.gpu_blocks / per_conversation;
  if (s.gpu_conversations >= o.conversations)
    return invalid_argument(
        "--num-kv-blocks {} holds all {} conversations ({} blocks each): none would leave the "
        "device",
        s.gpu_blocks, o.conversations, per_conversation);
  s.snapshot_budget_mib = o.snapshot_budget_mib > 0
                              ? o.snapshot_budget_mib
                              : int(std::ceil(double(2 * std::max(s.gpu_conversations, 1) + 1) *
                                              double(s.snapshot_bytes) / kMiB));
  // The host tier splits its bytes evenly between blocks and snapshots (runner/host_tier.h); every
  // conversation (and the warm-ups) keeps its blocks and up to three snapshots (the first turn's prompt,
  // a decode tail, the second turn's prompt). 10% over that.
  const double blocks = double(o.conversations + 2) * per_conversation * double(s.block_bytes);
  const double snapshots = double(o.conversations + 2) * 3 * double(s.snapshot_bytes);
  s.host_tier_gib = o.host_tier_gib > 0 ? o.host_tier_gib : 2.2 * std::max(blocks, snapshots) / kGiB;
  return s;
}

Result<MultiTurnResult> bench_multi_turn(std::unique_ptr<model::Model> model, const MultiTurnOptions& o) {
  MultiTurnResult r;
  RILL_ASSIGN_OR_RETURN(r.sizes, multi_turn_sizes(o, *model));
  const MultiTurnSizes& s = r.sizes;
  backend::Backend& be = model->backend();
  const Workload w = make_workload(o, model->config().vocab_size);
  engine::EngineOptions base;
  base.max_batch_size = 1;  // one request at a time: each TTFT is that request's alone
  base.max_num_tokens = o.max_num_tokens;
  base.max_model_len = s.max_model_len;
  base.num_kv_blocks = s.gpu_blocks;
  base.enable_prefix_caching = true;
  base.kda_snapshot_interval = s.snapshot_interval;
  base.kda_snapshot_budget_mib = s.snapshot_budget_mib;
  base.model_identity = "rill bench --multi-turn";

  RILL_ASSIGN_OR_RETURN(MultiTurnConfig none,
                        run_config("recompute (no tier)", model, base, w, o.answer_tokens, nullptr));
  r.configs.push_back(std::move(none));
  engine::EngineOptions host = base;
  host.kv_offloading_gib = s.host_tier_gib;
  RILL_ASSIGN_OR_RETURN(MultiTurnConfig on_host,
                        run_config("host tier", model, host, w, o.answer_tokens, nullptr));
  r.configs.push_back(std::move(on_host));
  RILL_ASSIGN_OR_RETURN(const std::filesystem::path dir, make_fresh_directory(o.disk_parent));
  r.disk_dir = dir.string();
  engine::EngineOptions disk = host;
  disk.kv_offloading_dir = r.disk_dir;
  const Restart restart{o.drop_page_cache, &r.disk_files_at_restart, &r.disk_files};
  Result<MultiTurnConfig> on_disk =
      run_config("disk tier, restarted", model, disk, w, o.answer_tokens, &restart);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!on_disk.ok()) return on_disk.status();
  r.configs.push_back(std::move(on_disk).value());

  // One returning conversation's bytes (its blocks and a snapshot) in one pinned copy each way.
  const size_t bytes = size_t(blocks_for(s.second_prompt_tokens) * s.block_bytes + s.snapshot_bytes);
  RILL_ASSIGN_OR_RETURN(r.ceiling_to_device_gbps, host_copy_ceiling_gbps(be, bytes, false));
  RILL_ASSIGN_OR_RETURN(r.ceiling_to_host_gbps, host_copy_ceiling_gbps(be, bytes, true));
  return r;
}

namespace {

// "x.xx" times faster than the recompute configuration's median.
double speedup(const MultiTurnResult& r, const MultiTurnConfig& c) {
  const double m = c.median_ms();
  return m > 0 && !r.configs.empty() ? r.configs.front().median_ms() / m : 0;
}

// The tier's copies in one line: bytes each way, their time and rate, beside the ceiling for that mix (each
// direction at its own ceiling, one after the other, as the tier's single stream runs them).
std::string copy_line(const MultiTurnResult& r, const MultiTurnConfig& c) {
  const backend::HostTierCopyTotals& k = c.copies;
  const double moved = double(k.bytes_to_device + k.bytes_to_host);
  if (moved <= 0) return "no copies";
  const double ceiling_s =
      (r.ceiling_to_device_gbps > 0 ? double(k.bytes_to_device) / (r.ceiling_to_device_gbps * 1e9) : 0) +
      (r.ceiling_to_host_gbps > 0 ? double(k.bytes_to_host) / (r.ceiling_to_host_gbps * 1e9) : 0);
  return fmt::format(
      "{} to the device, {} to the host in {} batches, {:.1f} ms: {:.1f} GB/s (ceiling for this mix "
      "{:.1f} GB/s)",
      format_bytes(double(k.bytes_to_device)), format_bytes(double(k.bytes_to_host)), k.batches,
      k.seconds * 1e3, gbps(moved, k.seconds), gbps(moved, ceiling_s));
}

std::string hits_cell(const MultiTurnConfig& c) {
  return fmt::format("{} / {} / {}", c.hits_device, c.hits_host, c.hits_disk);
}

std::string disk_line(const MultiTurnResult& r, const MultiTurnOptions& o) {
  const TierFiles& f = r.disk_files;
  if (f.in_memory)
    return fmt::format("{} files, {} on {}: memory, its reads never touch a disk", f.files,
                       format_bytes(double(f.bytes)), f.filesystem);
  return fmt::format(
      "{} files, {} on {}; page cache {} before the restart ({:.1f}% of their pages cached), "
      "{:.1f}% cached as the second turns began",
      f.files, format_bytes(double(f.bytes)), f.filesystem, o.drop_page_cache ? "dropped" : "kept",
      100 * r.disk_files_at_restart.resident, 100 * f.resident);
}

}  // namespace

std::string MultiTurnResult::describe(const MultiTurnOptions& o) const {
  const MultiTurnSizes& s = sizes;
  std::string out = fmt::format(
      "multi-turn: {} conversations of a {}-token history + {} answer tokens, then each returns with a "
      "{}-token "
      "turn ({}-token second prompt), in the order they left\n"
      "  device prefix pool: {} blocks (room for {} of the {} conversations; {} a block), {} MiB of KDA "
      "snapshots ({} each), snapshot interval {}, {} tokens a step; host tier {}\n",
      o.conversations, o.history_tokens, o.answer_tokens, o.turn_tokens, s.second_prompt_tokens, s.gpu_blocks,
      s.gpu_conversations, o.conversations, format_bytes(double(s.block_bytes)), s.snapshot_budget_mib,
      format_bytes(double(s.snapshot_bytes)), s.snapshot_interval, o.max_num_tokens,
      format_bytes(s.host_tier_gib * kGiB));
  if (!configs.empty()) {
    const MultiTurnConfig& first = configs.front();
    out +=
        fmt::format("  first turns (nothing cached): TTFT median {:.2f} ms, p90 {:.2f} ms\n",
                    serve::percentile(first.first_ttft_ms, 50), serve::percentile(first.first_ttft_ms, 90));
  }
  out += fmt::format("  {:<28} {:>12} {:>12} {:>13} {:>9}  {}\n", "second turn", "TTFT median", "TTFT p90",
                     "cached/turn", "speed-up", "hits device / host / disk (tokens)");
  for (const MultiTurnConfig& c : configs)
    out += fmt::format("  {:<28} {:>9.2f} ms {:>9.2f} ms {:>13.0f} {:>8.2f}x  {} ({} of {} turns hit)\n",
                       c.name, c.median_ms(), c.p90_ms(),
                       double(c.cached_tokens) / double(std::max<size_t>(c.second_ttft_ms.size(), 1)),
                       speedup(*this, c), hits_cell(c), c.turns_with_hits, c.second_ttft_ms.size());
  out += fmt::format(
      "  copy ceiling (pinned, {} in one piece, same run): host -> device {:.1f} GB/s, device -> host "
      "{:.1f} GB/s\n",
      format_bytes(double(blocks_for(s.second_prompt_tokens) * s.block_bytes + s.snapshot_bytes)),
      ceiling_to_device_gbps, ceiling_to_host_gbps);
  for (const MultiTurnConfig& c : configs)
    if (c.copies.batches > 0) out += fmt::format("  tier copies, {}: {}\n", c.name, copy_line(*this, c));
  for (const MultiTurnConfig& c : configs)
    if (c.disk_bytes_read > 0)
      out += fmt::format(
          "  disk reads, {}: {} in {:.1f} ms on the engine thread (no read-ahead: the step waits), "
          "{:.2f} GB/s; {}\n",
          c.name, format_bytes(double(c.disk_bytes_read)), c.disk_read_seconds * 1e3,
          gbps(double(c.disk_bytes_read), c.disk_read_seconds), disk_line(*this, o));
  if (!configs.empty())
    out += "  memory plan (" + configs.back().name + "): " + configs.back().memory_plan + "\n";
  return out;
}

std::string MultiTurnResult::markdown(const MultiTurnOptions& o, const std::string& title) const {
  const MultiTurnSizes& s = sizes;
  std::string out = fmt::format(
      "{}\n\n{} conversations × ({}-token history + {} answer tokens), then each returns with a {}-token "
      "turn, in "
      "the order they left; device prefix pool {} blocks (room for {} conversations) + {} MiB of KDA "
      "snapshots, "
      "interval {}; host tier {}. First turns: TTFT median {:.2f} ms. Copy ceiling (pinned, same run): host "
      "→ device "
      "{:.1f} GB/s, device → host {:.1f} GB/s.\n\n"
      "| second turn | TTFT median | TTFT p90 | cached tokens / turn | hits device / host / disk (tokens) | "
      "recompute / this | tier copies | disk reads |\n|---|---:|---:|---:|---|---:|---|---|\n",
      title, o.conversations, o.history_tokens, o.answer_tokens, o.turn_tokens, s.gpu_blocks,
      s.gpu_conversations, s.snapshot_budget_mib, s.snapshot_interval, format_bytes(s.host_tier_gib * kGiB),
      configs.empty() ? 0.0 : serve::percentile(configs.front().first_ttft_ms, 50), ceiling_to_device_gbps,
      ceiling_to_host_gbps);
  for (const MultiTurnConfig& c : configs)
    out += fmt::format(
        "| {} | {:.2f} ms | {:.2f} ms | {:.0f} | {} | {:.2f}× | {} | {} |\n", c.name, c.median_ms(),
        c.p90_ms(), double(c.cached_tokens) / double(std::max<size_t>(c.second_ttft_ms.size(), 1)),
        hits_cell(c), speedup(*this, c), c.copies.batches > 0 ? copy_line(*this, c) : "—",
        c.disk_bytes_read > 0
            ? fmt::format("{} at {:.2f} GB/s ({})", format_bytes(double(c.disk_bytes_read)),
                          gbps(double(c.disk_bytes_read), c.disk_read_seconds), disk_line(*this, o))
            : "—");
  return out;
}

}  // namespace rill::bench
