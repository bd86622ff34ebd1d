#include "bench/driver/executor_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "bench/driver/step_cost.h"

namespace rill::bench {
namespace {

constexpr int kBlock = 64;

int blocks_for(int tokens) { return (tokens + kBlock - 1) / kBlock; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

runner::RunnerOptions executor_bench_runner_options(const BenchOptions& o) {
  const int max_batch = std::max(1, *std::max_element(o.decode_batches.begin(), o.decode_batches.end()));
  runner::RunnerOptions r;
  r.max_batch_size = max_batch;
  r.max_num_tokens = std::max(o.prefill_long, max_batch);
  r.max_model_len = std::max(o.prefill_long, o.decode_context + 1);
  r.block_size = kBlock;
  r.num_kv_blocks = std::max(max_batch * blocks_for(o.decode_context + 1), blocks_for(o.prefill_long));
  r.enforce_eager = true;
  r.prefix.enabled = false;
  return r;
}

Result<std::vector<BenchRow>> bench_executor_steps(runner::Executor& ex, const BenchOptions& o,
                                                   const std::string& label) {
  const model::ModelConfig& c = ex.model().config();
  std::mt19937 rng(1);
  auto random_ids = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = int32_t(rng() % uint32_t(c.vocab_size));
    return v;
  };
  auto time_step = [&](const model::StepBatch& b, const std::string& name) -> Result<double> {
    std::fprintf(stderr, "  %s (%d runs) ...\n", name.c_str(), o.repeats + 1);
    runner::SamplingBatch sampling;
    sampling.rows.resize(size_t(b.n_logit_rows()));  // greedy
    std::vector<double> ms;
    for (int i = 0; i <= o.repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      RILL_TRY(ex.execute(b, sampling, cache::CacheOps{}).status());
      const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i) ms.push_back(t);  // the first run warms up
    }
    return median(ms);
  };
  const ParamCounts p = count_params(ex.model());  // rank 0's shard
  std::vector<BenchRow> rows;

  model::StepBatch prefill;
  model::SequenceStep q;
  q.n_new = o.prefill_long;
  for (int k = 0; k < blocks_for(o.prefill_long); ++k) q.block_table.push_back(k);
  prefill.token_ids = random_ids(o.prefill_long);
  prefill.seqs.push_back(q);
  const std::string pw = fmt::format("1 x {} tokens, {}", o.prefill_long, label);
  RILL_ASSIGN_OR_RETURN(const double pms, time_step(prefill, "sharded prefill " + pw));
  BenchRow pr{"sharded", "prefill " + pw, pms, 0, prefill_flops(ex.model(), p, o.prefill_long, {o.prefill_long}),
              ""};
  pr.tokens = o.prefill_long;
  pr.note = fmt::format("{:.0f} tokens/s; FLOPs: rank 0's share", pr.tokens / (pms * 1e-3));
  rows.push_back(pr);

  const int per_seq = blocks_for(o.decode_context + 1);
  for (int batch : o.decode_batches) {
    model::StepBatch b;
    for (int s = 0; s < batch; ++s) {
      model::SequenceStep d;
      d.start_pos = o.decode_context;
      d.n_new = 1;
      d.state_slot = s;
      for (int k = 0; k < per_seq; ++k) d.block_table.push_back(s * per_seq + k);
      b.token_ids.push_back(random_ids(1)[0]);
      b.seqs.push_back(std::move(d));
    }
    const std::string what = fmt::format("batch {} at {} context, {}", batch, o.decode_context, label);
    RILL_ASSIGN_OR_RETURN(const double ms, time_step(b, "sharded decode " + what));
    BenchRow r{"sharded", "decode " + what, ms, decode_bytes(ex.model(), p, batch, o.decode_context), 0, ""};
    r.tokens = batch;
    r.note = fmt::format("{:.0f} tokens/s; bytes: rank 0's shard and caches", batch / (ms * 1e-3));
    rows.push_back(r);
  }
  return rows;
}

}  // namespace rill::bench
