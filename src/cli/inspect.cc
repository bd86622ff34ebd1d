// rill inspect MODEL_DIR: what the config describes, what the checkpoint holds, what a sequence costs, and
// whether `rill serve` can run the directory (weights against the config, tokenizer, stop ids, chat template)
// — without loading any weights. Exit code 0 only when it can.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/common.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/parallel_plan.h"
#include "model/presets.h"
#include "server/serving_files.h"

namespace rill::cli {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.{}f} {}", b, u ? 2 : 0, units[u]);
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

// The per-GPU memory of a mapping (model/parallel_plan.h) against a GPU of `gpu_gib` at `utilization`: the
// weights of each stage's rank, then what the caches hold in the rest. Returns the problem when a stage does
// not fit one sequence of `max_len` tokens beside `seqs` sequences' state (empty when it fits).
std::string print_parallel_plan(const model::ParallelPlan& plan, double gpu_gib, double utilization, int max_len,
                                int seqs) {
  const dist::ParallelSizes& z = plan.sizes;
  std::printf("mapping      tp %d x pp %d = %d GPUs; experts: ep %d x expert-TP %d within each stage's tp ranks\n",
              z.tp, z.pp, z.world, z.ep, z.world / z.pp / z.ep);
  const double budget = gpu_gib * utilization * double(1ull << 30);
  std::string problem;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const model::StagePlan& st = plan.stages[s];
    const double left = budget - double(st.weight_bytes) - double(seqs) * double(st.state_bytes_per_sequence);
    const double tokens = st.kv_bytes_per_token > 0 ? left / double(st.kv_bytes_per_token) : 0;
    std::printf("stage %-6zu layers %d-%d (%d KDA, %d MLA): weights %s per GPU; KDA state %s per sequence; "
                "MLA KV %s B per token\n",
                s, st.first_layer, st.end_layer - 1, st.n_kda, st.n_mla, human_bytes(double(st.weight_bytes)).c_str(),
                human_bytes(double(st.state_bytes_per_sequence)).c_str(), with_commas(st.kv_bytes_per_token).c_str());
    if (left <= 0 || (st.kv_bytes_per_token > 0 && tokens < max_len)) {
      if (problem.empty())
        problem = fmt::format("stage {}: {} of weights and {} sequences' state leave no room for one {}-token sequence "
                              "in {:.0f} GiB x {:.2f} per GPU: use more GPUs (-tp, -ep, -pp)",
                              s, human_bytes(double(st.weight_bytes)), seqs, max_len, gpu_gib, utilization);
      std::printf("             does NOT fit %.0f GiB x %.2f\n", gpu_gib, utilization);
    } else {
      std::printf("             fits %.0f GiB x %.2f: %s left after the weights and %d sequences' state = %s "
                  "tokens of MLA KV (the step workspace comes out of this too)\n",
                  gpu_gib, utilization, human_bytes(left).c_str(), seqs,
                  st.kv_bytes_per_token > 0 ? with_commas(int64_t(tokens)).c_str() : "unbounded");
    }
  }
  return problem;
}

// Whether every stage of `plan` fits one sequence of `max_len` tokens beside `seqs` sequences' state.
bool plan_fits(const model::ParallelPlan& plan, double gpu_gib, double utilization, int max_len, int seqs) {
  const double budget = gpu_gib * utilization * double(1ull << 30);
  for (const model::StagePlan& st : plan.stages) {
    const double left = budget - double(st.weight_bytes) - double(seqs) * double(st.state_bytes_per_sequence);
    if (left <= 0 || (st.kv_bytes_per_token > 0 && left / double(st.kv_bytes_per_token) < max_len)) return false;
  }
  return true;
}

