// Cross-backend tests of Kimi Delta Attention (src/backend/{cpu,cuda}/kda*): kda_prepare (conv window, gates,
// beta) and kda_attention (recurrent step for n_new == 1, chunked path otherwise) against the CPU reference,
// for both gate forms, tiny (Hk = 2) and real (Hk = 32) head counts, single sequences of 1..1000 tokens,
// state carried across calls, ragged batches mixing decode and prefill with shuffled slots, and split vs
// one-shot input on the GPU. Outputs are NaN-poisoned, the attention scratch is filled with NaN bytes, and
// state slots that no sequence uses must come back unchanged.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/op_harness.h"
#include "backend/workspace_planner.h"

namespace rill::testing {
namespace {

constexpr int kD = 128, kK = 4;
constexpr const char* kTested = "cuda";
// CUDA attention: bf16 tensor-core operands (W, U, Qg, Kd, V_new and the state as a product operand) with
// fp32 accumulation and fp32 state, as in FLA; an fp64 model of the kernels gives ~3-4e-3 on these inputs.
constexpr double kAttnTol = 1e-2;
// CUDA prepare rounds q/k/v to bf16 (the CPU keeps fp32): ~1.1e-3 rms relative.
constexpr double kConvTol = 3e-3;
constexpr double kGateTol = 1e-5;  // fp32 both sides, libm vs CUDA exp/log1p
// Fused decode vs the GPU's separate ops: the same roundings except graw's and the gate's sums, which run
// in another order (a bf16 rounding of graw may land one ulp apart).
constexpr double kFusedTol = 2e-3;

enum class Gate { Softplus, SoftplusMild, Bounded };
const char* gate_name(Gate g) {
  switch (g) {
    case Gate::Softplus:
      return "softplus";
    case Gate::SoftplusMild:
      return "softplus-mild";
    case Gate::Bounded:
      return "bounded";
  }
  return "?";
}

struct Seq {
  int start_pos, n_new, slot;
  std::vector<model::KdaSnapshotRequest> snaps = {};  // in-step snapshots (prefix caching): {pos, slot}
  bool records = false;                               // writes replay records (speculative decoding)
};

model::StepBatch make_batch(const std::vector<Seq>& seqs) {
  model::StepBatch b;
  for (const Seq& s : seqs) {
    model::SequenceStep st;
    st.start_pos = s.start_pos;
    st.n_new = s.n_new;
    st.state_slot = s.slot;
    st.kda_snapshots = s.snaps;
    st.kda_records = s.records;
    st.block_table.assign(size_t((s.start_pos + s.n_new + 63) / 64), 0);
    b.seqs.push_back(st);
    b.token_ids.resize(b.token_ids.size() + size_t(s.n_new), 0);
  }
  return b;
}

std::vector<float> slice(const std::vector<float>& v, size_t begin, size_t n) {
  return std::vector<float>(v.begin() + std::ptrdiff_t(begin), v.begin() + std::ptrdiff_t(begin + n));
}

// A_log per head and dt_bias per channel as in a real checkpoint; Mild makes the decays slow enough that
// the CUDA intra-chunk phase takes its factored (tensor-core) path for the diagonal blocks with softplus too.
struct GateParams {
  std::vector<float> a_log, dt_bias;
  std::optional<float> lower_bound;
};

GateParams gate_params(OpHarness& h, int heads, Gate gate) {
  GateParams p;
  const bool mild = gate == Gate::SoftplusMild;
  for (float u : h.uniform(heads, mild ? 0.01f : 0.5f, mild ? 0.1f : 4.0f, false))
    p.a_log.push_back(std::log(u));
  p.dt_bias = h.randn(int64_t(heads) * kD, 0.5f, false);
  if (gate == Gate::Bounded) p.lower_bound = -5.0f;
  return p;
}

// Log-decay g [T, heads, d] from graw ~ N(0, 1), the same formulas as the backends (spec §3.3 step 3).
std::vector<float> make_g(OpHarness& h, const GateParams& p, int64_t T, int heads) {
  const std::vector<float> graw = h.randn(T * heads * kD);
  std::vector<float> g(graw.size());
  for (int64_t t = 0; t < T; ++t)
    for (int hh = 0; hh < heads; ++hh)
      for (int c = 0; c < kD; ++c) {
        const size_t i = size_t((t * heads + hh) * kD + c);
        const float x = graw[i] + p.dt_bias[size_t(hh * kD + c)], a = std::exp(p.a_log[size_t(hh)]);
        if (p.lower_bound) {
          g[i] = *p.lower_bound / (1.0f + std::exp(-a * x));
        } else {
          g[i] = -a * (x > 20.0f ? x : std::log1p(std::exp(x)));
        }
      }
  return g;
}

// Runs kda_attention on the tested backend with a scratch arena sized by planning it and filled with NaN
// bytes, checking that the op takes exactly what planning reserved and gives it back.
void run_dev_attention(OpHarness& h, backend::KdaAttentionArgs a) {
  backend::Backend& dev = h.dev();
  Arena measure;
  a.scratch = &measure;
  ASSERT_TRUE(backend::WorkspacePlanner(dev).kda_attention(a).ok());
  const size_t need = measure.high_water();
  auto buf = dev.allocate(std::max<size_t>(need, 256));
  ASSERT_TRUE(buf.ok());
  const std::vector<uint8_t> nan_bytes(buf.value().size(), 0xff);
  ASSERT_TRUE(dev.copy_to_device(buf.value().data(), nan_bytes.data(), nan_bytes.size()).ok());
  Arena arena(buf.value().data(), std::max<size_t>(need, 256), Device::Cuda);
  a.scratch = &arena;
  const Status st = dev.kda_attention(a);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_TRUE(dev.synchronize().ok());
  EXPECT_EQ(arena.high_water(), need);
  EXPECT_EQ(arena.used(), 0u);
}

// The recurrent states of `n_slots` slots on both backends (random: slots of fresh sequences must be
// ignored).
struct States {
  int n_slots = 0, heads = 0;
  BackendTensor cpu, dev;
  int64_t slot_elems() const { return int64_t(heads) * kD * kD; }
};

States make_states(OpHarness& h, int n_slots, int heads, float scale) {
  States s;
  s.n_slots = n_slots;
  s.heads = heads;
  const Shape shape{n_slots, heads, kD, kD};
  auto both = h.put_both(h.randn(shape.numel(), scale, false), DType::F32, DType::F32, shape);
  s.cpu = std::move(both.first);
  s.dev = std::move(both.second);
  return s;
}

// One kda_attention step over `seqs` on both backends with fresh q/k/v/g/beta; compares each sequence's
// outputs and each used slot's final state, and checks unused slots are untouched. Returns the worst errors.
std::pair<double, double> check_attention(OpHarness& h, States& st, const std::vector<Seq>& seqs, Gate gate) {
  const int heads = st.heads;
  const model::StepBatch batch = make_batch(seqs);
  const int64_t T = batch.n_tokens(), P = int64_t(heads) * kD;
  const GateParams gp = gate_params(h, heads, gate);
  const Shape act{T, heads, kD};
  const DType dev_act = h.dev().act_dtype();  // BF16 on CUDA
  auto q = h.put_both(h.randn(T * P), DType::F32, dev_act, act);
  auto k = h.put_both(h.randn(T * P), DType::F32, dev_act, act);
  auto v = h.put_both(h.randn(T * P), DType::F32, dev_act, act);
  auto g = h.put_both(make_g(h, gp, T, heads), DType::F32, DType::F32, act);
  std::vector<float> beta = h.randn(T * heads, 1.0f, false);
  for (float& b : beta) b = 1.0f / (1.0f + std::exp(-b));
  auto bt = h.put_both(beta, DType::F32, DType::F32, {T, heads});
  const BackendTensor out_cpu = h.empty(h.cpu(), DType::F32, act),
                      out_dev = h.empty(h.dev(), h.dev().act_dtype(), act);
  const std::vector<float> before = h.get(h.dev(), st.dev.view);

  backend::BatchLayout lc, ld;
  h.layouts(batch, 64, &lc, &ld);
  const Status sc = h.cpu().kda_attention({q.first.view, k.first.view, v.first.view, g.first.view,
                                           bt.first.view, st.cpu.view, &lc, out_cpu.view, nullptr});
  EXPECT_TRUE(sc.ok()) << sc.message();
  run_dev_attention(h, {q.second.view, k.second.view, v.second.view, g.second.view, bt.second.view,
                        st.dev.view, &ld, out_dev.view, nullptr});

  const std::vector<float> want = h.get(h.cpu(), out_cpu.view), got = h.get(h.dev(), out_dev.view);
  const std::vector<float> s_want = h.get(h.cpu(), st.cpu.view), s_got = h.get(h.dev(), st.dev.view);
  double worst_out = 0, worst_state = 0;
  std::vector<char> used(size_t(st.n_slots), 0);
  int64_t t0 = 0;
  for (const Seq& s : seqs) {
    const size_t n = size_t(s.n_new * P), off = size_t(t0 * P);
    const double eo = rel_l2(slice(got, off, n), slice(want, off, n));
    const size_t so = size_t(s.slot * st.slot_elems()), sn = size_t(st.slot_elems());
    const double es = rel_l2(slice(s_got, so, sn), slice(s_want, so, sn));
    EXPECT_LE(eo, kAttnTol) << "output of the sequence at slot " << s.slot << " (start " << s.start_pos
                            << ", " << s.n_new << " new)";
    EXPECT_LE(es, kAttnTol) << "state of slot " << s.slot << " (start " << s.start_pos << ", " << s.n_new
                            << " new)";
    worst_out = std::max(worst_out, eo);
    worst_state = std::max(worst_state, es);
    used[size_t(s.slot)] = 1;
    for (const model::KdaSnapshotRequest& r : s.snaps) {
      const size_t ro = size_t(r.slot * st.slot_elems());
      const double er = rel_l2(slice(s_got, ro, sn), slice(s_want, ro, sn));
      EXPECT_LE(er, kAttnTol) << "snapshot after position " << r.pos << " (slot " << r.slot << ")";
      EXPECT_GT(max_abs(slice(s_got, ro, sn), slice(before, ro, sn)), 0.0) << "snapshot slot " << r.slot
                                                                          << " was not written";
      worst_state = std::max(worst_state, er);
      used[size_t(r.slot)] = 1;
    }
    t0 += s.n_new;
  }
  for (int slot = 0; slot < st.n_slots; ++slot) {
    if (used[size_t(slot)]) continue;
    const size_t so = size_t(slot * st.slot_elems()), sn = size_t(st.slot_elems());
    EXPECT_EQ(slice(s_got, so, sn), slice(before, so, sn)) << "slot " << slot << " is used by no sequence";
  }
  std::printf("[ kda      ] %s, Hk %d, %zu seqs, %lld tokens: out %.2e state %.2e\n", gate_name(gate), heads,
              seqs.size(), (long long)T, worst_out, worst_state);
  return {worst_out, worst_state};
}

// --- kda_prepare ---

struct PrepareIo {
  std::pair<BackendTensor, BackendTensor> qkv, graw, braw, conv_w, a_log, dt_bias;
};

PrepareIo prepare_inputs(OpHarness& h, int64_t T, int heads, const GateParams& gp) {
  const int64_t P = int64_t(heads) * kD;
  const DType dev_act = h.dev().act_dtype();
  PrepareIo io;
  io.qkv = h.put_both(h.randn(T * 3 * P), DType::F32, dev_act, {T, 3 * P});
  io.graw = h.put_both(h.randn(T * P), DType::F32, dev_act, {T, P});
  io.braw = h.put_both(h.randn(T * heads), DType::F32, dev_act, {T, heads});
  io.conv_w = h.put_both(h.randn(3 * P * kK, 0.5f, false), DType::F32, DType::F32, {3 * P, kK});
  io.a_log = h.put_both(gp.a_log, DType::F32, DType::F32, {heads});
  io.dt_bias = h.put_both(gp.dt_bias, DType::F32, DType::F32, {P});
  return io;
}

struct PrepareOut {
  BackendTensor q, k, v, g, beta;
};

PrepareOut prepare_outputs(OpHarness& h, backend::Backend& be, int64_t T, int heads, DType act) {
  return {h.empty(be, act, {T, heads, kD}), h.empty(be, act, {T, heads, kD}),
          h.empty(be, act, {T, heads, kD}), h.empty(be, DType::F32, {T, heads, kD}),
          h.empty(be, DType::F32, {T, heads})};
}

backend::KdaPrepareArgs prepare_args(const PrepareIo& io, bool cpu, const TensorView& conv_state, int heads,
                                     const GateParams& gp, const backend::BatchLayout* l, const PrepareOut& o,
                                     int64_t row0, int64_t n) {
  auto pick = [&](const std::pair<BackendTensor, BackendTensor>& p) {
    return cpu ? p.first.view : p.second.view;
  };
  backend::KdaPrepareArgs a;
  a.qkv = pick(io.qkv).rows(row0, n);
  a.conv_weight = pick(io.conv_w);
  a.conv_state = conv_state;
  a.graw = pick(io.graw).rows(row0, n);
  a.braw = pick(io.braw).rows(row0, n);
  a.a_log = pick(io.a_log);
  a.dt_bias = pick(io.dt_bias);
  a.gate_lower_bound = gp.lower_bound;
  a.n_heads = heads;
  a.head_dim = kD;
  a.layout = l;
  a.q = o.q.view.rows(row0, n);
  a.k = o.k.view.rows(row0, n);
  a.v = o.v.view.rows(row0, n);
  a.g = o.g.view.rows(row0, n);
  a.beta = o.beta.view.rows(row0, n);
  return a;
}

void check_prepare(OpHarness& h, int heads, Gate gate, const std::vector<Seq>& seqs, int n_slots) {
  SCOPED_TRACE(::testing::Message() << gate_name(gate) << " Hk " << heads);
  const model::StepBatch batch = make_batch(seqs);
  const int64_t T = batch.n_tokens(), P = int64_t(heads) * kD;
  const GateParams gp = gate_params(h, heads, gate);
  const PrepareIo io = prepare_inputs(h, T, heads, gp);
  const Shape cs{n_slots, kK - 1, 3 * P};
  auto conv = h.put_both(h.randn(cs.numel()), DType::F32, h.dev().act_dtype(), cs);
  const PrepareOut oc = prepare_outputs(h, h.cpu(), T, heads, DType::F32);
  const PrepareOut od = prepare_outputs(h, h.dev(), T, heads, h.dev().act_dtype());
  backend::BatchLayout lc, ld;
  h.layouts(batch, 64, &lc, &ld);
  ASSERT_TRUE(h.cpu().kda_prepare(prepare_args(io, true, conv.first.view, heads, gp, &lc, oc, 0, T)).ok());
  const Status st = h.dev().kda_prepare(prepare_args(io, false, conv.second.view, heads, gp, &ld, od, 0, T));
  ASSERT_TRUE(st.ok()) << st.message();
  const std::pair<const BackendTensor*, const BackendTensor*> outs[] = {
      {&oc.q, &od.q}, {&oc.k, &od.k}, {&oc.v, &od.v}, {&oc.g, &od.g}, {&oc.beta, &od.beta}};
  const char* names[] = {"q", "k", "v", "g", "beta"};
  for (int i = 0; i < 5; ++i) {
    const std::vector<float> want = h.get(h.cpu(), outs[i].first->view),
                             got = h.get(h.dev(), outs[i].second->view);
    const double err = rel_l2(got, want);
    EXPECT_LE(err, i < 3 ? kConvTol : kGateTol) << names[i] << ": max |d| " << max_abs(got, want);
  }
  // The window update copies bf16 values: exact, and slots nobody uses keep their bytes.
  EXPECT_EQ(h.get(h.dev(), conv.second.view), h.get(h.cpu(), conv.first.view));
}

TEST(KdaCuda, PrepareMatchesCpu) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  // Decode rows reading the old window, short continuations (n < K-1) shifting it, fresh sequences over
  // garbage windows, a prefill crossing 16-token tiles, slots out of sequence order, slot 8 unused.
  const std::vector<Seq> seqs = {{0, 1, 3}, {5, 1, 0}, {7, 2, 5}, {0, 70, 1}, {33, 17, 2},
                                 {2, 3, 4}, {1, 1, 6}, {0, 2, 7}, {9, 14, 9}, {100, 1, 10}};
  for (int heads : {2, 32})
    for (Gate gate : {Gate::Softplus, Gate::Bounded}) check_prepare(h, heads, gate, seqs, 11);
  check_prepare(h, 2, Gate::Softplus, {{0, 1000, 0}}, 1);
  check_prepare(h, 2, Gate::Bounded, {{40, 1, 0}}, 1);
}

// Prefix caching's in-step snapshots: the prepare writes each request's conv window (the K-1 pre-conv rows
// before its position) into the request's slot, as the CPU does (check_prepare compares every slot's window
// bit for bit). Requests at tile edges and inside tiles, after a cached prefix, two sequences in one tile's
// reach, real head counts (several conv CTAs per tile).
TEST(KdaCuda, PrepareSnapshotWindowsMatchCpu) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  const std::vector<Seq> seqs = {{0, 300, 0, {{64, 4}, {128, 5}, {256, 6}}},
                                 {3, 1, 1},
                                 {37, 130, 2, {{101, 7}, {165, 8}}},
                                 {10, 70, 3, {{74, 9}}}};
  for (int heads : {2, 32}) check_prepare(h, heads, Gate::Softplus, seqs, 11);
}

