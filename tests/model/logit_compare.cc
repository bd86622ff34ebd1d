#include "model/logit_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <string_view>
#include <span>

#include "model/fixture.h"
#include "model/k3_checkpoint.h"
#include "model/sequence_session.h"
#include "test_backend_options.h"
#include "test_seed.h"

namespace rill::testing {

double Compare::median() const {
  std::vector<double> v = rel;
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void compare_rows(const std::vector<float>& got, const std::vector<float>& ref, int64_t V, Compare* c) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t r = 0; r < ref.size() / size_t(V); ++r) {
    double num = 0, den = 0;
    int64_t ag = 0, ar = 0;
    for (int64_t v = 0; v < V; ++v) {
      const float g = got[r * size_t(V) + size_t(v)], e = ref[r * size_t(V) + size_t(v)];
      num += double(g - e) * (g - e);
      den += double(e) * e;
      if (g > got[r * size_t(V) + size_t(ag)]) ag = v;
      if (e > ref[r * size_t(V) + size_t(ar)]) ar = v;
    }
    const double rel = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
    c->worst_rel_l2 = std::max(c->worst_rel_l2, rel);
    c->rel.push_back(rel);
    c->agree += ag == ar;
    c->total += 1;
  }
}

int count_near_ties(const std::vector<float>& got, const std::vector<float>& ref, int64_t V, double rel_tol) {
  int ties = 0;
  for (size_t r = 0; r < ref.size() / size_t(V); ++r) {
    const float* g = got.data() + r * size_t(V);
    const float* e = ref.data() + r * size_t(V);
    const int64_t ag = std::max_element(g, g + V) - g, ar = std::max_element(e, e + V) - e;
    double scale = 0;
    for (int64_t v = 0; v < V; ++v) scale = std::max(scale, double(std::fabs(e[v])));
    if (ag != ar && double(e[ar]) - double(e[ag]) <= rel_tol * scale) ++ties;
  }
  return ties;
}

void expect_within_bounds(const Compare& c, const std::string& what, const Bounds& b) {
  EXPECT_LE(c.median(), b.median) << what;
  EXPECT_LE(c.worst_rel_l2, b.worst) << what;
  EXPECT_GE(double(c.agree), b.top1 * c.total) << what;
}

Bounds widened_by(const Bounds& b, const Compare& yardstick) {
  const double miss = 1.0 - double(yardstick.agree) / std::max(yardstick.total, 1);
  return Bounds{std::max(b.median, kYardstickFactor * yardstick.median()),
                std::max(b.worst, kYardstickFactor * yardstick.worst_rel_l2),
                std::min(b.top1, 1.0 - kYardstickFactor * miss)};
}

void print_comparison(const std::string& what, const Compare& c, const Compare& yardstick) {
  std::printf("%s: per-position rel L2 median %.3g, worst %.3g; top-1 agreement %d/%d "
              "(bf16 yardstick: median %.3g, worst %.3g, top-1 %d/%d)\n",
              what.c_str(), c.median(), c.worst_rel_l2, c.agree, c.total, yardstick.median(),
              yardstick.worst_rel_l2, yardstick.agree, yardstick.total);
}

bool load_pair(const std::filesystem::path& dir, Pair* p, std::string* why) {
  auto gpu = testing::make_test_backend("cuda");
  if (!gpu.ok()) {
    *why = gpu.status().message();
    return false;
  }
  p->gpu = std::move(gpu).value();
  p->cpu = backend::make_cpu_backend();
  model::StepLimits lim;
  lim.max_tokens = 256;
  lim.max_seqs = 8;
  lim.max_logit_rows = 256;
  lim.max_context = 512;
  for (auto [be, m] : {std::pair{p->cpu.get(), &p->cpu_model}, std::pair{p->gpu.get(), &p->gpu_model}}) {
    auto r = model::load_model(dir, *be);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return false;
    *m = std::move(r).value();
    EXPECT_TRUE((*m)->reserve_workspace(lim).ok());
  }
  return true;
}

std::map<std::string, std::vector<float>> routing_of(const model::TapRecorder& r) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& t : r.taps())
    if (t.name.ends_with(".moe.ids") || t.name.ends_with(".moe.weights")) out[t.name] = t.values;
  return out;
}

