#include "cli/common.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda_backend_options.h"
#include "core/log.h"

namespace rill::cli {

void add_device_options(CLI::App& app, DeviceOptions& o) {
  app.add_option("--device", o.device,
                 "where to run: auto (the first GPU, else the CPU), cpu, cuda or cuda:N (the N-th GPU CUDA shows; "
                 "CUDA_VISIBLE_DEVICES applies)")
      ->check([](const std::string& v) {
        if (v == "auto" || v == "cpu" || backend::parse_cuda_device(v).ok()) return std::string();
        return "expected auto, cpu, cuda or cuda:N, got \"" + v + "\"";
      })
      ->capture_default_str();
  app.add_option(
         "-q,--quantization", o.quantization,
         "fp8: quantize the checkpoint's bf16 matrices to FP8 E4M3 with 128 x 128 block scales at load "
         "(vLLM's flag; half the weight bytes; the embedding, lm_head, router and KDA gate projections stay "
         "bf16). ptpc_fp8: the same with one scale per weight row, the prefill's expert GEMMs quantizing "
         "activations per token (faster). FP8 checkpoints load as FP8 without it. none: as stored")
      ->check([](const std::string& v) -> std::string {
        if (v == "fp8" || v == "ptpc_fp8" || v == "none") return {};
        return "\"" + v + "\": rill runs the checkpoint's own formats (bfloat16, FP8, K3's MXFP4 experts) or " +
               "quantizes to fp8 at load; other quantization methods (awq, gptq, bitsandbytes, ...) are not built";
      });
  app.add_option(
         "--backend-option", o.backend_options,
         "key=value, repeatable: a kernel-path switch of the CUDA backend (" +
             backend::cuda_backend_option_keys() +
             "; booleans 0/1), e.g. pdl=0 or kda_fused_decode=0 to compare a path with its replacement; "
             "the CPU backend has none")
      ->allow_extra_args(false)  // one key=value per occurrence: a following positional stays positional
      ->check([](const std::string& v) {
        backend::CudaBackendOptions o;
        const Status st = backend::set_cuda_backend_option(o, v);
        return st.ok() ? std::string() : std::string(st.message());
      });
  app.add_option_function<std::string>(
         "--log-level", [](const std::string& v) { set_log_level(*parse_log_level(v)); },
         "debug | info | warning | error: the least severe log lines written to stderr (default: "
         "RILL_LOG_LEVEL, else info)")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}));
}

std::string expand_parallel_short_flag(std::string a) {
  static const std::pair<const char*, const char*> kShort[] = {{"-tp", "--tensor-parallel-size"},
                                                               {"-pp", "--pipeline-parallel-size"},
                                                               {"-dp", "--data-parallel-size"},
                                                               {"-ep", "--expert-parallel-size"}};
  for (const auto& [from, to] : kShort)
    if (a == from || a.starts_with(std::string(from) + "=")) return to + a.substr(std::strlen(from));
  return a;
}

std::vector<std::string> expand_parallel_short_flags(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) out.push_back(i > 0 ? expand_parallel_short_flag(argv[i]) : std::string(argv[i]));
  return out;
}

Result<std::unique_ptr<backend::Backend>> open_backend(const DeviceOptions& o) {
  RILL_ASSIGN_OR_RETURN(const backend::CudaBackendOptions options,
                        backend::parse_cuda_backend_options(o.backend_options));
  if (o.device != "auto") {
    auto be = backend::make_backend(o.device, options);
    // Which devices CUDA shows depends on CUDA_VISIBLE_DEVICES, which the backend does not read: name it
    // here.
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (!be.ok() && visible && be.status().code() == StatusCode::InvalidArgument)
      return Status(be.status().code(),
                    fmt::format("{} (CUDA_VISIBLE_DEVICES={})", be.status().message(), visible));
    return be;
  }
  if (!backend::cuda_backend_compiled()) {
    RILL_LOG_WARN(
        "--device auto: this build has no CUDA backend (built with -DRILL_CUDA=OFF): running on the CPU");
    return backend::make_backend("cpu");
  }
  auto be = backend::make_backend("cuda", options);
  if (be.ok()) return be;
  RILL_LOG_WARN("--device auto: no usable GPU ({}): running on the CPU", be.status().message());
  return backend::make_backend("cpu");
}

