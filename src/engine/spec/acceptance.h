// Acceptance of a verify step (../shared/spec/speculative.md §4): the step fed the sequence's last token and
// k drafts d_1..d_k, and the sampler drew one token x_j at each of those k + 1 positions from the row's
// processed distribution p_j (penalties, masks, temperature, top-k/top-p/min-p applied exactly as a step per
// token would, with the draw counter of that output position). Draft d_{j+1} is accepted while it equals
// x_j; the emitted tokens are the accepted drafts and then x_j at the first mismatch, or after all k the
// bonus token x_k — so a step emits 1 to k + 1 tokens.
//
// Why this is the standard speculative-sampling rule (Leviathan et al. 2023, Chen et al. 2023; vLLM's
// rejection_sampler.py) for drafters without a distribution (n-gram, suffix, a greedy draft model): their q
// is a point mass at the draft d. The standard rule accepts d with probability min(1, p(d) / q(d)) = p(d) and
// on rejection samples from norm(max(0, p - q)), which is p with d removed, renormalised: r(x) = p(x) /
// (1 - p(d)) for x != d, r(d) = 0. Drawing x ~ p and accepting iff x == d gives the same joint law: P(accept)
// = p(d), and conditioned on x != d, x is distributed p(x) / (1 - p(d)) = r(x). So each emitted token has
// law p_j: the output distribution is unchanged. Row j's p_j is conditioned on d_1..d_j, which are only used
// when accepted, i.e. when they are the tokens drawn — the prefix a step per token would have had. With the
// draw counter of the position (uniform01(seed, n_generated + j)) x_j is even the very token that run draws:
// seeded requests give the same tokens with and without speculation. Greedy is the case p_j = argmax.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace rill::engine::spec {

struct Acceptance {
  int n_accepted = 0;            // drafts accepted, 0..k
  std::vector<int32_t> emitted;  // n_accepted drafts + 1 token
};

// `sampled`: the k + 1 tokens drawn at the verify positions, `drafts`: the k drafts fed after the last token.
Acceptance accept_drafts(std::span<const int32_t> drafts, std::span<const int32_t> sampled);

// Break-even (speculative.md §3: speculation slower than plain decode when drafts are rarely accepted; a
// sequence whose acceptance stays low should stop): an exponential moving average of the drafts accepted
// per verify step (weight `weight` for the newest step, the first step's value to start). Once at least
// `min_steps` verify steps are seen and the average is below the break-even, speculation stops for the
// sequence for good (its later steps are plain decode steps; its output is the same either way).
// The break-even: a verify step costing r decode steps emits 1 + a tokens for a accepted drafts, so it pays
// while a >= r - 1. Where the engine has measured r for the step's batch-size class and draft count
// (StepCosts: graph replays, i.e. the GPU), the break-even is r - 1 (`measured`); until then, and where
// nothing is measured (the CPU, --enforce-eager), it is `break_even`. Why 0.5 there: a verify step of k + 1
// tokens costs at least one decode step; TokenSpeed measured K3 speculation at 0.55x of plain decode at batch
// 1, and the CPU is no guide. 8 steps and weight 0.25 let a bad start recover and fire within ~8 steps of a
// drafter gone wrong. (vLLM turns speculation off by batch size, `disable_by_batch_size`; this is per
// sequence and by acceptance.) Per sequence, r - 1 is the batch's break-even, not the sequence's own: in a
// step of several sequences one that stops speculating saves the step only its share of the extra tokens.
struct BreakEvenRule {
  int min_steps = 8;
  double weight = 0.25;
  double break_even = 0.5;  // accepted drafts per verify step, where no cost ratio is measured
  bool measured = true;     // use r - 1 for a measured cost ratio r (false: always `break_even`)

  // Accepted drafts per verify step below which speculation does not pay, for the measured verify / decode
  // cost ratio (if any) of the step.
  double threshold(std::optional<double> verify_ratio) const {
    return measured && verify_ratio ? std::max(*verify_ratio - 1, 0.0) : break_even;
  }
};

class AcceptanceAverage {
 public:
  // Records a verify step that fed drafts and accepted `n_accepted`; false once speculation should stop.
  // `verify_ratio`: the measured cost of that step in decode steps, if known (BreakEvenRule::threshold).
  bool observe(int n_accepted, const BreakEvenRule& rule, std::optional<double> verify_ratio = std::nullopt) {
    mean_ = n_steps_ == 0 ? n_accepted : (1 - rule.weight) * mean_ + rule.weight * n_accepted;
    ++n_steps_;
    return n_steps_ < rule.min_steps || mean_ >= rule.threshold(verify_ratio);
  }
  double mean() const { return mean_; }

 private:
  double mean_ = 0;
  int n_steps_ = 0;
};

}  // namespace rill::engine::spec