namespace {

// The names of the taps `gpu` stored in bf16 (the predicate of the yardstick run).
std::function<bool(std::string_view)> stored_in_bf16(const model::TapRecorder& gpu) {
  std::set<std::string, std::less<>> names;
  for (const auto& t : gpu.taps())
    if (t.dtype == DType::BF16) names.insert(t.name);
  return [names = std::move(names)](std::string_view n) { return names.count(n) > 0; };
}

double tap_rel_l2(const model::TapRecorder::Tap& got, const model::TapRecorder::Tap& ref) {
  double num = 0, den = 0;
  for (size_t j = 0; j < ref.values.size() && j < got.values.size(); ++j) {
    num += double(ref.values[j] - got.values[j]) * (ref.values[j] - got.values[j]);
    den += double(ref.values[j]) * ref.values[j];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

ReplayedLogits run_replayed(Pair& p, const std::vector<int32_t>& ids, const std::vector<int>& pieces) {
  model::TapRecorder gpu_taps, cpu_taps, rounded_taps;
  auto gs = model::SequenceSession::create(*p.gpu_model, 512);
  auto cs = model::SequenceSession::create(*p.cpu_model, 512);
  auto rs = model::SequenceSession::create(*p.cpu_model, 512);
  ReplayedLogits out;
  const std::vector<int> steps = pieces.empty() ? std::vector<int>{int(ids.size())} : pieces;
  size_t off = 0;
  for (int n : steps) {
    EXPECT_LE(off + size_t(n), ids.size());
    if (off + size_t(n) > ids.size()) break;
    std::span<const int32_t> part(ids.data() + off, size_t(n));
    off += size_t(n);
    gpu_taps.clear();
    p.gpu_model->set_tap_recorder(&gpu_taps);
    auto gl = gs->feed(part, n, true);
    EXPECT_TRUE(gl.ok()) << gl.status().to_string();
    cpu_taps.clear();
    cpu_taps.set_overrides(routing_of(gpu_taps));
    p.cpu_model->set_tap_recorder(&cpu_taps);
    auto cl = cs->feed(part, n, true);
    EXPECT_TRUE(cl.ok()) << cl.status().to_string();
    rounded_taps.clear();
    rounded_taps.set_overrides(routing_of(gpu_taps));
    rounded_taps.set_bf16_rounding(stored_in_bf16(gpu_taps));
    p.cpu_model->set_tap_recorder(&rounded_taps);
    auto rl = rs->feed(part, n, true);
    EXPECT_TRUE(rl.ok()) << rl.status().to_string();
    if (!gl.ok() || !cl.ok() || !rl.ok()) break;
    out.gpu.insert(out.gpu.end(), gl->begin(), gl->end());
    out.cpu.insert(out.cpu.end(), cl->begin(), cl->end());
    out.cpu_bf16.insert(out.cpu_bf16.end(), rl->begin(), rl->end());
  }
  p.gpu_model->set_tap_recorder(nullptr);
  p.cpu_model->set_tap_recorder(nullptr);
  return out;
}

std::vector<int> chunks_of(int n, int chunk) {
  std::vector<int> out;
  for (int off = 0; off < n; off += chunk) out.push_back(std::min(chunk, n - off));
  return out;
}

void expect_gpu_matches_cpu(const std::filesystem::path& dir, const std::vector<ReplayedRun>& runs, const Bounds& b) {
  Pair p;
  std::string why;
  if (!load_pair(dir, &p, &why)) GTEST_SKIP() << why;
  const int64_t V = p.cpu_model->config().vocab_size;
  Compare c, yardstick;
  for (const auto& run : runs) {
    const ReplayedLogits l = run_replayed(p, run.ids, run.pieces);
    compare_rows(l.gpu, l.cpu, V, &c);
    compare_rows(l.cpu_bf16, l.cpu, V, &yardstick);
  }
  print_comparison(dir.filename().string(), c, yardstick);
  expect_within_bounds(c, dir.filename().string(), widened_by(b, yardstick));
}

void expect_fuzzed_models_match(const std::function<FuzzedShape(std::mt19937&)>& draw, const Bounds& b,
                                const std::string& tag) {
  const uint32_t first = test_seed();
  const char* env = std::getenv("RILL_FUZZ_RUNS");
  const int n_runs = env ? std::max(1, std::atoi(env)) : 1;
  std::vector<double> medians, worsts, top1s;
  for (int run = 0; run < n_runs; ++run) {
    const uint32_t seed = first + uint32_t(run);
    std::mt19937 rng(seed);
    const FuzzedShape shape = draw(rng);
    std::printf("[ seed     ] %u (RILL_TEST_SEED)\n[ shape    ] %s\n", seed, shape.summary.c_str());
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ": " << shape.summary);
    TempDir dir(tag + "_" + std::to_string(seed));
    ASSERT_TRUE(model::write_random_checkpoint(dir.path(), shape.config, seed).ok());
    Pair p;
    std::string why;
    if (!load_pair(dir.path(), &p, &why)) {
      if (!why.empty()) GTEST_SKIP() << why;
      continue;  // a load failure is reported by load_pair; the other seeds still run
    }
    Compare c, yardstick;
    for (int n : {1, 9, 64, 130}) {
      std::vector<int32_t> ids;
      for (int i = 0; i < n + 8; ++i) ids.push_back(int32_t(rng() % uint32_t(shape.vocab)));
      std::vector<int> pieces{n};
      pieces.insert(pieces.end(), 8, 1);
      const ReplayedLogits l = run_replayed(p, ids, pieces);
      compare_rows(l.gpu, l.cpu, shape.vocab, &c);
      compare_rows(l.cpu_bf16, l.cpu, shape.vocab, &yardstick);
    }
    const std::string what = tag + " seed " + std::to_string(seed);
    print_comparison(what, c, yardstick);
    expect_within_bounds(c, what, widened_by(b, yardstick));
    medians.push_back(c.median());
    worsts.push_back(c.worst_rel_l2);
    top1s.push_back(double(c.agree) / std::max(c.total, 1));
  }
  if (n_runs > 1) {
    auto spread = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return fmt::format("min {:.3g} / median {:.3g} / max {:.3g}", v.front(), v[v.size() / 2], v.back());
    };
    std::printf("%s over %d seeds from %u: median %s; worst %s; top-1 %s\n", tag.c_str(), n_runs, first,
                spread(medians).c_str(), spread(worsts).c_str(), spread(top1s).c_str());
  }
}

void expect_taps_match(const std::filesystem::path& dir, const std::vector<int32_t>& ids,
                       const std::vector<std::pair<size_t, size_t>>& pieces, const Bounds& b) {
  Pair p;
  std::string why;
  if (!load_pair(dir, &p, &why)) GTEST_SKIP() << why;
  model::TapRecorder cpu_taps, gpu_taps, rounded_taps;
  auto cs = model::SequenceSession::create(*p.cpu_model, 512);
  auto rs = model::SequenceSession::create(*p.cpu_model, 512);
  auto gs = model::SequenceSession::create(*p.gpu_model, 512);
  p.gpu_model->set_tap_recorder(&gpu_taps);
  for (const auto& [off, n] : pieces) {
    ASSERT_LE(off + n, ids.size());
    gpu_taps.clear();
    cpu_taps.clear();
    rounded_taps.clear();
    std::span<const int32_t> part(ids.data() + off, n);
    ASSERT_TRUE(gs->feed(part, int(n), true).ok());
    cpu_taps.set_overrides(routing_of(gpu_taps));
    p.cpu_model->set_tap_recorder(&cpu_taps);
    ASSERT_TRUE(cs->feed(part, int(n), true).ok());
    rounded_taps.set_overrides(routing_of(gpu_taps));
    rounded_taps.set_bf16_rounding(stored_in_bf16(gpu_taps));
    p.cpu_model->set_tap_recorder(&rounded_taps);
    ASSERT_TRUE(rs->feed(part, int(n), true).ok());
    ASSERT_EQ(cpu_taps.taps().size(), gpu_taps.taps().size());
    ASSERT_EQ(cpu_taps.taps().size(), rounded_taps.taps().size());
    std::string first_bad;
    double worst = 0;
    struct Row {
      double gpu, yardstick;
      std::string name;
    };
    std::vector<Row> rows;  // printed: where the bf16 error enters, beside what bf16 storage alone gives
    for (size_t i = 0; i < cpu_taps.taps().size(); ++i) {
      const auto& c = cpu_taps.taps()[i];
      const auto& g = gpu_taps.taps()[i];
      ASSERT_EQ(c.name, g.name);
      const double rel = tap_rel_l2(g, c), yard = tap_rel_l2(rounded_taps.taps()[i], c);
      worst = std::max(worst, rel);
      rows.push_back({rel, yard, c.name});
      if (!(rel <= std::max(b.worst, kYardstickFactor * yard)) && first_bad.empty()) first_bad = c.name;
    }
    std::printf("step at %zu (+%zu): %zu taps, worst rel L2 %.3g\n", off, n, cpu_taps.taps().size(), worst);
    std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.gpu > y.gpu; });
    for (size_t i = 0; i < rows.size() && i < 6; ++i)
      std::printf("    %-28s rel L2 %.3g (bf16 yardstick %.3g)\n", rows[i].name.c_str(), rows[i].gpu,
                  rows[i].yardstick);
    EXPECT_TRUE(first_bad.empty()) << "step at " << off << ": first diverging tensor " << first_bad;
  }
  p.cpu_model->set_tap_recorder(nullptr);
  p.gpu_model->set_tap_recorder(nullptr);
}