// Without a mapping: when one GPU cannot hold the model, the fewest GPUs of this size that can — tensor
// (and expert) parallel within a node of up to 8, then pipeline stages across nodes — so a user learns it
// before loading anything.
void print_gpus_needed(const model::ModelConfig& c, double gpu_gib, double utilization, int max_len, int seqs) {
  auto one = model::plan_parallel(c, {.world = 1, .tp = 1, .ep = 1, .pp = 1});
  if (!one.ok() || plan_fits(*one, gpu_gib, utilization, max_len, seqs)) {
    if (one.ok())
      std::printf("gpus         fits one %.0f GiB GPU x %.2f (%d sequences of up to %d tokens)\n", gpu_gib,
                  utilization, seqs, max_len);
    return;
  }
  for (int world = 2; world <= 512; ++world) {
    for (int tp : {8, 4, 2, 1}) {
      if (world % tp != 0) continue;
      const int pp = world / tp;
      dist::ParallelSizes z{.world = tp * pp, .tp = tp, .ep = tp, .pp = pp};
      auto plan = model::plan_parallel(c, z);
      if (!plan.ok() || !plan_fits(*plan, gpu_gib, utilization, max_len, seqs)) continue;
      std::printf("gpus         does NOT fit one %.0f GiB GPU x %.2f: needs %d of them (-tp %d -ep %d%s; "
                  "rill inspect ... -tp %d -ep %d%s for the plan; --gpu-memory-gib for another size)\n",
                  gpu_gib, utilization, tp * pp, tp, tp, pp > 1 ? fmt::format(" -pp {}", pp).c_str() : "", tp, tp,
                  pp > 1 ? fmt::format(" -pp {}", pp).c_str() : "");
      return;
    }
  }
  std::printf("gpus         does NOT fit one %.0f GiB GPU x %.2f, nor 512 of them\n", gpu_gib, utilization);
}

}  // namespace

