// StepCosts: what decode and verify steps cost on this engine's device, measured as it serves, so the
// break-even rule (acceptance.h) can say how many accepted drafts a verify step needs to pay for itself.
//
// A verify step of q = k + 1 tokens per sequence emits 1 + a tokens for a accepted drafts, at r = t(verify) /
// t(decode) times a decode step's cost; it pays while 1 + a >= r, so the break-even is a = r - 1 accepted
// drafts per step. r is not a constant: at batch 1 on the 48B shape the five tokens of a k = 4 step read ~5x
// the experts a decode step reads (docs/PERF.md: 2.48x on an H100), at batch 64 the experts are read anyway
// (1.82x), and on the demo model the step is launch-bound (close to 1x). So r is measured here, per
// batch-size class (the decode graphs' buckets: powers of two, then the largest batch) and tokens per
// sequence.
//
// Only steps replayed from a captured graph are recorded (runner::StepOutput::replayed): their wall time is
// the steady state's, where an eager step's includes first-run work (cuBLASLt's algorithm timing, a capture)
// or is the CPU oracle's, whose costs say nothing about serving (and whose tests want no timing in them).
// Each key keeps its last kWindow samples; the cost is their median (a step that waited on the host's other
// work, a preempted thread, stays an outlier), known once kMinSamples are in.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace rill::engine::spec {

class StepCosts {
 public:
  static constexpr int kWindow = 16, kMinSamples = 4;

  // `max_batch_size`: the largest step, which sets the classes (runner::decode_graph_buckets).
  explicit StepCosts(int max_batch_size);

  // A step of `n_seqs` sequences bringing `q` tokens each (1: decode), replayed from a graph, took `seconds`
  // (its whole wall time: inputs, launches, sampling, the copy of its tokens back).
  void record(int n_seqs, int q, double seconds);
  // The measured cost of such a step (the median of its class's window), once kMinSamples are in.
  std::optional<double> seconds(int n_seqs, int q) const;
  // t(verify of q tokens a sequence) / t(decode) for a step of `n_seqs` sequences, once both are known.
  std::optional<double> verify_ratio(int n_seqs, int q) const;
  // The batch-size class of a step of `n_seqs` sequences (the smallest bucket that holds it).
  int batch_class(int n_seqs) const;

 private:
  struct Window {
    std::array<double, kWindow> s{};
    int n = 0;  // samples seen (the window holds the last min(n, kWindow))
  };
  std::vector<int> classes_;
  std::map<std::pair<int, int>, Window> windows_;  // by (batch class, q)
};

}  // namespace rill::engine::spec