Result<std::unique_ptr<model::Model>> load_model_with_progress(const std::filesystem::path& dir,
                                                               backend::Backend& be,
                                                               const std::string& quantization) {
  model::LoadOptions opts;
  opts.quantization = quantization;
  const bool tty = isatty(fileno(stderr));
  const auto start = std::chrono::steady_clock::now();
  int last_pct = -1;
  opts.progress = [&](int64_t done, int64_t total) {
    if (!tty || total <= 0) return;
    const int pct = int(100 * done / total);
    if (pct == last_pct) return;
    last_pct = pct;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int bar = pct * 30 / 100;
    std::fprintf(stderr, "\rloading weights [%.*s%*s] %3d%%  %.1f / %.1f GB  %.0fs", bar,
                 "==============================", 30 - bar, "", pct, double(done) / 1e9, double(total) / 1e9, s);
    if (done >= total) std::fprintf(stderr, "\n");
  };
  return model::load_model(dir, be, opts);
}

Result<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  int index = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      return invalid_argument("--prompt-ids: element {} (\"{}\") is not a non-negative integer", index, item);
    ids.push_back(int32_t(v));
    i = j + 1;
    ++index;
    if (j == text.size()) break;
  }
  return ids;
}

int report_error(const char* command, const Status& status) {
  std::fprintf(stderr, "rill %s: %s\n", command, status.message().c_str());
  return status.code() == StatusCode::InvalidArgument || status.code() == StatusCode::NotFound ? 2 : 1;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_flag(const CLI::App& app, const std::string& flag, const std::vector<std::string>& also) {
  const std::string name = flag.substr(0, flag.find('='));
  std::string best;
  size_t best_d = std::max<size_t>(3, name.size() / 3) + 1;  // farther than a third of the name: no hint
  auto consider = [&](const std::string& candidate) {
    const size_t d = edit_distance(name, candidate);
    if (d < best_d) best_d = d, best = candidate;
  };
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& l : opt->get_lnames()) consider("--" + l);
  for (const std::string& a : also) consider(a);
  return best;
}

int parse_args(CLI::App& app, int argc, char** argv, const std::vector<std::string>& also_known) {
  // Every usage error exits 2 (the documented code for bad input, as argparse does), not CLI11's own codes
  // (105 for a bad value, 106 for a missing one, 109 for an unknown flag); --help and --version exit 0.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    bool named = false;
    for (const std::string& extra : app.remaining()) {
      if (!extra.starts_with("-")) continue;
      const std::string hint = closest_flag(app, extra, also_known);
      std::fprintf(stderr, "%s: unknown flag %s%s\n", app.get_name().c_str(), extra.c_str(),
                   hint.empty() ? "" : (" (did you mean " + hint + "?)").c_str());
      named = true;
    }
    if (!named) {
      app.exit(e);
      return 2;
    }
    std::fprintf(stderr, "Run with --help for the flags.\n");
    return 2;
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return -1;
}

Status check_draft_model(const std::filesystem::path& target_dir, const std::filesystem::path& draft_dir) {
  auto draft = model::ModelConfig::load(draft_dir);
  if (!draft.ok()) return draft.status().with_context("--speculative-config \"model\" " + draft_dir.string());
  auto target = model::ModelConfig::load(target_dir);
  if (!target.ok()) return target.status();
  if (draft->vocab_size != target->vocab_size)
    return invalid_argument("--speculative-config \"model\" {}: the draft model's vocabulary has {} tokens, {}'s {}",
                            draft_dir.string(), draft->vocab_size, target_dir.string(), target->vocab_size);
  return Status::ok_status();
}

}  // namespace rill::cli