// --- kda_attention ---

TEST(KdaCuda, AttentionSingleSequenceFreshThenContinued) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  for (Gate gate : {Gate::Softplus, Gate::Bounded, Gate::SoftplusMild}) {
    for (int n : {1, 2, 63, 64, 65, 200, 1000}) {
      SCOPED_TRACE(::testing::Message() << gate_name(gate) << " n " << n);
      States st = make_states(h, 2, 2, 1.0f);  // garbage in both slots: a fresh sequence ignores it
      check_attention(h, st, {{0, n, 1}}, gate);
      for (int more : {1, 2, 65}) {  // state carried in: decode, a tiny chunk, a chunk and a bit
        check_attention(h, st, {{n, more, 1}}, gate);
        n += more;
      }
    }
  }
}

TEST(KdaCuda, AttentionRealHeadCount) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  for (Gate gate : {Gate::Softplus, Gate::Bounded}) {
    for (int n : {1, 65, 1000}) {
      SCOPED_TRACE(::testing::Message() << gate_name(gate) << " n " << n);
      States st = make_states(h, 1, 32, 1.0f);
      check_attention(h, st, {{0, n, 0}}, gate);
      check_attention(h, st, {{n, 1, 0}}, gate);
      check_attention(h, st, {{n + 1, 70, 0}}, gate);
    }
  }
}

