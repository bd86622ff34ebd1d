// Speculative decoding's replay records on the CPU backend (kda_attention and kda_prepare writing records,
// kda_fold committing them; issue #36): for every accepted count 0..k, the state a fold commits against the
// double-precision reference of the KDA rollback lab (bench/kernels/kda_rollback.h, its own recurrence) and,
// bit for bit, against the CPU's in-place recurrence over only the committed tokens; the conv window a fold
// commits against kda_prepare's own window update over those tokens (exact copies). A step writing records
// must leave every state slot and conv window as it was, and its outputs must be the plain step's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bench/kernels/kda_rollback.h"
#include "model/step_batch.h"
#include "test_seed.h"

namespace rill::testing {
namespace {

namespace lab = rill::bench::kda_rollback;

constexpr int kHeads = 2, kDim = 64, kTokens = 5;  // k = 4 drafts: 5 fed tokens per verify step
constexpr int kSlots = 3;                          // sequences in slots 2 and 0; slot 1 belongs to nobody
constexpr int kSeqSlot[2] = {2, 0};
constexpr int kStart = 9;  // positions computed before the verify step
// The CPU's fp32 recurrence against the lab's double one: ~1e-7 relative per token; 5 tokens stay far below.
constexpr double kTol = 1e-5;

TensorView f32(std::vector<float>& v, Shape s) { return TensorView::make(v.data(), DType::F32, s); }
TensorView i32(std::vector<int32_t>& v) { return TensorView::make(v.data(), DType::I32, {int64_t(v.size())}); }

// The two sequences' step of `n` tokens each, marked for records or not.
model::StepBatch step(int n, bool records) {
  model::StepBatch b;
  for (int slot : kSeqSlot) {
    model::SequenceStep q;
    q.start_pos = kStart;
    q.n_new = n;
    q.state_slot = slot;
    q.block_table.assign(1, 0);
    q.logits = model::LogitsNeeded::None;
    q.kda_records = records;
    b.seqs.push_back(q);
    b.token_ids.resize(b.token_ids.size() + size_t(n), 0);
  }
  return b;
}

// Rows [0, n) of each sequence's kTokens rows of a [2 * kTokens, width] array.
std::vector<float> first_rows(const std::vector<float>& x, int n, size_t width) {
  std::vector<float> out;
  for (int s = 0; s < 2; ++s)
    out.insert(out.end(), x.begin() + std::ptrdiff_t(s * kTokens * width),
               x.begin() + std::ptrdiff_t((s * kTokens + n) * width));
  return out;
}

double rel_l2(const float* got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d, den += want[i] * want[i];
  }
  return std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-300)) : INFINITY;
}

struct Attention {
  lab::Inputs in;
  std::vector<float> state;  // [kSlots, Hk, d, d]
};

// The lab's inputs for the two sequences, their states placed in their slots, random bytes in slot 1.
Attention make_attention(uint32_t seed) {
  Attention a{lab::make_inputs(2, kTokens, kHeads, kDim, seed), {}};
  const size_t per_slot = size_t(kHeads) * kDim * kDim;
  a.state.resize(kSlots * per_slot);
  for (size_t i = 0; i < per_slot; ++i) a.state[per_slot + i] = float(std::sin(double(i)));
  for (int s = 0; s < 2; ++s)
    std::memcpy(&a.state[size_t(kSeqSlot[s]) * per_slot], &a.in.state0[size_t(s) * per_slot], per_slot * 4);
  return a;
}

