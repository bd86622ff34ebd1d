// One benchmark result line and the two ways it is printed: a terminal table and a markdown table for
// docs/PERF.md. Every line carries the bytes and FLOPs it implies and its fraction of the measured ceiling.
#pragma once

#include <string>
#include <vector>

namespace rill::bench {

// Ceilings measured in the same run (design.md §7).
struct Ceilings {
  double copy_gbps = 0;     // device-to-device copy, bytes read + written per second / 1e9
  double gemm_tflops = 0;   // large bf16 GEMM through the backend (cuBLASLt on CUDA)
};

struct BenchRow {
  std::string section;  // "ceiling", "prefill", "decode", "op", "layer", "composed"
  std::string name;
  double ms = 0;
  double bytes = 0;  // bytes that must move (each input read once, each output written once)
  double flops = 0;
  std::string note;
  double tokens = 0;  // tokens a prefill step takes in or a decode step emits (for tokens/s; 0: not a step)
  // The fraction of the binding ceiling: max(bytes / copy, flops / gemm) time over the measured time.
  double fraction(const Ceilings& c) const;
  const char* bound(const Ceilings& c) const;  // "memory" or "compute"
};

// A measurement the backend cannot make yet (StatusCode::Unimplemented, e.g. a kernel path still missing): a
// row without a time that says why, so one missing path does not hide the rest of the report.
BenchRow not_run(std::string section, std::string name, const std::string& why);

std::string format_table(const std::vector<BenchRow>& rows, const Ceilings& c);
std::string format_markdown(const std::vector<BenchRow>& rows, const Ceilings& c, const std::string& header);

}  // namespace rill::bench
