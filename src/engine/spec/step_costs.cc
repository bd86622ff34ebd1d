#include "engine/spec/step_costs.h"

#include <algorithm>

#include "runner/decode_graphs.h"

namespace rill::engine::spec {

StepCosts::StepCosts(int max_batch_size)
    : classes_(runner::decode_graph_buckets(std::max(max_batch_size, 1))) {}

int StepCosts::batch_class(int n_seqs) const {
  for (int b : classes_)
    if (b >= n_seqs) return b;
  return classes_.back();
}

void StepCosts::record(int n_seqs, int q, double seconds) {
  if (n_seqs < 1 || q < 1 || !(seconds > 0)) return;
  Window& w = windows_[{batch_class(n_seqs), q}];
  w.s[size_t(w.n % kWindow)] = seconds;
  ++w.n;
}

std::optional<double> StepCosts::seconds(int n_seqs, int q) const {
  const auto it = windows_.find({batch_class(n_seqs), q});
  if (it == windows_.end() || it->second.n < kMinSamples) return std::nullopt;
  const Window& w = it->second;
  std::vector<double> s(w.s.begin(), w.s.begin() + std::min(w.n, kWindow));
  const size_t mid = s.size() / 2;
  std::nth_element(s.begin(), s.begin() + long(mid), s.end());
  if (s.size() % 2 == 1) return s[mid];
  const double upper = s[mid];
  return (upper + *std::max_element(s.begin(), s.begin() + long(mid))) / 2;
}

std::optional<double> StepCosts::verify_ratio(int n_seqs, int q) const {
  const std::optional<double> verify = seconds(n_seqs, q), decode = seconds(n_seqs, 1);
  if (!verify || !decode) return std::nullopt;
  return *verify / *decode;
}

}  // namespace rill::engine::spec
