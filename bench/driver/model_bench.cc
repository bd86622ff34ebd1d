// Prefill and decode steps of a whole model (dummy or real weights) through Model::forward.
#include "bench/driver/model_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "bench/driver/step_cost.h"
#include "runner/decode_graphs.h"

namespace rill::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Status fill_caches(backend::Backend& be, const model::ModelCaches& caches) {
  uint64_t seed = 100;
  for (const auto& L : caches.layers) {
    if (!L.mla_kv.empty()) RILL_TRY(be.fill_random(L.mla_kv, seed++, -1.0f, 1.0f));
    if (!L.kda_state.empty()) RILL_TRY(be.fill_random(L.kda_state, seed++, -0.02f, 0.02f));
    if (!L.kda_conv.empty()) RILL_TRY(be.fill_random(L.kda_conv, seed++, -1.0f, 1.0f));
  }
  return {};
}

}  // namespace

Result<std::vector<BenchRow>> bench_model(model::Model& m, const BenchOptions& o) {
  auto& be = m.backend();
  const auto& c = m.config();
  const int block = 64;
  int max_batch = *std::max_element(o.decode_batches.begin(), o.decode_batches.end());
  const int max_drafts = o.verify_drafts.empty() ? 0 : *std::max_element(o.verify_drafts.begin(), o.verify_drafts.end());
  if (max_drafts > 0 && !o.verify_batches.empty())
    max_batch = std::max(max_batch, *std::max_element(o.verify_batches.begin(), o.verify_batches.end()));
  const int decode_blocks = (o.decode_context + 1 + max_drafts + block - 1) / block;
  const int prefill_blocks = (o.prefill_long + block - 1) / block + o.prefill_batch * ((o.prefill_short + block - 1) / block);
  model::StepLimits lim;
  lim.max_tokens = std::max({o.prefill_long, o.prefill_batch * o.prefill_short, max_batch * (max_drafts + 1)});
  lim.max_seqs = std::max(max_batch, o.prefill_batch);
  lim.max_logit_rows = std::max(lim.max_seqs, max_batch * (max_drafts + 1));
  lim.max_context = std::max(o.prefill_long, o.decode_context + 1 + max_drafts);
  RILL_TRY(m.reserve_workspace(lim));
  // One state slot and one MLA block past the benchmark's own: the decode graphs' padding rows.
  const int n_slots = lim.max_seqs, n_blocks = std::max(max_batch * decode_blocks, prefill_blocks);
  RILL_ASSIGN_OR_RETURN(model::ModelCaches caches, model::ModelCaches::allocate(be, c, n_slots + 1, n_blocks + 1, block));
  RILL_TRY(fill_caches(be, caches));
  std::optional<runner::DecodeGraphs> graphs;
  if (be.can_capture()) {
    RILL_ASSIGN_OR_RETURN(runner::DecodeGraphs g,
                          runner::DecodeGraphs::create(be, max_batch, lim.max_context, block, n_slots, n_blocks,
                                                               true, 1 + max_drafts));
    graphs = std::move(g);
  }
  const ParamCounts p = count_params(m);
  std::mt19937 rng(1);
  auto random_ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = int32_t(rng() % uint32_t(c.vocab_size));
    return v;
  };
  std::vector<BenchRow> rows;
  // `name` labels the timed (not the warm-up) runs for profilers: ncu --nvtx --nvtx-include "<name>/".
  auto time_step = [&](const model::StepBatch& b, bool sample, const std::string& name,
                       bool graphed = false) -> Result<double> {
    // Progress: on the CPU one step can take seconds, so each measurement says what it is about to run.
    std::fprintf(stderr, "  %s (%d runs) ...\n", name.c_str(), o.repeats + 1);
    std::vector<double> ms;
    std::vector<backend::SamplingRow> srows(size_t(b.n_logit_rows()));
    std::vector<int32_t> ids;
    for (int i = 0; i <= o.repeats; ++i) {
      if (i) be.trace_push(name.c_str());
      auto t_or = be.time_ms([&]() -> Status {
        RILL_ASSIGN_OR_RETURN(TensorView logits, graphed ? graphs->run(m, caches, b) : m.forward(b, caches));
        if (sample) return m.sample(logits, srows, &ids);
        return {};
      });
      if (i) be.trace_pop();
      RILL_ASSIGN_OR_RETURN(double t, std::move(t_or));
      if (i) ms.push_back(t);  // the first run warms up (cuBLASLt heuristics, module load)
    }
    return median(ms);
  };

  // Prefill: one long prompt, then a batch of shorter prompts in one step (prefill_batch 0: none).
  for (const auto& [n_seq, len] : {std::pair{1, o.prefill_long}, std::pair{o.prefill_batch, o.prefill_short}}) {
    if (n_seq < 1) continue;
    model::StepBatch b;
    int next_block = 0;
    for (int s = 0; s < n_seq; ++s) {
      model::SequenceStep q;
      q.n_new = len;
      q.state_slot = s;
      for (int k = 0; k < (len + block - 1) / block; ++k) q.block_table.push_back(next_block++);
      auto ids = random_ids(len);
      b.token_ids.insert(b.token_ids.end(), ids.begin(), ids.end());
      b.seqs.push_back(q);
    }
    const std::string what = fmt::format("{} x {} tokens", n_seq, len);
    auto ms = time_step(b, false, "prefill " + what);
    if (!ms.ok() && ms.status().code() == StatusCode::Unimplemented) {
      rows.push_back(not_run("prefill", what, ms.status().message()));
      continue;
    }
    RILL_TRY(ms.status());
    BenchRow r{"prefill", what, *ms, 0, 0, ""};
    r.flops = prefill_flops(m, p, int64_t(n_seq) * len, std::vector<int>(size_t(n_seq), len));
    r.bytes = p.dense_bytes + p.lm_head_bytes + p.one_expert_bytes * c.moe.n_experts *
                                                    double(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Moe));
    r.note = fmt::format("{:.0f} tokens/s", double(n_seq) * len / (*ms * 1e-3));
    r.tokens = double(n_seq) * len;
    rows.push_back(r);
  }

  // Every sequence adds 1 + drafts tokens at position `decode_context` (logits at each with drafts).
  auto decode_batch = [&](int batch, int drafts) {
    model::StepBatch b;
    for (int s = 0; s < batch; ++s) {
      model::SequenceStep q;
      q.start_pos = o.decode_context;
      q.n_new = 1 + drafts;
      q.state_slot = s;
      if (drafts > 0) {
        q.logits = model::LogitsNeeded::LastN;
        q.n_logits = 1 + drafts;
      }
      for (int k = 0; k < decode_blocks; ++k) q.block_table.push_back(s * decode_blocks + k);
      const std::vector<int32_t> ids = random_ids(1 + drafts);
      b.token_ids.insert(b.token_ids.end(), ids.begin(), ids.end());
      b.seqs.push_back(q);
    }
    return b;
  };

  // Decode at a fixed context: every sequence adds one token at position `decode_context`.
  for (int batch : o.decode_batches) {
    const model::StepBatch b = decode_batch(batch, 0);
    const std::string what = fmt::format("batch {} at {} context", batch, o.decode_context);
    auto ms = time_step(b, true, "decode " + what);
    if (!ms.ok() && ms.status().code() == StatusCode::Unimplemented) {
      rows.push_back(not_run("decode", what, ms.status().message()));
      continue;
    }
    RILL_TRY(ms.status());
    BenchRow r{"decode", what, *ms, 0, 0, ""};
    r.bytes = decode_bytes(m, p, batch, o.decode_context);
    r.flops = 2.0 * batch * (p.dense + p.lm_head + c.moe.n_experts_per_token * p.one_expert *
                                                       double(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Moe)));
    r.note = fmt::format("{:.0f} tokens/s", batch / (*ms * 1e-3));
    r.tokens = batch;
    rows.push_back(r);
    // The same step replayed from a CUDA graph (what serving runs; the first run captures it).
    if (graphs && graphs->bucket(m, b) > 0) {
      RILL_ASSIGN_OR_RETURN(const double g_ms, time_step(b, true, "decode graph " + what, true));
      BenchRow g = r;
      g.name = what + ", graph";
      g.ms = g_ms;
      g.note = fmt::format("{:.0f} tokens/s; eager {:.3f} ms", batch / (g_ms * 1e-3), *ms);
      rows.push_back(g);
    }
  }

  // Verify steps beside the plain decode step of the same batch, each replayed from its graph where the
  // backend captures (what serving runs: a verify step whose sequences bring the same draft count replays
  // its (batch bucket, k + 1) graph), eagerly otherwise; the note gives the eager times too.
  for (int batch : max_drafts > 0 ? o.verify_batches : std::vector<int>{}) {
    const model::StepBatch plain = decode_batch(batch, 0);
    const std::string at = fmt::format("batch {} at {} context", batch, o.decode_context);
    auto base = time_step(plain, true, "verify base " + at);
    if (!base.ok() && base.status().code() == StatusCode::Unimplemented) break;
    RILL_TRY(base.status());
    double graph_ms = 0;
    if (graphs && graphs->bucket(m, plain) > 0) {
      RILL_ASSIGN_OR_RETURN(graph_ms, time_step(plain, true, "verify base graph " + at, true));
    }
    for (int k : o.verify_drafts) {
      const model::StepBatch b = decode_batch(batch, k);
      const std::string what = fmt::format("k = {}, {}", k, at);
      const double bytes = decode_bytes(m, p, batch * (k + 1), o.decode_context) -
                           double(batch) * k * (2.0 * double(c.kda_state_bytes_per_sequence()) +
                                                double(o.decode_context) * double(c.kv_bytes_per_token(2)));
      // Eager, then replayed from its (batch bucket, k + 1) graph where the backend captures (what the runner
      // runs), each against the decode step run the same way. The oracle bound: a drafter always right emits
      // k + 1 tokens per verify step where decoding emits one per decode step (the drafter's own cost and
      // scheduling not counted).
      RILL_ASSIGN_OR_RETURN(const double eager_ms, time_step(b, true, "verify " + what));
      BenchRow r{"verify", what, eager_ms, bytes, 0,
                 fmt::format("{:.2f}x the eager decode step ({:.3f} ms); oracle bound {:.2f}x", eager_ms / *base,
                             *base, double(k + 1) * *base / eager_ms)};
      if (graph_ms > 0 && graphs->bucket(m, b) > 0) {
        rows.push_back(r);
        RILL_ASSIGN_OR_RETURN(const double ms, time_step(b, true, "verify graph " + what, true));
        r.name = what + ", graph";
        r.ms = ms;
        r.note = fmt::format("{:.2f}x the decode step's graph ({:.3f} ms); oracle bound {:.2f}x", ms / graph_ms,
                             graph_ms, double(k + 1) * graph_ms / ms);
      }
      rows.push_back(r);
    }
  }
  return rows;
}

