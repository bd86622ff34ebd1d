// Runs one sequence through a model split over ranks that are threads of this process (issue #17): the
// single-rank run and the sharded one see the same prompt (a prefill of two KDA chunks' worth of tokens, one
// step per chunk) and then decode greedily, each rank picking the argmax of its own (gathered) logits. Shared by the
// CPU test (thread communicator) and the CUDA one (ranks sharing one GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "dist/mapping.h"
#include "io/checkpoint.h"
#include "model/fixture.h"
#include "model/k3_checkpoint.h"
#include "model/model.h"
#include "model/sequence_session.h"
#include "model/taps.h"

namespace rill::testing {

// The test models: 4 KDA and 4 MLA heads and widths every tested mapping divides (K3's MXFP4 experts in whole
// 32-column scale groups up to expert-TP 4).

inline nlohmann::ordered_json shard_test_kimi_linear_config() {
  auto c = io::read_json_file(data_dir() / "kimi_linear_tiny_a" / "config.json");
  EXPECT_TRUE(c.ok());
  nlohmann::ordered_json j = *c;
  j["num_attention_heads"] = 4;
  j["num_key_value_heads"] = 4;
  j["linear_attn_config"]["num_heads"] = 4;
  j["num_shared_experts"] = 2;
  return j;
}

inline nlohmann::ordered_json shard_test_kimi_k3_config() {
  nlohmann::ordered_json j = model::tiny_kimi_k3_config(kTinyK3Vocab, 1, 2);
  auto& t = j["text_config"];
  t["num_attention_heads"] = 4;
  t["num_key_value_heads"] = 4;
  t["linear_attn_config"]["num_heads"] = 4;
  t["moe_intermediate_size"] = 128;  // 4 expert-TP ranks of 32 columns: one MXFP4 scale group each
  return j;
}

struct ShardFamily {
  const char* name;
  nlohmann::ordered_json (*config)();
};
inline const ShardFamily kShardFamilies[] = {{"kimi_linear", shard_test_kimi_linear_config}, {"kimi_k3", shard_test_kimi_k3_config}};

// What one rank runs: its backend and its tp and pp groups' communicators (null where the group is one rank).
struct RankSetup {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<dist::Communicator> tp_comm, pp_comm;
};
using RankFactory = std::function<Result<RankSetup>(const dist::Mapping&)>;

// One step's MoE routing decisions, by tap name ("L3.moe.ids", "L3.moe.weights"): global expert ids.
using Routing = std::map<std::string, std::vector<float>>;

// Every logits row the run produced (prefill rows, then one per decode step) and the greedy tokens; with
// Replay::record, each step's routing.
struct ShardedRun {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  std::vector<Routing> routing;
  Status status;
};

// What a bf16 run takes from the reference so that both compute the same function: decode feeds `tokens`
// (its greedy picks may differ at a near tie) and every step replays `routing` (top-k is discontinuous, so
// rounding noise flips near-tied experts: taps.h). A rank under expert parallelism gets the ids as its router
// writes them, local to its experts.
struct Replay {
  const std::vector<int32_t>* tokens = nullptr;
  const std::vector<Routing>* routing = nullptr;
  bool record = false;
};

inline Routing local_routing(const Routing& global, const model::ModelShard& shard, int n_experts) {
  if (shard.ep_size == 1) return global;
  Routing out = global;
  const int per = n_experts / shard.ep_size, begin = shard.ep_rank * per;
  for (auto& [name, values] : out)
    if (name.ends_with(".moe.ids"))
      for (float& v : values) v = (v >= begin && v < begin + per) ? v - float(begin) : -1.0f;
  return out;
}

inline ShardedRun run_one_rank(const RankFactory& factory, const dist::Mapping& mapping,
                               const std::filesystem::path& dir, const std::vector<int32_t>& prompt, int chunk,
                               int n_decode, const Replay& replay = {}) {
  ShardedRun out;
  auto fail = [&](Status s) {
    out.status = std::move(s);
    return out;
  };
  auto setup = factory(mapping);
  if (!setup.ok()) return fail(setup.status());
  model::LoadOptions opt;
  opt.shard = model::ModelShard::from_mapping(mapping, setup->tp_comm.get(), setup->pp_comm.get());
  auto m = model::load_model(dir, *setup->be, opt);
  if (!m.ok()) return fail(m.status());
  model::StepLimits lim;
  lim.max_tokens = 128;
  lim.max_seqs = 2;
  lim.max_logit_rows = 128;
  lim.max_context = 256;
  if (Status s = (*m)->reserve_workspace(lim); !s.ok()) return fail(s);
  auto session = model::SequenceSession::create(**m, 256);
  if (!session.ok()) return fail(session.status());
  model::TapRecorder taps;
  const bool tapping = replay.record || replay.routing;
  if (tapping) (*m)->set_tap_recorder(&taps);
  int step_index = 0;
  // One forward step of `ids`, its routing replayed or recorded.
  auto step = [&](std::span<const int32_t> ids, bool all) -> Result<std::vector<float>> {
    taps.clear();
    if (replay.routing) {
      if (size_t(step_index) >= replay.routing->size()) return internal_error("no routing for step {}", step_index);
      taps.set_overrides(local_routing((*replay.routing)[size_t(step_index)], opt.shard, (*m)->config().moe.n_experts));
    }
    ++step_index;
    auto l = session->feed(ids, int(ids.size()), all);
    if (l.ok() && replay.record) {
      Routing r;
      for (const auto& t : taps.taps())
        if (t.name.ends_with(".moe.ids") || t.name.ends_with(".moe.weights")) r[t.name] = t.values;
      out.routing.push_back(std::move(r));
    }
    return l;
  };
  for (size_t off = 0; off < prompt.size(); off += size_t(chunk)) {
    const size_t n = std::min(prompt.size() - off, size_t(chunk));
    auto l = step(std::span<const int32_t>(prompt.data() + off, n), true);
    if (!l.ok()) return fail(l.status());
    out.logits.insert(out.logits.end(), l->begin(), l->end());
  }
  const size_t V = size_t((*m)->config().vocab_size);
  for (int i = 0; i < n_decode; ++i) {
    const float* last = out.logits.data() + out.logits.size() - V;
    const int32_t next = int32_t(std::max_element(last, last + V) - last);
    out.tokens.push_back(next);
    const int32_t fed = replay.tokens ? (*replay.tokens)[size_t(i)] : next;
    auto l = step(std::span<const int32_t>(&fed, 1), false);
    if (!l.ok()) return fail(l.status());
    out.logits.insert(out.logits.end(), l->begin(), l->end());
  }
  (*m)->set_tap_recorder(nullptr);
  return out;
}

// Every rank's run, in rank order; a rank whose setup or step fails reports it (the others then fail at their
// next collective, naming it, rather than hanging).
inline std::vector<ShardedRun> run_sharded(const dist::ParallelSizes& sizes, const RankFactory& factory,
                                           const std::filesystem::path& dir, const std::vector<int32_t>& prompt,
                                           int chunk, int n_decode,
                                           const std::function<void(int, const Status&)>& on_failure = {},
                                           const Replay& replay = {}) {
  std::vector<ShardedRun> runs(static_cast<size_t>(sizes.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < sizes.world; ++r)
    threads.emplace_back([&, r] {
      auto mapping = dist::Mapping::make(sizes, r);
      if (!mapping.ok()) {
        runs[size_t(r)].status = mapping.status();
      } else {
        runs[size_t(r)] = run_one_rank(factory, *mapping, dir, prompt, chunk, n_decode, replay);
      }
      if (!runs[size_t(r)].status.ok() && on_failure) on_failure(r, runs[size_t(r)].status);
    });
  for (auto& t : threads) t.join();
  return runs;
}

// max |a - b| / max |reference|.
inline double relative_max_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < ref.size() && i < a.size(); ++i) {
    diff = std::max(diff, double(std::abs(a[i] - ref[i])));
    scale = std::max(scale, double(std::abs(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace rill::testing