TEST(KdaCuda, AttentionRaggedBatchMixesDecodeAndPrefill) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  // Slots shuffled against the sequence order; slot 3 is used by nobody and must stay as it was.
  const std::vector<Seq> step1 = {{40, 1, 7}, {0, 130, 2},  {12, 1, 0}, {3, 2, 5},
                                  {0, 1, 8},  {100, 64, 1}, {9, 65, 4}, {0, 3, 6}};
  for (int heads : {2, 32}) {
    for (Gate gate : {Gate::Softplus, Gate::Bounded}) {
      SCOPED_TRACE(::testing::Message() << gate_name(gate) << " Hk " << heads);
      States st = make_states(h, 9, heads, 0.5f);  // carried-in states for start_pos > 0
      check_attention(h, st, step1, gate);
      std::vector<Seq> step2;  // then a pure decode step over the states both backends just wrote
      for (const Seq& s : step1) step2.push_back({s.start_pos + s.n_new, 1, s.slot});
      std::reverse(step2.begin(), step2.end());
      check_attention(h, st, step2, gate);
    }
  }
}

// Prefix caching's in-step snapshots: the state after each requested chunk boundary lands in its slot, as on
// the CPU, next to sequences that ask for none (decode, short prefill) in the same step.
TEST(KdaCuda, SnapshotsInsideAStepMatchTheCpu) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  for (int heads : {2, 32}) {
    SCOPED_TRACE(::testing::Message() << "Hk " << heads);
    States st = make_states(h, 10, heads, 0.5f);
    const std::vector<Seq> step = {
        {0, 300, 0, {{64, 4}, {256, 5}}},  // fresh, two snapshots, a partial last chunk
        {7, 1, 1},                         // decode
        {100, 200, 2, {{164, 6}, {228, 7}, {292, 8}}},  // carried-in state, consecutive chunk boundaries
        {0, 40, 3},                        // short prefill, one partial chunk
    };
    check_attention(h, st, step, Gate::Softplus);
  }
}

