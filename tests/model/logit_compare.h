// The CUDA backend against the CPU reference at model level, shared by the Kimi Linear and Kimi K3 GPU tests
// (cuda_model_test.cc, cuda_k3_model_test.cc): per-position relative L2 and top-1 agreement of logits, a model
// loaded on both backends, runs with the GPU's routing decisions replayed into the CPU, and the bodies of the
// tap-by-tap, chunked-vs-one-shot and ragged-batch checks. Every check skips (GTEST_SKIP) without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/model.h"
#include "model/ragged_batch.h"
#include "model/shape_fuzz.h"
#include "model/taps.h"

namespace rill::testing {

// Model-level tolerances, CUDA (bf16 activations, fp32 residual stream) against the CPU (fp32): design.md §5
// asks for per-position relative L2 <= 2e-2 and top-1 agreement >= 98%. Measured on the tiny random Kimi
// Linear models (hidden 64-96, 4-5 layers; H200, 2026-11-30): median 0.9-1.1%, worst position 1.7-2.6%, top-1
// agreement 96.1-98.3%. The bf16 roundings of every projection, attention and expert output (~0.2-0.4% each)
// compound over the layers, and the flat logits of random weights put the top two tokens within that error at
// ~2-4% of the positions. transformers itself, run in bf16 against its fp32 run on the same fixtures
// (tools/reference/transformers_bf16_error.py, 2026-12-01), lands at median 1.2-1.9%, worst position 74-113%,
// top-1 92.6-97.6%: the design's worst-position and top-1 numbers are not reachable by a bf16 implementation
// on these models. So the design's bound applies to the median position, and the worst position and the
// top-1 agreement get a looser, stated bound; a real bug shows up as errors of order 1 (see the taps tests).
struct Bounds {
  double median, worst, top1;
};
inline constexpr Bounds kKimiLinearBounds{2e-2, 5e-2, 0.95};
// Kimi K3's tiny models (7-8 layers, AttnRes depth softmaxes, MXFP4 latent experts) amplify the same
// roundings further: measured (H200, 2026-12-01, routing replayed) median 1.9-3.1%, worst position 9-22%, top-1
// 92.7-95.5% against the CPU, and the GPU against itself (token-by-token vs one-shot, same routing) already
// differs by median 2.8-3.0%, worst 13-16%. The K3 reference built on transformers' modules, run in bf16
// against its fp32 run (tools/reference/kimi_k3_transformers.py --bf16-yardstick, same fixtures), lands at
// median 4.3-5.4%, worst 98-127%, top-1 77-89%. A wrong kernel moves the median to order 1.
inline constexpr Bounds kK3Bounds{6e-2, 0.4, 0.88};

// A model can be ill-conditioned for bf16 whatever the kernels do: on K3 checkpoints with sharp AttnRes depth
// softmaxes, rounding ONE intermediate (say every KDA layer's q) to bf16 on the CPU moves the worst position by
// order 1 (issue #15; measured with the run below). So every GPU comparison also measures, in the same run, the
// model's own bf16 yardstick: the CPU reference run again with each intermediate the GPU stores in bf16
// rounded to bf16 at its tap (TapRecorder::set_bf16_rounding). The GPU rounds more than the taps (inside ops,
// the latent cache) and sums in other orders, so it may move up to kYardstickFactor times as far (measured on
// 16 weight variants of the issue-#15 configuration, H200 2026-12-02: median 1.1-1.9x the yardstick's, top-1
// misses up to 2.5x); the bounds widen to that when it is larger and never narrow. A wrong kernel still fails: it moves the GPU by order 1
// where bf16 storage alone moves the CPU by ~1%.
inline constexpr double kYardstickFactor = 3.0;

struct Compare {
  double worst_rel_l2 = 0;
  std::vector<double> rel;  // per position
  int agree = 0, total = 0;
  double median() const;
};

// Per-position relative L2 and top-1 agreement of `got` against `ref`, both [rows * V], added to `c`.
void compare_rows(const std::vector<float>& got, const std::vector<float>& ref, int64_t V, Compare* c);
// Positions whose top-1 differs between `got` and `ref` only at a near tie: the reference's own margin between
// its top-1 and got's top-1 is at most rel_tol of the row's largest |logit|. Two bf16 runs that sum in different
// orders (a sharded model against one rank) flip such positions of a random model's flat logits with no bug;
// a wrong kernel flips positions with clear margins.
int count_near_ties(const std::vector<float>& got, const std::vector<float>& ref, int64_t V, double rel_tol);

// EXPECTs the three model-level bounds `b` on `c`; `what` names the comparison in failures.
void expect_within_bounds(const Compare& c, const std::string& what, const Bounds& b = kKimiLinearBounds);
// `b` widened to kYardstickFactor times what `yardstick` (the bf16-rounded CPU run against the CPU) measured.
Bounds widened_by(const Bounds& b, const Compare& yardstick);
// Prints `c` (GPU against the CPU) beside its yardstick.
void print_comparison(const std::string& what, const Compare& c, const Compare& yardstick);

// One model on the CPU reference and on the GPU.
struct Pair {
  std::unique_ptr<backend::Backend> cpu, gpu;
  std::unique_ptr<model::Model> cpu_model, gpu_model;
};

// Loads `dir` on both backends (workspace for steps of up to 256 tokens, 8 sequences, contexts of 512);
// returns false (and a reason) when the GPU backend is missing.
bool load_pair(const std::filesystem::path& dir, Pair* p, std::string* why);

// Routing decisions (expert ids and weights) of the taps of one step.
std::map<std::string, std::vector<float>> routing_of(const model::TapRecorder& r);

// Logits of every position of one run: the GPU, the CPU, and the CPU with the GPU's bf16 storage (yardstick).
struct ReplayedLogits {
  std::vector<float> gpu, cpu, cpu_bf16;
};

// Feeds `ids` to a fresh sequence on each model, one step per entry of `pieces` (token counts summing to
// ids.size(); empty: one step), the GPU first; before each CPU step the GPU step's routing decisions are
// replayed into the CPU runs (taps.h explains why). The second CPU run rounds to bf16 every tap the GPU step
// stored in bf16.
ReplayedLogits run_replayed(Pair& p, const std::vector<int32_t>& ids, const std::vector<int>& pieces);

// `n` tokens as steps of `chunk` (the last one shorter).
std::vector<int> chunks_of(int n, int chunk);

// One token sequence fed in the given steps (see run_replayed).
struct ReplayedRun {
  std::vector<int32_t> ids;
  std::vector<int> pieces;
};

// Loads `dir` on both backends, runs every entry of `runs` through run_replayed, and expects the model-level
// bounds over all positions together (printed per checkpoint).
void expect_gpu_matches_cpu(const std::filesystem::path& dir, const std::vector<ReplayedRun>& runs,
                            const Bounds& b = kKimiLinearBounds);

// Models drawn by `draw` (shape_fuzz.h) from the test seed, one per run or RILL_FUZZ_RUNS=N of them (seeds
// seed, seed + 1, ...): each written as a random checkpoint, loaded on both backends and fed prompts of 1, 9, 64
// and 130 tokens with 8 decode steps each (routing replayed), within `b`; prints each seed, shape and result, and
// with several runs the spread of the per-model median, worst and top-1.
void expect_fuzzed_models_match(const std::function<FuzzedShape(std::mt19937&)>& draw, const Bounds& b,
                                const std::string& tag);

// Every named intermediate of a forward pass, CUDA against the CPU, in order, for each step of `pieces`
// ({offset, count} into `ids`, fed to one sequence): names the first tensor that diverges beyond b.worst
// (the debugging aid style.md §7.2 asks for) and prints the six largest errors of each step.
void expect_taps_match(const std::filesystem::path& dir, const std::vector<int32_t>& ids,
                       const std::vector<std::pair<size_t, size_t>>& pieces, const Bounds& b = kKimiLinearBounds);

// Chunked and token-by-token prefill against one-shot, on one model: the one-shot run's routing decisions
// are replayed, row by row, into each chunked run (taps.h explains why), so the comparison is of everything else.
void expect_chunked_matches_one_shot(model::Model& m, const std::vector<int32_t>& ids,
                                     const std::vector<int>& chunks, const Bounds& b = kKimiLinearBounds);

// The GPU form of ragged_batch.h's check: the same steps (state slots in the reverse order of the sequences),
// but batching may change cuBLAS's algorithm and the MoE path (gathered or grouped, by the step's pairs), so
// the batched logits equal each sequence's alone up to bf16 rounding: worst relative L2 <= bounds.worst and
// the same top-1 token at every position.
void expect_ragged_batch_close_to_alone(backend::Backend& be, model::Model& model,
                                        const std::vector<std::vector<int32_t>>& tokens,
                                        const std::vector<std::vector<RaggedPiece>>& steps,
                                        const Bounds& bounds = kKimiLinearBounds);

}  // namespace rill::testing