void expect_chunked_matches_one_shot(model::Model& m, const std::vector<int32_t>& ids, const std::vector<int>& chunks,
                                     const Bounds& b) {
  const int64_t V = m.config().vocab_size;
  model::TapRecorder taps;
  m.set_tap_recorder(&taps);
  auto whole = model::SequenceSession::create(m, 512);
  ASSERT_TRUE(whole.ok());
  auto one_shot = whole->feed(ids, 0, true);
  ASSERT_TRUE(one_shot.ok()) << one_shot.status().to_string();
  // Routing of the one-shot run, per layer, as [T, k] rows.
  const std::map<std::string, std::vector<float>> rows = routing_of(taps);
  for (int chunk : chunks) {
    auto s = model::SequenceSession::create(m, 512);
    ASSERT_TRUE(s.ok());
    std::vector<float> got;
    for (size_t off = 0; off < ids.size(); off += size_t(chunk)) {
      const size_t n = std::min(size_t(chunk), ids.size() - off);
      std::map<std::string, std::vector<float>> o;
      for (const auto& [name, v] : rows) {
        const size_t width = v.size() / ids.size();
        o[name].assign(v.begin() + int64_t(off * width), v.begin() + int64_t((off + n) * width));
      }
      taps.clear();
      taps.set_overrides(o);
      auto l = s->feed(std::span<const int32_t>(ids.data() + off, n), int(n), true);
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      got.insert(got.end(), l->begin(), l->end());
    }
    Compare c;
    compare_rows(got, *one_shot, V, &c);
    std::printf("chunk %d vs one-shot: rel L2 median %.3g, worst %.3g; top-1 %d/%d\n", chunk, c.median(),
                c.worst_rel_l2, c.agree, c.total);
    expect_within_bounds(c, "chunk " + std::to_string(chunk), b);
  }
  taps.set_overrides({});
  m.set_tap_recorder(nullptr);
}

void expect_ragged_batch_close_to_alone(backend::Backend& be, model::Model& model,
                                        const std::vector<std::vector<int32_t>>& tokens,
                                        const std::vector<std::vector<RaggedPiece>>& steps, const Bounds& bounds) {
  RaggedRun r;
  run_ragged_batch(be, model, tokens, steps, &r);
  if (::testing::Test::HasFatalFailure()) return;
  for (size_t s = 0; s < tokens.size(); ++s) {
    Compare c;
    compare_rows(r.batched[s], r.alone[s], model.config().vocab_size, &c);
    std::printf("sequence %zu (%zu tokens) batched vs alone: worst rel L2 %.3g; top-1 %d/%d\n", s,
                tokens[s].size(), c.worst_rel_l2, c.agree, c.total);
    EXPECT_LE(c.worst_rel_l2, bounds.worst) << "sequence " << s;
    EXPECT_EQ(c.agree, c.total) << "sequence " << s;
  }
}

}  // namespace rill::testing