// Full prepare + attention of 200 tokens on the GPU: one call, 64+64+72 (the same chunk boundaries: equal up
// to rounding order) and 50+1+99+50 (other boundaries and a decode step: within the bf16 tolerance); the
// one-shot run also against the CPU.
TEST(KdaCuda, SplitInputMatchesOneShot) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  const int heads = 2, T = 200;
  const int64_t P = int64_t(heads) * kD;
  for (Gate gate : {Gate::Softplus, Gate::Bounded}) {
    SCOPED_TRACE(gate_name(gate));
    const GateParams gp = gate_params(h, heads, gate);
    const PrepareIo io = prepare_inputs(h, T, heads, gp);
    const Shape cs{1, kK - 1, 3 * P}, ss{1, heads, kD, kD};
    const Shape act{T, heads, kD};

    // Runs the pipeline on `be` over the given split; returns the outputs and the final state.
    auto run = [&](backend::Backend& be, bool cpu, const std::vector<int>& parts) {
      const DType a = cpu ? DType::F32 : h.dev().act_dtype();
      auto conv = h.put(be, h.randn(cs.numel()), a, cs);
      auto state = h.put(be, h.randn(ss.numel(), 1.0f, false), DType::F32, ss);
      const PrepareOut o = prepare_outputs(h, be, T, heads, a);
      const BackendTensor out = h.empty(be, a, act);
      int start = 0;
      for (int n : parts) {
        const model::StepBatch batch = make_batch({{start, n, 0}});
        backend::BatchLayout lc, ld;
        h.layouts(batch, 64, &lc, &ld);
        const backend::BatchLayout* l = cpu ? &lc : &ld;
        const Status sp = be.kda_prepare(prepare_args(io, cpu, conv.view, heads, gp, l, o, start, n));
        EXPECT_TRUE(sp.ok()) << sp.message();
        const backend::KdaAttentionArgs aa{o.q.view.rows(start, n),
                                           o.k.view.rows(start, n),
                                           o.v.view.rows(start, n),
                                           o.g.view.rows(start, n),
                                           o.beta.view.rows(start, n),
                                           state.view,
                                           l,
                                           out.view.rows(start, n),
                                           nullptr};
        if (cpu)
          EXPECT_TRUE(be.kda_attention(aa).ok());
        else
          run_dev_attention(h, aa);
        start += n;
      }
      return std::make_pair(h.get(be, out.view), h.get(be, state.view));
    };
    const auto one = run(h.dev(), false, {T});
    const auto same = run(h.dev(), false, {64, 64, 72});
    const auto other = run(h.dev(), false, {50, 1, 99, 50});
    const auto ref = run(h.cpu(), true, {T});
    EXPECT_LE(rel_l2(same.first, one.first), 1e-5);
    EXPECT_LE(rel_l2(same.second, one.second), 1e-5);
    EXPECT_LE(rel_l2(other.first, one.first), kAttnTol);
    EXPECT_LE(rel_l2(other.second, one.second), kAttnTol);
    EXPECT_LE(rel_l2(one.first, ref.first), kAttnTol);
    EXPECT_LE(rel_l2(one.second, ref.second), kAttnTol);
    std::printf("[ kda      ] %s split: 64+64+72 %.1e, 50+1+99+50 %.1e, vs CPU %.1e\n", gate_name(gate),
                rel_l2(same.first, one.first), rel_l2(other.first, one.first), rel_l2(one.first, ref.first));
  }
}

