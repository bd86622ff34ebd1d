// rill bench: prefill and decode steps of a model plus its heaviest ops at full size, each number beside the
// ceiling measured in the same run (design.md §7). `--load-format dummy --preset kimi-linear-48b` (or
// kimi-k3-slice) needs no checkpoint: seeded random weights are filled on the device. `rill bench serve` is
// the serving benchmark (bench_serve.cc).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string_view>

#include "bench/driver/executor_bench.h"
#include "bench/driver/model_bench.h"
#include "bench/driver/multi_turn_bench.h"
#include "bench/driver/prefix_bench.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/parallel_flags.h"
#include "core/sizes.h"
#include "model/presets.h"

namespace rill::cli {

namespace {

std::string today() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  return date;
}

int run_prefix_reuse(backend::Backend& be, const model::ModelConfig& cfg, const std::string& dir,
                     const std::string& label, const std::string& load_format, bench::PrefixBenchOptions po, const bench::BenchOptions& o,
                     int prefix_cached, const std::string& markdown) {
  po.prompt_tokens = o.prefill_long;
  po.cached_tokens = prefix_cached >= 0 ? prefix_cached : o.prefill_long / 8 * 7;
  po.repeats = o.repeats;
  std::fprintf(stderr, "loading the model (%s) ...\n", load_format == "dummy" ? "dummy weights" : dir.c_str());
  auto m = load_format == "dummy" ? model::load_dummy_model(cfg, be, 1234)
                                  : load_model_with_progress(dir, be, model::quantization_flag(cfg));
  if (!m.ok()) return report_error("bench", m.status());
  auto r = bench::bench_prefix_reuse(std::move(m).value(), po);
  if (!r.ok()) return report_error("bench", r.status());
  std::printf("%s", r->describe(po).c_str());
  if (!markdown.empty()) {
    std::ofstream f(markdown);
    f << fmt::format("`rill bench --prefix-reuse` on {} ({}), {}\n\n| scenario | prompt | cold, caching off | "
                     "cold, caching on | warm | cold on / warm | cold off / warm |\n|---|---|---|---|---|---|---|\n",
                     be.name(), label, today())
      << r->markdown_row(po);
  }
  return 0;
}

int run_multi_turn(backend::Backend& be, const model::ModelConfig& cfg, const std::string& dir,
                   const std::string& label, const std::string& load_format, const std::string& quantization,
                   const bench::MultiTurnOptions& mo, const std::string& markdown) {
  std::fprintf(stderr, "loading the model (%s) ...\n",
               load_format == "dummy" ? "dummy weights" : dir.c_str());
  auto m = load_format == "dummy" ? model::load_dummy_model(cfg, be, 1234)
                                  : load_model_with_progress(dir, be, quantization);
  if (!m.ok()) return report_error("bench", m.status());
  if (auto sizes = bench::multi_turn_sizes(mo, **m); sizes.ok())
    std::fprintf(stderr,
                 "multi-turn: %d conversations x 3 configurations; device pool %d blocks (room for %d), "
                 "host tier %s ...\n",
                 mo.conversations, sizes->gpu_blocks, sizes->gpu_conversations,
                 format_bytes(sizes->host_tier_gib * double(1 << 30)).c_str());
  auto r = bench::bench_multi_turn(std::move(m).value(), mo);
  if (!r.ok()) return report_error("bench", r.status());
  std::printf("%s", r->describe(mo).c_str());
  if (!markdown.empty()) {
    std::ofstream f(markdown);
    f << r->markdown(mo, fmt::format("`rill bench --multi-turn` on {} ({}), {}", be.name(), label, today()));
  }
  return 0;
}

// Bench defaults a preset's shape calls for; flags given on the command line win. The K3 slice (presets.cc):
// decode batches 1, 8, 32 and one 8K prompt (a step of 8 x 2K prompts would only repeat the 8K prompt's expert
// GEMMs), plus the per-layer-type rows, since a slice's whole-step times stand for no real model.
void apply_preset_defaults(const std::string& preset, const CLI::App& app, bench::BenchOptions& o, bool& layer_types) {
  if (preset != "kimi-k3-slice") return;
  if (!app.count("--decode-batches")) o.decode_batches = {1, 8, 32};
  if (!app.count("--prefill-batch")) o.prefill_batch = 0;
  if (!app.count("--verify-drafts")) o.verify_drafts = {};
  if (!app.count("--layer-types")) layer_types = true;
}

// The CPU reference backend is ~1000x slower than a GPU: the GPU-sized defaults (a 4K context, batches up to
// 256, an 8K prompt) would run for many minutes without a word. Flags given on the command line are kept.
void apply_cpu_defaults(const CLI::App& app, bench::BenchOptions& o) {
  std::vector<std::string> changed;
  auto set = [&](const char* flag, auto& field, auto value, const std::string& shown) {
    if (app.count(flag)) return;
    field = value;
    changed.push_back(std::string(flag) + " " + shown);
  };
  set("--decode-context", o.decode_context, 256, "256");
  set("--decode-batches", o.decode_batches, std::vector<int>{1, 4}, "1 4");
  set("--prefill-tokens", o.prefill_long, 256, "256");
  set("--prefill-batch", o.prefill_batch, 0, "0");
  set("--verify-drafts", o.verify_drafts, std::vector<int>{2}, "2");
  set("--verify-batches", o.verify_batches, std::vector<int>{1}, "1");
  set("--repeats", o.repeats, 2, "2");
  if (changed.empty()) return;
  std::string list;
  for (const std::string& c : changed) list += (list.empty() ? "" : ", ") + c;
  std::fprintf(stderr, "on the CPU: CPU-sized defaults (%s); give the flags for other sizes\n", list.c_str());
}

// --multi-turn on the CPU: a handful of short conversations unless the flags say otherwise (the GPU-sized
// 64 x 8K would take hours there).
void apply_cpu_multi_turn_defaults(const CLI::App& app, bench::MultiTurnOptions& mo) {
  std::string changed;
  auto set = [&](const char* flag, int& field, int value) {
    if (app.count(flag)) return;
    field = value;
    changed += fmt::format("{}{} {}", changed.empty() ? "" : ", ", flag, value);
  };
  set("--conversations", mo.conversations, 6);
  set("--history-tokens", mo.history_tokens, 256);
  set("--answer-tokens", mo.answer_tokens, 2);
  set("--turn-tokens", mo.turn_tokens, 32);
  if (!changed.empty())
    std::fprintf(stderr, "on the CPU: CPU-sized defaults (%s); give the flags for other sizes\n",
                 changed.c_str());
}

}  // namespace

