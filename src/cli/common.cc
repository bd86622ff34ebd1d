#include "cli/common.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

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
}

Result<std::unique_ptr<backend::Backend>> open_backend(const DeviceOptions& o) {
  if (o.device != "auto") return backend::make_backend(o.device);
  if (backend::cuda_backend_compiled()) {
    auto be = backend::make_backend("cuda");
    if (be.ok()) return be;
  }
  return backend::make_backend("cpu");
}

Result<std::unique_ptr<model::Model>> load_model_with_progress(const std::filesystem::path& dir,
                                                               backend::Backend& be) {
  model::LoadOptions opts;
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

int parse_args(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

}  // namespace rill::cli