// --- kda_decode: the fused decode step against the separate ops ---

// One layer's decode inputs after the projections (u's GEMMs), on both backends.
struct DecodeIo {
  std::pair<BackendTensor, BackendTensor> qkv, fa, ga, gate, braw, f_b, g_b, conv_w, a_log, dt_bias, o_norm;
};

DecodeIo decode_inputs(OpHarness& h, int64_t T, int heads, const GateParams& gp) {
  const int64_t P = int64_t(heads) * kD;
  const DType dev_act = h.dev().act_dtype();
  DecodeIo io;
  io.qkv = h.put_both(h.randn(T * 3 * P), DType::F32, dev_act, {T, 3 * P});
  io.fa = h.put_both(h.randn(T * kD), DType::F32, dev_act, {T, kD});
  io.ga = h.put_both(h.randn(T * kD), DType::F32, dev_act, {T, kD});
  io.gate = h.put_both(h.randn(T * P), DType::F32, dev_act, {T, P});
  io.braw = h.put_both(h.randn(T * heads), DType::F32, dev_act, {T, heads});
  // Low-rank halves with variance 1/d: graw and the gate come out O(1), as with the checkpoints' weights.
  const float ws = 1.0f / std::sqrt(float(kD));
  io.f_b = h.put_both(h.randn(P * kD, ws), DType::F32, DType::BF16, {P, kD});
  io.g_b = h.put_both(h.randn(P * kD, ws), DType::F32, DType::BF16, {P, kD});
  io.conv_w = h.put_both(h.randn(3 * P * kK, 0.5f, false), DType::F32, DType::F32, {3 * P, kK});
  io.a_log = h.put_both(gp.a_log, DType::F32, DType::F32, {heads});
  io.dt_bias = h.put_both(gp.dt_bias, DType::F32, DType::F32, {P});
  io.o_norm = h.put_both(h.uniform(kD, 0.5f, 1.5f, false), DType::F32, DType::F32, {kD});
  return io;
}

// The separate ops of a decode step on `be` (the model's path where nothing is fused): f_b (and g_b)
// GEMMs, kda_prepare, kda_attention, kda_output.
void run_separate_decode(OpHarness& h, backend::Backend& be, bool cpu, const DecodeIo& io, bool low_rank_gate,
                         int heads, const GateParams& gp, const backend::BatchLayout* l, const TensorView& conv,
                         const TensorView& state, const TensorView& out) {
  auto pick = [&](const std::pair<BackendTensor, BackendTensor>& p) { return cpu ? p.first.view : p.second.view; };
  const int64_t T = io.qkv.first.view.size(0), P = int64_t(heads) * kD;
  const DType a = cpu ? DType::F32 : h.dev().act_dtype();
  const BackendTensor graw = h.empty(be, a, {T, P}), gate = h.empty(be, a, {T, P});
  const backend::LinearWeight f_b{pick(io.f_b)}, g_b{pick(io.g_b)};
  ASSERT_TRUE(be.gemm({pick(io.fa), &f_b, graw.view}).ok());
  if (low_rank_gate) {
    ASSERT_TRUE(be.gemm({pick(io.ga), &g_b, gate.view}).ok());
  }
  const TensorView gate_view = low_rank_gate ? gate.view : pick(io.gate);
  const PrepareOut o = prepare_outputs(h, be, T, heads, a);
  backend::KdaPrepareArgs pa;
  pa.qkv = pick(io.qkv);
  pa.conv_weight = pick(io.conv_w);
  pa.conv_state = conv;
  pa.graw = graw.view;
  pa.braw = pick(io.braw);
  pa.a_log = pick(io.a_log);
  pa.dt_bias = pick(io.dt_bias);
  pa.gate_lower_bound = gp.lower_bound;
  pa.n_heads = heads;
  pa.head_dim = kD;
  pa.layout = l;
  pa.q = o.q.view, pa.k = o.k.view, pa.v = o.v.view, pa.g = o.g.view, pa.beta = o.beta.view;
  ASSERT_TRUE(be.kda_prepare(pa).ok());
  const BackendTensor att = h.empty(be, a, {T, heads, kD});
  const backend::KdaAttentionArgs aa{o.q.view, o.k.view, o.v.view, o.g.view, o.beta.view, state, l, att.view,
                                     nullptr};
  if (cpu)
    ASSERT_TRUE(be.kda_attention(aa).ok());
  else
    run_dev_attention(h, aa);
  ASSERT_TRUE(be.kda_output({att.view, gate_view, pick(io.o_norm), 1e-5f, out}).ok());
}

