#include "bench/driver/bench_report.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace rill::bench {

double BenchRow::fraction(const Ceilings& c) const {
  if (ms <= 0) return 0;
  const double t_mem = c.copy_gbps > 0 ? bytes / (c.copy_gbps * 1e9) : 0;
  const double t_cmp = c.gemm_tflops > 0 ? flops / (c.gemm_tflops * 1e12) : 0;
  return std::max(t_mem, t_cmp) / (ms * 1e-3);
}

const char* BenchRow::bound(const Ceilings& c) const {
  const double t_mem = c.copy_gbps > 0 ? bytes / (c.copy_gbps * 1e9) : 0;
  const double t_cmp = c.gemm_tflops > 0 ? flops / (c.gemm_tflops * 1e12) : 0;
  return t_cmp > t_mem ? "compute" : "memory";
}

BenchRow not_run(std::string section, std::string name, const std::string& why) {
  return {std::move(section), std::move(name), 0, 0, 0, "not run: " + why};
}

namespace {

std::string rate(const BenchRow& r) {
  if (r.ms <= 0) return "";
  return fmt::format("{:.0f} GB/s, {:.1f} TF/s", r.bytes / (r.ms * 1e-3) / 1e9, r.flops / (r.ms * 1e-3) / 1e12);
}

}  // namespace

std::string format_table(const std::vector<BenchRow>& rows, const Ceilings& c) {
  std::string s = fmt::format("{:<8} {:<40} {:>10} {:>10} {:>10} {:>26} {:>8} {:>8}  {}\n", "section", "what", "ms",
                              "GB", "GFLOP", "achieved", "bound", "of ceil", "note");
  for (const auto& r : rows)
    s += fmt::format("{:<8} {:<40} {:>10.4f} {:>10.3f} {:>10.1f} {:>26} {:>8} {:>7.1f}%  {}\n", r.section, r.name, r.ms,
                     r.bytes / 1e9, r.flops / 1e9, rate(r), r.bound(c), 100 * r.fraction(c), r.note);
  return s;
}

std::string format_markdown(const std::vector<BenchRow>& rows, const Ceilings& c, const std::string& header) {
  std::string s = header + "\n\n";
  s += fmt::format("Ceilings measured in this run: device-to-device copy {:.0f} GB/s (read + write), bf16 GEMM "
                   "{:.0f} TFLOP/s.\n\n", c.copy_gbps, c.gemm_tflops);
  s += "| section | what | time (ms) | bytes (GB) | GFLOP | achieved | bound | % of ceiling | note |\n";
  s += "|---|---|---:|---:|---:|---|---|---:|---|\n";
  for (const auto& r : rows)
    s += fmt::format("| {} | {} | {:.4f} | {:.3f} | {:.1f} | {} | {} | {:.1f}% | {} |\n", r.section, r.name, r.ms,
                     r.bytes / 1e9, r.flops / 1e9, rate(r), r.bound(c), 100 * r.fraction(c), r.note);
  return s;
}

}  // namespace rill::bench