int run_bench(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "serve") return run_bench_serve(argc - 1, argv + 1);
  CLI::App app{"Benchmark prefill, decode and the per-op kernels of a model; prints time, bytes, FLOPs and "
               "the fraction of the measured ceilings. `rill bench serve --help`: the serving benchmark against a "
               "running server."};
  std::string dir, load_format = "auto", preset, markdown;
  bench::BenchOptions o;
  bool skip_model = false, skip_ops = false, print_config = false, layer_types = false;
  DeviceOptions dev;
  app.add_option("MODEL_DIR", dir, "checkpoint directory (omit with --load-format dummy --preset NAME)");
  app.add_option("--load-format", load_format, "auto (read MODEL_DIR) or dummy (random weights on the device)")
      ->check(CLI::IsMember({"auto", "dummy"}))->capture_default_str();
  std::string preset_list;
  for (const auto& n : model::preset_names()) preset_list += (preset_list.empty() ? "" : ", ") + n;
  app.add_option("--preset", preset,
                 "model shape for dummy weights: " + preset_list +
                     " (kimi-k3-slice: 4 of K3's layers at full width, MXFP4 experts; see docs/PERF.md)");
  app.add_option("--decode-context", o.decode_context, "context length of the decode benchmark")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--decode-batches", o.decode_batches, "decode batch sizes")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxBatchSizeFlag));
  app.add_option("--verify-drafts", o.verify_drafts,
                 "draft counts k of the speculative verify-step rows (k + 1 tokens per sequence; 0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  app.add_option("--verify-batches", o.verify_batches, "batch sizes of the verify-step rows")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxBatchSizeFlag));
  app.add_option("--prefill-tokens", o.prefill_long, "length of the single-prompt prefill")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxStepTokensFlag));
  app.add_option("--prefill-batch", o.prefill_batch,
                 "prompts of 2048 tokens in the batched prefill step (0: none; kimi-k3-slice: 0)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxStepTokensFlag / 2048));
  app.add_option("--repeats", o.repeats, "timed repetitions per measurement (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxRepeatsFlag));
  app.add_option("--markdown", markdown, "also write the results as a markdown table to this file");
  app.add_flag("--skip-model", skip_model, "only the per-op benchmarks");
  app.add_flag("--skip-ops", skip_ops, "only the whole-model benchmarks");
  app.add_flag("--layer-types,!--no-layer-types", layer_types,
               "also time one layer of each type (KDA, MLA): steps of a 2-layer model minus those of a 1-layer one, "
               "dummy weights at the model's width (default with kimi-k3-slice)");
  bool composed = false;
  app.add_flag("--composed", composed,
               "do not load the whole model: time its slices (the per-layer rows of --layer-types) and compose a "
               "whole-model estimate from them (section 'composed'), for a GPU that cannot hold the weights (the "
               "48B bf16 shape on an 80 GB H100)");
  app.add_flag("--print-config", print_config, "print the --preset's config.json and exit (to serve it with dummy weights)");
  bool prefix_reuse = false;
  bench::PrefixBenchOptions po;
  int prefix_cached = -1;
  app.add_flag("--prefix-reuse", prefix_reuse,
               "only the prefix-caching scenario: time to first token of a --prefill-tokens prompt cold, then of one "
               "whose first --prefix-cached-tokens are cached (through the engine, caching on)");
  app.add_option("--prefix-cached-tokens", prefix_cached,
                 "--prefix-reuse: shared prefix (default 7/8 of --prefill-tokens)")
      ->check(CLI::Range(0, kMaxStepTokensFlag));
  app.add_option("--max-num-tokens", po.max_num_tokens,
                 "--prefix-reuse, --multi-turn: engine tokens per step")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxStepTokensFlag));
  app.add_option("--kda-snapshot-interval", po.snapshot_interval,
                 "--prefix-reuse: tokens between KDA snapshots (--multi-turn: default the history rounded "
                 "up to a block, one snapshot per turn)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--kda-snapshot-budget", po.snapshot_budget_mib,
                 "--prefix-reuse: MiB for KDA snapshots (--multi-turn: default two per conversation the "
                 "device pool holds)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxMiBFlag));
  app.add_option("--kv-offloading-size", po.host_tier_gib,
                 "--prefix-reuse: GiB of host tier; adds the warm request brought back from it (and the "
                 "host -> device copy ceiling of its bytes); --multi-turn: default enough for every "
                 "conversation")
      ->check(CLI::Range(0.0, 1048576.0));
  app.add_option("--kv-offloading-dir", po.disk_dir,
                 "--prefix-reuse with --kv-offloading-size: a disk tier in this directory; adds the warm "
                 "request read back from it (after everything cached went to disk); --multi-turn: the disk "
                 "tier goes in a fresh directory under this one (default: the temporary directory), removed "
                 "afterwards");
  bool multi_turn = false, keep_page_cache = false;
  bench::MultiTurnOptions mo;
  app.add_flag("--multi-turn", multi_turn,
               "only the multi-turn scenario (issue #38): --conversations first turns of --history-tokens, "
               "then each returns with --turn-tokens more, in the order they left, through a device prefix "
               "pool that holds a quarter of them (--num-kv-blocks); second-turn TTFT recomputed, from the "
               "host tier, and from disk after a restart (bench/README.md)");
  app.add_option("--conversations", mo.conversations, "--multi-turn: conversations")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 16));
  app.add_option("--history-tokens", mo.history_tokens, "--multi-turn: each first turn's prompt")
      ->capture_default_str()
      ->check(CLI::Range(64, kMaxContextFlag));
  app.add_option("--answer-tokens", mo.answer_tokens,
                 "--multi-turn: tokens each first turn generates (part of the history that returns)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--turn-tokens", mo.turn_tokens, "--multi-turn: the new user turn of each second turn")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxContextFlag));
  app.add_option("--num-kv-blocks", mo.gpu_blocks,
                 "--multi-turn: the device's MLA block pool (64-token blocks; default: a quarter of the "
                 "conversations' blocks)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_flag("--keep-page-cache", keep_page_cache,
               "--multi-turn: leave the disk tier's files in the page cache at the restart (default: dropped, "
               "so the restarted engine reads them from the disk)");
  add_device_options(app, dev);
  ParallelFlags parallel;
  if (int rc = parse_with_parallel_flags(app, argc, argv, "bench", dev, parallel); rc >= 0) return rc;
  if (parallel.ranks() > 1 && (layer_types || composed || prefix_reuse || multi_turn))
    return report_error("bench",
                        invalid_argument("--tensor-parallel-size {} --pipeline-parallel-size {}: the "
                                         "sharded run measures whole steps; --layer-types, --composed, "
                                         "--prefix-reuse and --multi-turn run one unsplit model",
                                         parallel.tensor_parallel_size, parallel.pipeline_parallel_size));
  if (prefix_reuse && multi_turn)
    return report_error("bench",
                        invalid_argument("--prefix-reuse and --multi-turn are separate runs: give one"));
  apply_preset_defaults(preset, app, o, layer_types);
  if (print_config) {
    auto json = model::preset_config(preset);
    if (!json.ok()) return report_error("bench", json.status());
    std::printf("%s\n", json->dump(2).c_str());
    return 0;
  }
  if (load_format == "dummy" && preset.empty() && dir.empty())
    return report_error("bench", invalid_argument("--load-format dummy needs --preset NAME or a MODEL_DIR with a config.json"));
  if (load_format != "dummy" && dir.empty())
    return report_error("bench", invalid_argument("give a MODEL_DIR, or --load-format dummy --preset NAME"));
  if (composed) layer_types = true;
  if (layer_types && load_format != "dummy" && !skip_model)
    return report_error("bench", invalid_argument("--layer-types builds smaller models: it needs --load-format dummy"));

  auto be = open_backend(dev);
  if (!be.ok()) return report_error("bench", be.status());
  if ((*be)->device() == Device::Cpu && !multi_turn) apply_cpu_defaults(app, o);
  Result<model::ModelConfig> cfg = invalid_argument("no config");
  if (!preset.empty()) {
    auto json = model::preset_config(preset);
    if (!json.ok()) return report_error("bench", json.status());
    cfg = model::ModelConfig::from_json(*json, "preset " + preset);
  } else {
    cfg = model::ModelConfig::load(dir);
  }
  if (!cfg.ok()) return report_error("bench", cfg.status());
  // The dummy path builds from the config directly; a checkpoint's load applies the flag itself.
  if (Status q = model::apply_quantization(*cfg, dev.quantization); !q.ok()) return report_error("bench", q);

  if (multi_turn) {
    // The flags shared with --prefix-reuse, where given; otherwise sized from the workload.
    mo.max_num_tokens = po.max_num_tokens;
    if (app.count("--kda-snapshot-interval")) mo.snapshot_interval = po.snapshot_interval;
    if (app.count("--kda-snapshot-budget")) mo.snapshot_budget_mib = po.snapshot_budget_mib;
    if (app.count("--kv-offloading-size")) mo.host_tier_gib = po.host_tier_gib;
    mo.disk_parent = po.disk_dir;
    mo.drop_page_cache = !keep_page_cache;
    if ((*be)->device() == Device::Cpu) apply_cpu_multi_turn_defaults(app, mo);
    if (app.count("--kv-offloading-size") && mo.host_tier_gib <= 0)
      return report_error("bench", invalid_argument("--multi-turn measures the host and disk tiers: "
                                                    "--kv-offloading-size must be more than 0"));
    return run_multi_turn(**be, *cfg, dir, preset.empty() ? dir : preset, load_format, dev.quantization, mo,
                          markdown);
  }
  if (prefix_reuse)
    return run_prefix_reuse(**be, *cfg, dir, preset.empty() ? dir : preset, load_format, po, o, prefix_cached, markdown);

  std::fprintf(stderr, "measuring ceilings on %s ...\n", (*be)->name().c_str());
  auto ceil = bench::measure_ceilings(**be);
  if (!ceil.ok()) return report_error("bench", ceil.status());
  std::vector<bench::BenchRow> rows;
  if (parallel.ranks() > 1) {  // whole steps through the sharded executor, as serve runs them
    const std::string label = fmt::format("tp {} x pp {}, ep {}", parallel.tensor_parallel_size,
                                          parallel.pipeline_parallel_size, expert_parallel_size(parallel));
    std::fprintf(stderr, "loading %d ranks (%s) ...\n", parallel.ranks(), label.c_str());
    auto opened = open_local_executor(dir, dev, parallel, bench::executor_bench_runner_options(o),
                                      load_format == "dummy" ? &*cfg : nullptr);
    if (!opened.ok()) return report_error("bench", opened.status());
    auto steps = bench::bench_executor_steps(*opened->executor, o, label);
    if (!steps.ok()) return report_error("bench", steps.status());
    rows.insert(rows.end(), steps->begin(), steps->end());
    skip_ops = skip_model = true;  // per-op and single-model rows are `rill bench` without -tp
  }
  if (!skip_ops) {
    std::fprintf(stderr, "per-op benchmarks ...\n");
    auto ops = bench::bench_ops(**be, *cfg, o);
    if (!ops.ok()) return report_error("bench", ops.status());
    rows.insert(rows.end(), ops->begin(), ops->end());
    // The op rows A/B paths through Backend::set_option and leave the switches at their defaults: the model
    // rows run with the --backend-option values given (keys fixed when the backend is made stay as they are).
    for (const std::string& kv : dev.backend_options) {
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) (void)(*be)->set_option(kv.substr(0, eq), kv.substr(eq + 1));
    }
  }
  if (!skip_model && !composed) {
    std::fprintf(stderr, "loading the model (%s) ...\n", load_format == "dummy" ? "dummy weights" : dir.c_str());
    auto m = load_format == "dummy" ? model::load_dummy_model(*cfg, **be, 1234) : load_model_with_progress(dir, **be, dev.quantization);
    if (!m.ok()) return report_error("bench", m.status());
    auto steps = bench::bench_model(**m, o);
    if (!steps.ok()) return report_error("bench", steps.status());
    rows.insert(rows.end(), steps->begin(), steps->end());
  }
  if (!skip_model && layer_types) {  // after the whole model is freed: each slice needs the GPU to itself
    auto layers = bench::bench_layer_kinds(**be, *cfg, o, 1234);
    if (!layers.ok()) return report_error("bench", layers.status());
    rows.insert(rows.end(), layers->begin(), layers->end());
  }
  std::printf("%s", bench::format_table(rows, *ceil).c_str());
  if (!markdown.empty()) {
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    std::ofstream f(markdown);
    f << bench::format_markdown(rows, *ceil, fmt::format("`rill bench` on {} ({}), {}, {}", (*be)->name(),
                                                         preset.empty() ? dir : preset,
                                                         load_format == "dummy" ? "dummy weights" : "checkpoint", date));
  }
  return 0;
}

}  // namespace rill::cli
