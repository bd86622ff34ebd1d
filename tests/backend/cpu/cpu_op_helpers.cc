#include "backend/cpu/cpu_op_helpers.h"

#include <cmath>

namespace rill::testing {

model::StepBatch make_step(const std::vector<StepSeq>& seqs, int block_size) {
  model::StepBatch b;
  for (const StepSeq& s : seqs) {
    model::SequenceStep st;
    st.start_pos = s.start_pos;
    st.n_new = s.n_new;
    st.state_slot = s.slot;
    st.kda_snapshots = s.snapshots;
    st.block_table = s.blocks;
    // Ops that read no cache still get a table that covers the context, as StepBatch requires.
    const size_t need = size_t((s.start_pos + s.n_new + block_size - 1) / block_size);
    if (st.block_table.size() < need) st.block_table.resize(need, 0);
    b.seqs.push_back(st);
    b.token_ids.resize(b.token_ids.size() + size_t(s.n_new), 0);
  }
  return b;
}

backend::BatchLayout cpu_layout(OpHarness& h, const model::StepBatch& batch, int block_size) {
  backend::BatchLayout l, unused;
  h.layouts(batch, block_size, &l, &unused);
  return l;
}

std::vector<float> slice(const std::vector<float>& v, size_t begin, size_t n) {
  return std::vector<float>(v.begin() + std::ptrdiff_t(begin), v.begin() + std::ptrdiff_t(begin + n));
}

std::vector<double> slice(const std::vector<double>& v, size_t begin, size_t n) {
  return std::vector<double>(v.begin() + std::ptrdiff_t(begin), v.begin() + std::ptrdiff_t(begin + n));
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

::testing::AssertionResult elementwise_near(const std::vector<float>& got, const std::vector<double>& want,
                                            double rel, double floor) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " values, the oracle has " << want.size();
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = rel * std::max(std::fabs(want[i]), floor);
    const double ratio =
        std::isnan(got[i]) || std::isnan(want[i]) ? INFINITY : std::fabs(got[i] - want[i]) / bound;
    if (ratio > worst) worst = ratio, at = i;
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << at << ": got " << got[at] << ", oracle " << want[at] << " (" << worst
         << " x the bound " << rel << " x max(|oracle|, " << floor << "))";
}

}  // namespace rill::testing