// Three decode steps over `seqs` (positions advance by one each step): the fused op on the GPU against the
// CPU's separate ops and the GPU's own separate ops, outputs, states and conv windows after every step.
void check_fused_decode(OpHarness& h, int heads, Gate gate, bool low_rank_gate, std::vector<Seq> seqs,
                        int n_slots) {
  SCOPED_TRACE(::testing::Message() << gate_name(gate) << (low_rank_gate ? " low-rank" : " full-rank")
                                    << " gate, Hk " << heads);
  const int64_t P = int64_t(heads) * kD;
  const GateParams gp = gate_params(h, heads, gate);
  const Shape cs{n_slots, kK - 1, 3 * P};
  const std::vector<float> conv0 = h.randn(cs.numel());  // garbage for fresh sequences, history for others
  auto conv = h.put_both(conv0, DType::F32, h.dev().act_dtype(), cs);
  auto conv_sep = h.put(h.dev(), conv0, h.dev().act_dtype(), cs);
  States st = make_states(h, n_slots, heads, 0.5f);
  auto state_sep = h.put(h.dev(), h.get(h.dev(), st.dev.view), DType::F32, {n_slots, heads, kD, kD});
  double worst_cpu = 0, worst_sep = 0;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const model::StepBatch batch = make_batch(seqs);
    const int64_t T = batch.n_tokens();
    const DecodeIo io = decode_inputs(h, T, heads, gp);
    backend::BatchLayout lc, ld;
    h.layouts(batch, 64, &lc, &ld);
    const std::vector<float> state_before = h.get(h.dev(), st.dev.view);

    const BackendTensor out_cpu = h.empty(h.cpu(), DType::F32, {T, P});
    run_separate_decode(h, h.cpu(), true, io, low_rank_gate, heads, gp, &lc, conv.first.view, st.cpu.view,
                        out_cpu.view);
    const BackendTensor out_sep = h.empty(h.dev(), h.dev().act_dtype(), {T, P});
    run_separate_decode(h, h.dev(), false, io, low_rank_gate, heads, gp, &ld, conv_sep.view, state_sep.view,
                        out_sep.view);

    const backend::LinearWeight f_b{io.f_b.second.view}, g_b{io.g_b.second.view};
    backend::KdaDecodeArgs a;
    a.qkv = io.qkv.second.view;
    a.fa = io.fa.second.view;
    a.f_b = &f_b;
    if (low_rank_gate) {
      a.ga = io.ga.second.view;
      a.g_b = &g_b;
    } else {
      a.gate = io.gate.second.view;
    }
    a.braw = io.braw.second.view;
    a.conv_weight = io.conv_w.second.view;
    a.conv_state = conv.second.view;
    a.a_log = io.a_log.second.view;
    a.dt_bias = io.dt_bias.second.view;
    a.gate_lower_bound = gp.lower_bound;
    a.state = st.dev.view;
    a.o_norm = io.o_norm.second.view;
    a.eps = 1e-5f;
    a.n_heads = heads;
    a.head_dim = kD;
    a.layout = &ld;
    const BackendTensor out = h.empty(h.dev(), h.dev().act_dtype(), {T, P});
    a.out = out.view;
    const Status s = h.dev().kda_decode(a);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(h.dev().synchronize().ok());

    const std::vector<float> got = h.get(h.dev(), out.view);
    const double e_cpu = rel_l2(got, h.get(h.cpu(), out_cpu.view));
    const double e_sep = rel_l2(got, h.get(h.dev(), out_sep.view));
    EXPECT_LE(e_cpu, kAttnTol) << "output vs the CPU's separate ops";
    EXPECT_LE(e_sep, kFusedTol) << "output vs the GPU's separate ops";
    const std::vector<float> s_got = h.get(h.dev(), st.dev.view), s_cpu = h.get(h.cpu(), st.cpu.view),
                             s_sep = h.get(h.dev(), state_sep.view);
    std::vector<char> used(size_t(n_slots), 0);
    const size_t sn = size_t(st.slot_elems());
    for (const Seq& q : seqs) {
      const size_t so = size_t(q.slot) * sn;
      EXPECT_LE(rel_l2(slice(s_got, so, sn), slice(s_cpu, so, sn)), kAttnTol) << "state of slot " << q.slot;
      EXPECT_LE(rel_l2(slice(s_got, so, sn), slice(s_sep, so, sn)), kFusedTol) << "state of slot " << q.slot;
      used[size_t(q.slot)] = 1;
    }
    for (int slot = 0; slot < n_slots; ++slot) {
      if (!used[size_t(slot)]) {
        EXPECT_EQ(slice(s_got, size_t(slot) * sn, sn), slice(state_before, size_t(slot) * sn, sn))
            << "slot " << slot << " is used by no sequence";
      }
    }
    // Windows hold copied bf16 inputs: exact, on every slot (unused ones keep their bytes).
    EXPECT_EQ(h.get(h.dev(), conv.second.view), h.get(h.cpu(), conv.first.view));
    worst_cpu = std::max(worst_cpu, e_cpu);
    worst_sep = std::max(worst_sep, e_sep);
    for (Seq& q : seqs) ++q.start_pos;
  }
  std::printf("[ kda      ] fused decode %s %s gate, Hk %d, %zu seqs: vs CPU %.2e, vs GPU separate ops %.2e\n",
              gate_name(gate), low_rank_gate ? "low-rank" : "full-rank", heads, seqs.size(), worst_cpu,
              worst_sep);
}

TEST(KdaCuda, FusedDecodeMatchesTheSeparateOps) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  // Fresh sequences over garbage state and windows (positions 0, then 1 and 2: the window's zero history
  // shifting out), carried ones, slots shuffled against the sequence order, slot 4 used by nobody.
  const std::vector<Seq> seqs = {{0, 1, 3}, {5, 1, 0}, {1, 1, 6}, {300, 1, 2}, {0, 1, 1}, {2, 1, 5}};
  for (int heads : {2, 32})
    for (Gate gate : {Gate::Softplus, Gate::Bounded})
      for (bool low_rank : {true, false}) check_fused_decode(h, heads, gate, low_rank, seqs, 7);
  check_fused_decode(h, 32, Gate::Softplus, true, {{4000, 1, 0}}, 1);  // batch 1, the bench's shape
}