// kda_attention over the first n tokens of each sequence, into `state` (records: into `records` instead).
Status run_attention(backend::Backend& be, Attention& a, int n, std::vector<float>& state, std::vector<float>* records,
                     std::vector<float>* out) {
  const model::StepBatch b = step(n, records != nullptr);
  backend::BatchLayoutHost host;
  RILL_TRY(b.to_layout(64, &host));
  backend::BatchLayout l;
  RILL_TRY(be.upload_layout(host, 64, &l));
  const int64_t T = 2 * n;
  const size_t w = size_t(kHeads) * kDim;
  std::vector<float> q = first_rows(a.in.q, n, w), k = first_rows(a.in.k, n, w), v = first_rows(a.in.v, n, w),
                     g = first_rows(a.in.g, n, w), beta = first_rows(a.in.beta, n, kHeads);
  out->assign(size_t(T) * w, NAN);
  const Shape act{T, kHeads, kDim};
  backend::KdaAttentionArgs args{f32(q, act), f32(k, act), f32(v, act), f32(g, act), f32(beta, {T, kHeads}),
                                 f32(state, {kSlots, kHeads, kDim, kDim}), &l, f32(*out, act), nullptr};
  if (records) args.records = f32(*records, {kSlots, kTokens, kHeads, 3, kDim});
  return be.kda_attention(args);
}

TEST(KdaRecordsCpu, FoldCommitsTheStateAfterEveryAcceptedCount) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  auto be = backend::make_cpu_backend();
  Attention a = make_attention(seed);
  const size_t per_slot = size_t(kHeads) * kDim * kDim;

  // The verify step with records: outputs as the plain step's (bit for bit) and the lab's; no slot changes.
  std::vector<float> state = a.state, records(size_t(kSlots) * kTokens * kHeads * 3 * kDim, NAN), out, plain_out;
  ASSERT_TRUE(run_attention(*be, a, kTokens, state, &records, &out).ok());
  EXPECT_EQ(state, a.state) << "a step writing records changed a state slot";
  std::vector<float> plain_state = a.state;
  ASSERT_TRUE(run_attention(*be, a, kTokens, plain_state, nullptr, &plain_out).ok());
  EXPECT_EQ(out, plain_out) << "outputs of the step with records differ from the plain step's";
  for (int s = 0; s < 2; ++s)
    for (int h = 0; h < kHeads; ++h) {
      const lab::HeadRun ref = lab::run_head(a.in, s, h, kTokens);
      for (int t = 0; t < kTokens; ++t) {
        const float* o = &out[((size_t(s) * kTokens + t) * kHeads + h) * kDim];
        EXPECT_LE(rel_l2(o, ref.outputs[size_t(t)]), kTol) << "output, seq " << s << " head " << h << " token " << t;
        const float* r = &records[((size_t(kSeqSlot[s]) * kTokens + t) * kHeads + h) * 3 * kDim];
        EXPECT_LE(rel_l2(r, ref.records[size_t(t)].bk), kTol) << "beta k, seq " << s << " token " << t;
        EXPECT_LE(rel_l2(r + kDim, ref.records[size_t(t)].alpha), kTol) << "alpha, seq " << s << " token " << t;
        EXPECT_LE(rel_l2(r + 2 * kDim, ref.records[size_t(t)].e), kTol) << "e, seq " << s << " token " << t;
      }
    }

  // Every accepted count a (a + 1 committed tokens): the fold against the lab's state after token a and the
  // CPU's own recurrence over the a + 1 tokens alone. A fold of 0 tokens leaves its slot alone.
  const int64_t C = 3 * kHeads * kDim;
  std::vector<float> conv(size_t(kSlots) * 3 * C, 0.0f), conv_records(size_t(kSlots) * kTokens * C, 0.0f);
  for (int acc = 0; acc < kTokens; ++acc) {
    SCOPED_TRACE("accepted " + std::to_string(acc));
    const int n = acc + 1;
    std::vector<float> folded = a.state;
    std::vector<int32_t> slots = {kSeqSlot[0], kSeqSlot[1], 1}, counts = {n, n, 0};
    const Status st = be->kda_fold({f32(records, {kSlots, kTokens, kHeads, 3, kDim}),
                                    f32(conv_records, {kSlots, kTokens, C}), f32(folded, {kSlots, kHeads, kDim, kDim}),
                                    f32(conv, {kSlots, 3, C}), i32(slots), i32(counts)});
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<float> direct = a.state, direct_out;
    ASSERT_TRUE(run_attention(*be, a, n, direct, nullptr, &direct_out).ok());
    EXPECT_EQ(folded, direct) << "the fold is not the recurrence over the committed tokens, bit for bit";
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < kHeads; ++h) {
        const lab::HeadRun ref = lab::run_head(a.in, s, h, n);
        EXPECT_LE(rel_l2(&folded[size_t(kSeqSlot[s]) * per_slot + size_t(h) * kDim * kDim], ref.states.back()), kTol)
            << "seq " << s << " head " << h;
      }
    EXPECT_TRUE(std::equal(folded.begin() + std::ptrdiff_t(per_slot), folded.begin() + std::ptrdiff_t(2 * per_slot),
                           a.state.begin() + std::ptrdiff_t(per_slot)))
        << "slot 1 (a fold of 0 tokens) changed";
  }
}