Result<std::vector<BenchRow>> bench_layer_kinds(backend::Backend& be, const model::ModelConfig& c,
                                                const BenchOptions& o, uint64_t seed) {
  // Sub-slices of `c`: its first layer alone, and its first layer followed by one layer of each kind. Every
  // layer takes the FFN of the model's last layer (the MoE in every Kimi model).
  auto label = [](model::LayerKind k) { return k == model::LayerKind::Kda ? "KDA" : "MLA"; };
  auto slice = [&](std::vector<model::LayerKind> kinds) {
    model::ModelConfig s = c;
    s.n_layers = int(kinds.size());
    s.layer_kinds = std::move(kinds);
    // Layer 0 keeps the model's own FFN (Kimi Linear's dense MLP), so the composed rows below add up to the
    // model; the marginal layer rows are the same either way.
    s.ffn_kinds.assign(s.layer_kinds.size(), c.ffn_kinds.back());
    s.ffn_kinds.front() = c.ffn_kinds.front();
    return s;
  };
  auto bench_slice = [&](const model::ModelConfig& s) -> Result<std::vector<BenchRow>> {
    std::string kinds;
    for (model::LayerKind k : s.layer_kinds) kinds += fmt::format("{}{}", kinds.empty() ? "" : ", ", label(k));
    std::fprintf(stderr, "per layer type: a %d-layer slice (%s), dummy weights ...\n", s.n_layers, kinds.c_str());
    RILL_ASSIGN_OR_RETURN(auto m, model::load_dummy_model(s, be, seed));
    return bench_model(*m, o);  // the model and its workspace are freed before the next slice loads
  };
  const model::LayerKind first = c.layer_kinds.front();
  RILL_ASSIGN_OR_RETURN(const std::vector<BenchRow> base, bench_slice(slice({first})));
  std::vector<BenchRow> rows;
  // The whole model composed from the slices: the first-layer slice (embedding, layer 0, lm_head, sampling)
  // plus one marginal layer of its kind for every later layer. What a GPU too small for the model's weights
  // can measure; the interaction between layers (caches, L2) is not in it, so these rows say "composed".
  std::vector<BenchRow> composed = base;
  std::vector<bool> composable(base.size(), true);
  std::string recipe = fmt::format("composed: {} slice", label(first));
  for (model::LayerKind kind : {model::LayerKind::Kda, model::LayerKind::Mla}) {
    if (c.n_layers_of(kind) == 0) continue;
    const int later = c.n_layers_of(kind) - (kind == first ? 1 : 0);
    recipe += fmt::format(" + {} x {} layer", later, label(kind));
    RILL_ASSIGN_OR_RETURN(const std::vector<BenchRow> two, bench_slice(slice({first, kind})));
    for (size_t i = 0; i < base.size(); ++i) {
      if (i >= two.size() || two[i].ms <= 0 || base[i].ms <= 0 || two[i].name != base[i].name) {
        composable[i] = false;
        if (i >= two.size()) continue;
      }
      const std::string name = fmt::format("{} layer: {} {}", label(kind), two[i].section, two[i].name);
      if (two[i].ms <= 0 || base[i].ms <= 0) {
        rows.push_back(not_run("layer", name, two[i].ms <= 0 ? two[i].note : base[i].note));
        continue;
      }
      const BenchRow marginal{"layer", name, two[i].ms - base[i].ms, two[i].bytes - base[i].bytes,
                              two[i].flops - base[i].flops,
                              fmt::format("({} + {} slice) - ({} slice)", label(first), label(kind), label(first))};
      rows.push_back(marginal);
      composed[i].ms += later * marginal.ms;
      composed[i].bytes += later * marginal.bytes;
      composed[i].flops += later * marginal.flops;
    }
  }
  for (size_t i = 0; i < composed.size(); ++i) {
    const BenchRow& b = composed[i];
    if (!composable[i] || (b.section != "prefill" && b.section != "decode" && b.section != "verify")) continue;
    BenchRow r = b;
    r.section = "composed";
    r.name = fmt::format("{} {}", b.section, b.name);
    r.note = b.tokens > 0 ? fmt::format("{:.0f} tokens/s; {}", b.tokens / (b.ms * 1e-3), recipe) : recipe;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace rill::bench