int run_inspect(int argc, char** argv) {
  CLI::App app{
      "Describe a checkpoint: config, tensors, per-sequence memory, and whether `rill serve` can run it "
      "(weights, tokenizer files, stop ids, chat template). Loads no weights; exit code 1 names each "
      "problem. With -tp / -ep / -pp (or --gpu-memory-gib): the per-GPU memory plan of that mapping, refused "
      "when it does not divide or fit."};
  std::string dir, preset;
  app.add_option("MODEL_DIR", dir, "Hugging Face checkpoint directory");
  app.add_option("--preset", preset, "a named config instead of MODEL_DIR (kimi-linear-48b, kimi-k3, kimi-k3-slice): "
                                     "config and memory plan only");
  dist::ParallelSizes sizes;
  app.add_option("--tensor-parallel-size", sizes.tp, "-tp: GPUs per pipeline stage")->check(CLI::Range(1, 1024));
  app.add_option("--expert-parallel-size", sizes.ep, "-ep: expert-parallel ranks within a stage")
      ->check(CLI::Range(1, 1024));
  app.add_option("--pipeline-parallel-size", sizes.pp, "-pp: pipeline stages")->check(CLI::Range(1, 1024));
  double gpu_gib = 140, utilization = 0.9;
  int max_len = 32768, seqs = 64;
  app.add_option("--gpu-memory-gib", gpu_gib, "memory per GPU (default: an H200's 140 GiB)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--gpu-memory-utilization", utilization, "the share rill may use")->check(CLI::Range(0.01, 1.0));
  app.add_option("--max-model-len", max_len, "the context one sequence must fit")->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-num-seqs", seqs, "sequences whose KDA state is held")->check(CLI::Range(1, 1 << 20));
  std::string quantization;
  app.add_option("--quantization", quantization,
                 "fp8 or ptpc_fp8: plan with the matrices quantized to FP8 at load (as serve does)")
      ->check(CLI::IsMember({"none", "fp8", "ptpc_fp8"}));
  std::vector<std::string> args = expand_parallel_short_flags(argc, argv);
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  if (int rc = parse_args(app, int(ptrs.size()), ptrs.data()); rc >= 0) return rc;
  if (dir.empty() == preset.empty())
    return report_error("inspect", invalid_argument("give MODEL_DIR or --preset NAME (one of them)"));
  const bool plan_asked = sizes.tp > 1 || sizes.ep > 1 || sizes.pp > 1 || app.count("--gpu-memory-gib") > 0;
  sizes.world = sizes.tp * sizes.pp;

  Result<model::ModelConfig> cfg = invalid_argument("no config");
  if (!preset.empty()) {
    auto json = model::preset_config(preset);
    if (!json.ok()) return report_error("inspect", json.status());
    cfg = model::ModelConfig::from_json(*json, "preset " + preset);
  } else {
    cfg = model::ModelConfig::load(dir);
  }
  if (!cfg.ok()) return report_error("inspect", cfg.status());
  if (Status q = model::apply_quantization(*cfg, quantization); !q.ok()) return report_error("inspect", q);
  const model::ModelConfig& c = *cfg;
  auto cpu = backend::make_cpu_backend();
  auto m = model::build_model(c, *cpu);
  if (!m.ok()) return report_error("inspect", m.status());
  const model::WeightTable& table = (*m)->weight_table();

  std::printf("model        %s (%s)\n", preset.empty() ? dir.c_str() : ("preset " + preset).c_str(),
              model::family_name(c.family));
  std::printf("layers       %d: %d KDA + %d MLA; %d dense FFN + %d MoE\n", c.n_layers,
              c.n_layers_of(model::LayerKind::Kda), c.n_layers_of(model::LayerKind::Mla),
              int(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Dense)),
              int(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Moe)));
  std::printf("hidden       %d, vocab %d, max context %lld\n", c.hidden_size, c.vocab_size,
              static_cast<long long>(c.max_position_embeddings));
  std::printf(
      "kda          %d heads x %d, conv %d, gate %s, output gate %s\n", c.kda.n_heads, c.kda.head_dim,
      c.kda.conv_kernel,
      c.kda.gate_lower_bound ? fmt::format("bounded ({})", *c.kda.gate_lower_bound).c_str() : "softplus",
      c.kda.full_rank_output_gate ? "full-rank" : "low-rank");
  std::printf("mla          %d heads, q %s, latent %d + %d, nope %d, v %d (NoPE)\n", c.mla.n_heads,
              c.mla.q_lora_rank ? fmt::format("LoRA {}", c.mla.q_lora_rank).c_str() : "full",
              c.mla.kv_lora_rank, c.mla.qk_rope_head_dim, c.mla.qk_nope_head_dim, c.mla.v_head_dim);
  std::printf(
      "moe          %d experts, top-%d, %d shared, width %d, groups %d/%d, renormalize %s, scale %g\n",
      c.moe.n_experts, c.moe.n_experts_per_token, c.moe.n_shared_experts, c.moe.intermediate_size,
      c.moe.topk_group, c.moe.n_groups, c.moe.renormalize ? "yes" : "no", c.moe.routed_scaling_factor);
  const int64_t params = table.n_params();
  std::printf("parameters   %s (%.1f B), %zu tensors, %s in bf16%s\n", with_commas(params).c_str(),
              double(params) / 1e9, table.specs().size(), human_bytes(double(table.stored_bytes())).c_str(),
              c.mxfp4_experts ? " with MXFP4 routed experts" : "");
  if (c.fp8.source != model::Fp8Source::None) {
    // What the GPU holds: FP8 codes (1 B) + F32 scales per block for the FP8 matrices, bf16 for the matrices kept
    // dense, F32 vectors; against every matrix in bf16.
    const int64_t fp8 = table.loaded_bytes(2), bf16 = [&] {
      int64_t n = 0;
      for (const auto& s : table.specs())
        if (s.role != model::WeightRole::Fp8Scale)
          n += s.role == model::WeightRole::Matrix ? 2 * s.shape.numel() : table.loaded_bytes_of(s, 2);
      return n;
    }();
    int64_t fp8_params = 0;
    for (const auto& s : table.specs())
      if (s.role == model::WeightRole::Matrix &&
          (s.stack >= 0 ? table.stacks()[size_t(s.stack)].fp8_target : s.fp8.target))
        fp8_params += s.shape.numel();
    std::printf(
        "fp8          %s on the GPU (%s of %s parameters in FP8 E4M3 + F32 %s scales, the rest bf16/F32); "
        "%s with bf16 matrices\n",
        human_bytes(double(fp8)).c_str(), with_commas(fp8_params).c_str(), with_commas(params).c_str(),
        c.fp8.block_rows == 1 ? "per-channel" : "block", human_bytes(double(bf16)).c_str());
  }
  std::printf("per token    %s B of MLA latent KV (bf16, %d layers x %d)\n",
              with_commas(c.kv_bytes_per_token(2)).c_str(), c.n_layers_of(model::LayerKind::Mla),
              c.mla.cache_width());
  std::printf("per sequence %s of fp32 KDA state + %s of conv windows (bf16)\n",
              human_bytes(double(c.kda_state_bytes_per_sequence())).c_str(),
              human_bytes(double(c.kda_conv_bytes_per_sequence(2))).c_str());
  // Speculative decoding's rollback keeps one checkpoint of each sequence's slot (engine/scheduler.h).
  std::printf(
      "speculation  +%s per sequence with --speculative-config (a checkpoint of its KDA state and conv "
      "windows; method draft_model adds the draft checkpoint's weights and its own caches)\n",
      human_bytes(double(c.kda_state_bytes_per_sequence() + c.kda_conv_bytes_per_sequence(2))).c_str());

  // Everything else rill serve needs; each problem is collected, so one run names them all.
  std::vector<std::string> problems;
  if (!plan_asked) print_gpus_needed(c, gpu_gib, utilization, max_len, seqs);
  if (plan_asked) {
    auto plan = model::plan_parallel(c, sizes);
    if (!plan.ok()) return report_error("inspect", plan.status());
    if (std::string p = print_parallel_plan(*plan, gpu_gib, utilization, max_len, seqs); !p.empty())
      problems.push_back(p);
  }
  if (!preset.empty()) {
    if (!problems.empty()) {
      std::printf("validation   FAILED\n");
      for (const std::string& p : problems) std::printf("  - %s\n", p.c_str());
      return 1;
    }
    std::printf("validation   ok (a preset: no checkpoint or tokenizer to check)\n");
    return 0;
  }
  auto ckpt = io::Checkpoint::open(dir);
  if (!ckpt.ok()) {
    std::printf("weights      unreadable\n");
    problems.push_back(ckpt.status().message());
  } else if (!ckpt->has_weights()) {
    std::printf("weights      missing: no *.safetensors files in %s (config only)\n", dir.c_str());
    problems.push_back(
        fmt::format("weights: no *.safetensors files in {} (rill serve needs them; only "
                    "--load-format dummy runs without)",
                    dir));
  } else {
    std::map<std::string, int64_t> by_dtype;
    for (const std::string& n : ckpt->names())
      by_dtype[std::string(dtype_name(ckpt->find(n)->info->dtype))] += 1;
    std::string dtypes;
    for (const auto& [k, v] : by_dtype) dtypes += fmt::format("{}{} {}", dtypes.empty() ? "" : ", ", v, k);
    std::printf("checkpoint   %zu tensors in %zu file(s), %s (%s)\n", ckpt->n_tensors(), ckpt->files().size(),
                human_bytes(double(ckpt->total_bytes())).c_str(), dtypes.c_str());
    if (Status st = model::check_weights(table, *ckpt); !st.ok()) problems.push_back(st.message());
  }

  // The same loading and checks as rill serve's, so the two cannot disagree about a directory.
  auto files = server::load_serving_files(dir, c);
  if (!files.ok()) {
    std::printf("tokenizer    not loaded\n");
    problems.push_back(files.status().message());
  } else {
    const text::Tokenizer& tok = *files->tokenizer;
    std::printf("tokenizer    %d ids (%d BPE ranks + %d control tokens), stop ids %s\n", tok.vocab_size(),
                tok.n_ranks(), tok.vocab_size() - tok.n_ranks(),
                fmt::format("{}", fmt::join(files->eos_token_ids, ", ")).c_str());
    if (c.family == model::ModelFamily::KimiK3) {
      std::printf("chat         native Kimi K3 renderer\n");
    } else if (files->chat_template) {
      std::printf("chat         Jinja template (%s)\n",
                  fmt::format("{}", fmt::join(files->chat_template->template_names(), ", ")).c_str());
    } else {
      std::printf("chat         no template\n");
      problems.push_back(files->chat_error.message() +
                         ": rill serve starts without one, but /v1/chat/completions answers 400 (add "
                         "chat_template.jinja from the model's Hugging Face checkpoint)");
    }
  }

  if (!problems.empty()) {
    std::printf("validation   FAILED\n");
    for (const std::string& p : problems) std::printf("  - %s\n", p.c_str());
    return 1;
  }
  std::printf(
      "validation   ok: every tensor present with the expected shape and dtype; tokenizer, stop ids and chat "
      "template load as rill serve loads them\n");
  return 0;
}

}  // namespace rill::cli