// kda_prepare over the first n tokens of each sequence (records: the inputs into conv_records, the windows
// kept) with the same inputs every call.
struct Prepare {
  int64_t P = int64_t(kHeads) * kDim;
  std::vector<float> qkv, graw, braw, conv_w, a_log, dt_bias, window;
  std::vector<float> k, v, g, beta;  // outputs the tests do not read
};

Prepare make_prepare(uint32_t seed) {
  Prepare p;
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, size_t n, float scale) {
    v.resize(n);
    for (float& x : v) x = scale * n01(rng);
  };
  fill(p.qkv, size_t(2 * kTokens * 3 * p.P), 1.0f);
  fill(p.graw, size_t(2 * kTokens * p.P), 1.0f);
  fill(p.braw, size_t(2 * kTokens * kHeads), 1.0f);
  fill(p.conv_w, size_t(3 * p.P * 4), 0.5f);
  fill(p.dt_bias, size_t(p.P), 0.5f);
  p.a_log.assign(kHeads, 0.0f);
  fill(p.window, size_t(kSlots * 3 * 3 * p.P), 1.0f);
  return p;
}

Status run_prepare(backend::Backend& be, Prepare& p, int n, std::vector<float>& window, std::vector<float>* conv_records,
                   std::vector<float>* q) {
  const model::StepBatch b = step(n, conv_records != nullptr);
  backend::BatchLayoutHost host;
  RILL_TRY(b.to_layout(64, &host));
  backend::BatchLayout l;
  RILL_TRY(be.upload_layout(host, 64, &l));
  const int64_t T = 2 * n, P = p.P;
  std::vector<float> qkv = first_rows(p.qkv, n, size_t(3 * P)), graw = first_rows(p.graw, n, size_t(P)),
                     braw = first_rows(p.braw, n, kHeads);
  std::vector<float>&k = p.k, &v = p.v, &g = p.g, &beta = p.beta;
  q->assign(size_t(T * P), NAN), k.assign(size_t(T * P), NAN), v.assign(size_t(T * P), NAN);
  g.assign(size_t(T * P), NAN), beta.assign(size_t(T * kHeads), NAN);
  backend::KdaPrepareArgs a;
  a.qkv = f32(qkv, {T, 3 * P});
  a.conv_weight = f32(p.conv_w, {3 * P, 4});
  a.conv_state = f32(window, {kSlots, 3, 3 * P});
  a.graw = f32(graw, {T, P});
  a.braw = f32(braw, {T, kHeads});
  a.a_log = f32(p.a_log, {kHeads});
  a.dt_bias = f32(p.dt_bias, {P});
  a.n_heads = kHeads;
  a.head_dim = kDim;
  a.layout = &l;
  a.q = f32(*q, {T, kHeads, kDim}), a.k = f32(k, {T, kHeads, kDim}), a.v = f32(v, {T, kHeads, kDim});
  a.g = f32(g, {T, kHeads, kDim}), a.beta = f32(beta, {T, kHeads});
  if (conv_records) a.conv_records = f32(*conv_records, {kSlots, kTokens, 3 * P});
  return be.kda_prepare(a);
}