// Speculative decoding's replay records (kda_rollback "records"): one step mixing two verify sequences that
// write records (5 tokens, and 17 — past the recurrent kernel's usual 16 — with slots shuffled) with a plain
// prefill and a plain decode; then kda_fold of 1, 3 and all of their tokens. Against the CPU: conv outputs,
// attention outputs, records and folded states within the attention tolerance; conv records, untouched
// windows and folded windows exact (bf16 copies). On the GPU alone, bit for bit: slots of record sequences
// unchanged by the step, and the fold of all tokens equal to the state the same step computes in place
// without records (the fold repeats the kernel's fmaf on the recorded floats) — that step has a record buffer
// but marks nobody, so the 17-token sequence takes the recurrent kernel there too.
TEST(KdaCuda, ReplayRecordsMatchCpuAndFoldBitExactly) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  const int heads = 4, R = 17, n_slots = 6;
  const int64_t P = int64_t(heads) * kD;
  const std::vector<Seq> seqs = {{12, 5, 3, {}, true}, {70, 17, 0, {}, true}, {0, 40, 1}, {30, 1, 4}};
  std::vector<Seq> plain_seqs = seqs;
  for (Seq& q : plain_seqs) q.records = false;
  const model::StepBatch batch = make_batch(seqs), plain_batch = make_batch(plain_seqs);
  const int64_t T = batch.n_tokens();
  const GateParams gp = gate_params(h, heads, Gate::SoftplusMild);
  const DType act = h.dev().act_dtype();

  // kda_prepare with conv records.
  const PrepareIo io = prepare_inputs(h, T, heads, gp);
  const Shape cs{n_slots, kK - 1, 3 * P}, crs{n_slots, R, 3 * P};
  const std::vector<float> windows = h.randn(cs.numel());
  auto conv = h.put_both(windows, DType::F32, act, cs);
  BackendTensor crec_cpu = h.empty(h.cpu(), DType::F32, crs), crec_dev = h.empty(h.dev(), act, crs);
  const PrepareOut oc = prepare_outputs(h, h.cpu(), T, heads, DType::F32);
  const PrepareOut od = prepare_outputs(h, h.dev(), T, heads, act);
  backend::BatchLayout lc, ld;
  h.layouts(batch, 64, &lc, &ld);
  backend::KdaPrepareArgs pc = prepare_args(io, true, conv.first.view, heads, gp, &lc, oc, 0, T),
                          pd = prepare_args(io, false, conv.second.view, heads, gp, &ld, od, 0, T);
  pc.conv_records = crec_cpu.view;
  pd.conv_records = crec_dev.view;
  ASSERT_TRUE(h.cpu().kda_prepare(pc).ok());
  Status st = h.dev().kda_prepare(pd);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(rel_l2(h.get(h.dev(), od.q.view), h.get(h.cpu(), oc.q.view)), kConvTol);
  EXPECT_LE(rel_l2(h.get(h.dev(), od.v.view), h.get(h.cpu(), oc.v.view)), kConvTol);
  const std::vector<float> win_cpu = h.get(h.cpu(), conv.first.view), win_dev = h.get(h.dev(), conv.second.view);
  EXPECT_EQ(win_dev, win_cpu);
  const size_t win = size_t((kK - 1) * 3 * P);
  for (const Seq& q : seqs) {
    if (q.records) {
      EXPECT_EQ(slice(win_dev, size_t(q.slot) * win, win), slice(windows, size_t(q.slot) * win, win))
          << "window of record slot " << q.slot;
    }
  }
  const std::vector<float> cr_cpu = h.get(h.cpu(), crec_cpu.view), cr_dev = h.get(h.dev(), crec_dev.view);
  const size_t crow = size_t(3 * P);
  for (const Seq& q : seqs)
    if (q.records) {
      const size_t off = size_t(q.slot) * R * crow, n = size_t(q.n_new) * crow;
      EXPECT_EQ(slice(cr_dev, off, n), slice(cr_cpu, off, n)) << "conv records of slot " << q.slot;
    }

  // kda_attention with records, and the same step without them on the GPU (its states: the fold's target).
  States stt = make_states(h, n_slots, heads, 0.1f);
  const std::vector<float> state0 = h.get(h.dev(), stt.dev.view);
  const Shape actv{T, heads, kD}, rs{n_slots, R, heads, 3, kD};
  auto q = h.put_both(h.randn(T * P), DType::F32, act, actv);
  auto k = h.put_both(h.randn(T * P), DType::F32, act, actv);
  auto v = h.put_both(h.randn(T * P), DType::F32, act, actv);
  auto g = h.put_both(make_g(h, gp, T, heads), DType::F32, DType::F32, actv);
  std::vector<float> beta = h.randn(T * heads, 1.0f, false);
  for (float& b : beta) b = 1.0f / (1.0f + std::exp(-b));
  auto bt = h.put_both(beta, DType::F32, DType::F32, {T, heads});
  const BackendTensor out_cpu = h.empty(h.cpu(), DType::F32, actv), out_dev = h.empty(h.dev(), act, actv),
                      out_plain = h.empty(h.dev(), act, actv);
  BackendTensor rec_cpu = h.empty(h.cpu(), DType::F32, rs), rec_dev = h.empty(h.dev(), DType::F32, rs);
  backend::KdaAttentionArgs ac{q.first.view, k.first.view, v.first.view, g.first.view, bt.first.view,
                               stt.cpu.view, &lc, out_cpu.view, nullptr, rec_cpu.view};
  st = h.cpu().kda_attention(ac);
  ASSERT_TRUE(st.ok()) << st.message();
  run_dev_attention(h, {q.second.view, k.second.view, v.second.view, g.second.view, bt.second.view, stt.dev.view,
                        &ld, out_dev.view, nullptr, rec_dev.view});
  // The plain step has a record buffer too but marks nobody (the engine's other steps): the same kernels run.
  BackendTensor plain_state = h.put(h.dev(), state0, DType::F32, {n_slots, heads, kD, kD});
  BackendTensor rec_unused = h.empty(h.dev(), DType::F32, rs);
  backend::BatchLayout lc2, ld2;
  h.layouts(plain_batch, 64, &lc2, &ld2);
  run_dev_attention(h, {q.second.view, k.second.view, v.second.view, g.second.view, bt.second.view,
                        plain_state.view, &ld2, out_plain.view, nullptr, rec_unused.view});
  EXPECT_LE(rel_l2(h.get(h.dev(), out_dev.view), h.get(h.cpu(), out_cpu.view)), kAttnTol);
  EXPECT_EQ(h.get(h.dev(), out_dev.view), h.get(h.dev(), out_plain.view)) << "outputs with and without records";
  const std::vector<float> s_dev = h.get(h.dev(), stt.dev.view), s_cpu = h.get(h.cpu(), stt.cpu.view),
                           s_plain = h.get(h.dev(), plain_state.view);
  const size_t per_slot = size_t(stt.slot_elems()), per_rec = size_t(heads) * 3 * kD;
  const std::vector<float> r_cpu = h.get(h.cpu(), rec_cpu.view), r_dev = h.get(h.dev(), rec_dev.view);
  for (const Seq& sq : seqs) {
    const size_t so = size_t(sq.slot) * per_slot;
    if (!sq.records) {
      EXPECT_LE(rel_l2(slice(s_dev, so, per_slot), slice(s_cpu, so, per_slot)), kAttnTol) << "slot " << sq.slot;
      continue;
    }
    EXPECT_EQ(slice(s_dev, so, per_slot), slice(state0, so, per_slot)) << "record slot " << sq.slot << " changed";
    const size_t ro = size_t(sq.slot) * R * per_rec, rn = size_t(sq.n_new) * per_rec;
    EXPECT_LE(rel_l2(slice(r_dev, ro, rn), slice(r_cpu, ro, rn)), kAttnTol) << "records of slot " << sq.slot;
  }

  // Folds of 1, 3 and every token of each record sequence (slot 2 in the list with 0 tokens: untouched).
  for (int count : {1, 3, R}) {
    SCOPED_TRACE("fold of " + std::to_string(count));
    const std::vector<int32_t> slots = {3, 0, 2}, counts = {std::min(count, 5), count, 0};
    std::vector<float> sl(slots.begin(), slots.end()), ct(counts.begin(), counts.end());
    auto slots_t = h.put_both(sl, DType::I32, DType::I32, {3});
    auto counts_t = h.put_both(ct, DType::I32, DType::I32, {3});
    auto fs = h.put_both(s_cpu, DType::F32, DType::F32, {n_slots, heads, kD, kD});
    auto fw = h.put_both(win_cpu, DType::F32, act, cs);
    ASSERT_TRUE(h.cpu().kda_fold({rec_cpu.view, crec_cpu.view, fs.first.view, fw.first.view, slots_t.first.view,
                                  counts_t.first.view}).ok());
    BackendTensor fs_dev = h.put(h.dev(), s_dev, DType::F32, {n_slots, heads, kD, kD});
    st = h.dev().kda_fold({rec_dev.view, crec_dev.view, fs_dev.view, fw.second.view, slots_t.second.view,
                           counts_t.second.view});
    ASSERT_TRUE(st.ok()) << st.message();
    const std::vector<float> got = h.get(h.dev(), fs_dev.view), want = h.get(h.cpu(), fs.first.view);
    for (int i = 0; i < 3; ++i) {
      const size_t so = size_t(slots[size_t(i)]) * per_slot;
      EXPECT_LE(rel_l2(slice(got, so, per_slot), slice(want, so, per_slot)), kAttnTol) << "slot " << slots[size_t(i)];
    }
    EXPECT_EQ(slice(got, 2 * per_slot, per_slot), slice(s_dev, 2 * per_slot, per_slot)) << "slot 2 folded 0 tokens";
    EXPECT_EQ(h.get(h.dev(), fw.second.view), h.get(h.cpu(), fw.first.view)) << "folded windows";
    if (count == R) {
      EXPECT_EQ(slice(got, 0, per_slot), slice(s_plain, 0, per_slot)) << "slot 0: fold of all vs in place";
      EXPECT_EQ(slice(got, 3 * per_slot, per_slot), slice(s_plain, 3 * per_slot, per_slot))
          << "slot 3: fold of all vs in place";
    }
  }
}

TEST(KdaCuda, RejectsOtherHeadDims) {
  OpHarness h(kTested);
  RILL_REQUIRE_BACKEND(h);
  const int d = 64, heads = 2;
  const model::StepBatch batch = make_batch({{0, 3, 0}});
  backend::BatchLayout lc, ld;
  h.layouts(batch, 64, &lc, &ld);
  const Shape act{3, heads, d};
  auto q = h.put(h.dev(), h.randn(act.numel()), h.dev().act_dtype(), act);
  auto g = h.put(h.dev(), std::vector<float>(size_t(act.numel()), -0.1f), DType::F32, act);
  auto beta = h.put(h.dev(), std::vector<float>(6, 0.5f), DType::F32, {3, heads});
  auto state = h.put(h.dev(), std::vector<float>(size_t(heads * d * d), 0.0f), DType::F32, {1, heads, d, d});
  auto out = h.empty(h.dev(), h.dev().act_dtype(), act);
  Arena none;
  const Status st =
      h.dev().kda_attention({q.view, q.view, q.view, g.view, beta.view, state.view, &ld, out.view, &none});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("64"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace rill::testing