TEST(KdaRecordsCpu, FoldMovesTheConvWindowAsTheCommittedTokensWould) {
  const uint32_t seed = test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  auto be = backend::make_cpu_backend();
  Prepare p = make_prepare(seed);
  const int64_t C = 3 * p.P;
  std::vector<float> window = p.window, conv_records(size_t(kSlots * kTokens * C), NAN), q, plain_q;
  ASSERT_TRUE(run_prepare(*be, p, kTokens, window, &conv_records, &q).ok());
  EXPECT_EQ(window, p.window) << "a step writing records changed a conv window";
  std::vector<float> plain_window = p.window;
  ASSERT_TRUE(run_prepare(*be, p, kTokens, plain_window, nullptr, &plain_q).ok());
  EXPECT_EQ(q, plain_q) << "conv outputs of the step with records differ from the plain step's";
  for (int s = 0; s < 2; ++s)
    for (int t = 0; t < kTokens; ++t)
      EXPECT_TRUE(std::equal(p.qkv.begin() + std::ptrdiff_t((s * kTokens + t) * C),
                             p.qkv.begin() + std::ptrdiff_t((s * kTokens + t + 1) * C),
                             conv_records.begin() + std::ptrdiff_t((kSeqSlot[s] * kTokens + t) * C)))
          << "conv record of seq " << s << " token " << t;

  std::vector<float> records(size_t(kSlots) * kTokens * kHeads * 3 * kDim, 0.0f),
      state(size_t(kSlots) * kHeads * kDim * kDim, 0.0f);
  for (int acc = 0; acc < kTokens; ++acc) {
    SCOPED_TRACE("accepted " + std::to_string(acc));
    const int n = acc + 1;
    std::vector<float> folded = p.window;
    std::vector<int32_t> slots = {kSeqSlot[0], kSeqSlot[1], 1}, counts = {n, n, 0};
    const Status st = be->kda_fold({f32(records, {kSlots, kTokens, kHeads, 3, kDim}),
                                    f32(conv_records, {kSlots, kTokens, C}), f32(state, {kSlots, kHeads, kDim, kDim}),
                                    f32(folded, {kSlots, 3, C}), i32(slots), i32(counts)});
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<float> direct = p.window, direct_q;
    ASSERT_TRUE(run_prepare(*be, p, n, direct, nullptr, &direct_q).ok());
    EXPECT_EQ(folded, direct) << "the folded windows are not those of a step over the committed tokens";
  }
}

TEST(KdaRecordsCpu, RefusesRecordsItCannotHold) {
  auto be = backend::make_cpu_backend();
  Attention a = make_attention(test_seed());
  std::vector<float> state = a.state, out;
  std::vector<float> small(size_t(kSlots) * (kTokens - 1) * kHeads * 3 * kDim);
  // Records of kTokens - 1 tokens cannot take a step of kTokens.
  const model::StepBatch b = step(kTokens, true);
  backend::BatchLayoutHost host;
  ASSERT_TRUE(b.to_layout(64, &host).ok());
  backend::BatchLayout l;
  ASSERT_TRUE(be->upload_layout(host, 64, &l).ok());
  const int64_t T = 2 * kTokens;
  const Shape act{T, kHeads, kDim};
  out.assign(size_t(T) * kHeads * kDim, 0.0f);
  backend::KdaAttentionArgs args{f32(a.in.q, act), f32(a.in.k, act), f32(a.in.v, act), f32(a.in.g, act),
                                 f32(a.in.beta, {T, kHeads}), f32(state, {kSlots, kHeads, kDim, kDim}), &l,
                                 f32(out, act), nullptr};
  EXPECT_FALSE(be->kda_attention(args).ok()) << "a marked sequence without records";
  args.records = f32(small, {kSlots, kTokens - 1, kHeads, 3, kDim});
  EXPECT_FALSE(be->kda_attention(args).ok()) << "a marked sequence longer than the records";
  // A step marked for records must start past position 0 and take no in-step snapshot.
  model::StepBatch fresh = step(kTokens, true);
  fresh.seqs[0].start_pos = 0;
  EXPECT_FALSE(fresh.to_layout(64, &host).ok());
}

}  // namespace
}  // namespace rill::testing
