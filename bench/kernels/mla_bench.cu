// Kernel lab for MLA attention (style.md §7.4): validates the CUDA backend once against the CPU reference on
// a small mixed batch (each prefill path), then times prefill (T = 2048, 8192; 32 heads; empty cache) through
// each prefill attention path (mla_prefill = cudnn where the build has cuDNN, rill), the cuDNN path's K copy
// alone, and decode (B = 1..256 at 4K context; 32 heads) through Backend::mla_attention, each against ceilings
// measured in the same run: device-to-device copy bandwidth (bytes read + written) and a cuBLASLt bf16 8192^3
// GEMM rate.
// Usage: mla_bench [--quick]   (--quick: fewer repetitions, prefill T=2048 only, decode B in {1, 32})
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/mla/phases.h"
#include "backend/workspace_planner.h"
#include "core/arena.h"
#include "model/step_batch.h"

namespace rill {
namespace {

constexpr int kNope = 128, kRope = 64, kV = 128, kLora = 512, kWidth = kLora + kRope, kBlock = 64;

#define BENCH_CHECK(expr)                                                               \
  do {                                                                                  \
    const ::rill::Status st_ = (expr);                                                  \
    if (!st_.ok()) {                                                                    \
      std::fprintf(stderr, "mla_bench: %s failed: %s\n", #expr, st_.message().c_str()); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

template <typename T>
T value_or_die(Result<T> r, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "mla_bench: %s: %s\n", what, r.status().message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

struct Buffer {
  backend::DeviceAllocation alloc;
  TensorView view;
};

Buffer make_buffer(backend::Backend& be, DType dtype, Shape shape) {
  Buffer b;
  b.alloc = value_or_die(be.allocate(size_t(shape.numel()) * dtype_size(dtype)), "allocate");
  b.view = TensorView::make(b.alloc.data(), dtype, shape, be.device());
  return b;
}

Buffer upload(backend::Backend& be, const std::vector<float>& v, DType dtype, Shape shape) {
  Buffer b = make_buffer(be, dtype, shape);
  std::vector<char> host(b.view.nbytes());
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::F32)
      std::memcpy(host.data() + 4 * i, &v[i], 4);
    else
      reinterpret_cast<uint16_t*>(host.data())[i] = f32_to_bf16(v[i]);
  }
  BENCH_CHECK(be.copy_to_device(b.view.data, host.data(), host.size()));
  return b;
}

std::vector<float> download(backend::Backend& be, const TensorView& t) {
  std::vector<char> host(t.nbytes());
  BENCH_CHECK(be.synchronize());
  BENCH_CHECK(be.copy_to_host(host.data(), t.data, host.size()));
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_f32(host.data(), t.dtype, i);
  return out;
}

std::vector<float> randn(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_to_bf16(d(rng));
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

backend::MlaAttentionArgs attention_args(int heads) {
  backend::MlaAttentionArgs a;
  a.n_heads = heads;
  a.nope = kNope;
  a.rope = kRope;
  a.v_dim = kV;
  a.kv_lora = kLora;
  a.scale = 1.0f / std::sqrt(float(kNope + kRope));
  return a;
}

// Scratch for `a` on `be`, sized by planning the op (backend::WorkspacePlanner).
Buffer plan_scratch(backend::Backend& be, backend::MlaAttentionArgs a) {
  Arena measure;
  a.scratch = &measure;
  BENCH_CHECK(backend::WorkspacePlanner(be).mla_attention(a));
  return make_buffer(be, DType::U8, {int64_t(std::max<size_t>(measure.high_water(), 256))});
}

// The mla_prefill values to run: cuDNN's fused attention where the build has it (cudnn: no silent fallback),
// and rill's flash kernel.
std::vector<const char*> prefill_paths(backend::Backend& be) {
  std::vector<const char*> paths;
  if (be.set_option("mla_prefill", "cudnn").ok()) paths.push_back("cudnn");
  paths.push_back("rill");
  return paths;
}

// One mixed step (2 decode + 2 prefill sequences, 4 heads) on both backends over identical latents.
bool validate(backend::Backend& dev, std::mt19937& rng) {
  auto cpu = backend::make_cpu_backend();
  const int heads = 4;
  model::StepBatch step;
  int next_block = 0;
  for (auto [start, n_new] : std::vector<std::pair<int, int>>{{700, 1}, {0, 150}, {33, 4}, {90, 70}}) {
    model::SequenceStep s;
    s.start_pos = start;
    s.n_new = n_new;
    for (int b = 0; b < (start + n_new + kBlock - 1) / kBlock; ++b) s.block_table.push_back(next_block++);
    std::reverse(s.block_table.begin(), s.block_table.end());  // non-contiguous order
    step.seqs.push_back(s);
    step.token_ids.resize(step.token_ids.size() + size_t(n_new), 0);
  }
  backend::BatchLayoutHost host;
  BENCH_CHECK(step.to_layout(kBlock, &host));
  backend::BatchLayout lc, ld;
  BENCH_CHECK(cpu->upload_layout(host, kBlock, &lc));
  BENCH_CHECK(dev.upload_layout(host, kBlock, &ld));
  // Latents for every cached position, rounded to bf16 (as the CUDA cache holds them).
  const std::vector<float> cache_v = randn(rng, int64_t(next_block) * kBlock * kWidth, 1.0f);
  Buffer cache_c = upload(*cpu, cache_v, DType::F32, {next_block, kBlock, kWidth});
  Buffer cache_d = upload(dev, cache_v, DType::BF16, {next_block, kBlock, kWidth});
  const int64_t T = step.n_tokens();
  const std::vector<float> q_v = randn(rng, T * heads * (kNope + kRope), 1.0f);
  const std::vector<float> kvb_v =
      randn(rng, int64_t(heads) * (kNope + kV) * kLora, 1.0f / std::sqrt(128.0f));
  Buffer q_c = upload(*cpu, q_v, DType::F32, {T, heads, kNope + kRope}),
         q_d = upload(dev, q_v, DType::BF16, {T, heads, kNope + kRope});
  Buffer w_c = upload(*cpu, kvb_v, DType::BF16, {heads * (kNope + kV), kLora});
  Buffer w_d = upload(dev, kvb_v, DType::BF16, {heads * (kNope + kV), kLora});
  Buffer out_c = make_buffer(*cpu, DType::F32, {T, heads * kV}),
         out_d = make_buffer(dev, DType::BF16, {T, heads * kV});
  const backend::LinearWeight lw_c{w_c.view}, lw_d{w_d.view};
  backend::MlaAttentionArgs ac = attention_args(heads), ad = ac;
  ac.q = q_c.view;
  ac.cache = cache_c.view;
  ac.kv_b = &lw_c;
  ac.layout = &lc;
  ac.out = out_c.view;
  ad.q = q_d.view;
  ad.cache = cache_d.view;
  ad.kv_b = &lw_d;
  ad.layout = &ld;
  ad.out = out_d.view;
  BENCH_CHECK(cpu->mla_attention(ac));
  const std::vector<float> want = download(*cpu, out_c.view);
  bool ok = true;
  for (const char* path : prefill_paths(dev)) {
    BENCH_CHECK(dev.set_option("mla_prefill", path));
    BENCH_CHECK(dev.fill_zero(out_d.view));
    Buffer scratch = plan_scratch(dev, ad);
    Arena arena(scratch.alloc.data(), scratch.alloc.size(), dev.device());
    ad.scratch = &arena;
    BENCH_CHECK(dev.mla_attention(ad));
    const std::vector<float> got = download(dev, out_d.view);
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = double(got[i]) - want[i];
      num += std::isnan(d) ? INFINITY : d * d;
      den += double(want[i]) * want[i];
    }
    const double err = std::sqrt(num / den);
    std::printf("validate: mixed batch (2 decode + 2 prefill, 4 heads), prefill %s, vs CPU: rel-L2 %.2e %s\n", path,
                err, err <= 1e-2 ? "ok" : "FAIL");
    ok = ok && err <= 1e-2;
  }
  BENCH_CHECK(dev.set_option("mla_prefill", "auto"));
  return ok;
}

struct Ceilings {
  double copy_gbps = 0, gemm_tflops = 0;
};

Ceilings measure_ceilings(backend::Backend& be, int reps) {
  Ceilings c;
  const size_t bytes = size_t(1) << 30;
  Buffer src = make_buffer(be, DType::U8, {int64_t(bytes)}),
         dst = make_buffer(be, DType::U8, {int64_t(bytes)});
  BENCH_CHECK(be.fill_random(src.view, 1, 0, 255));
  std::vector<double> ms;
  for (int i = 0; i <= reps; ++i) {
    const double t = value_or_die(
        be.time_ms([&] { return be.copy_device_to_device(dst.view.data, src.view.data, bytes); }), "copy");
    if (i) ms.push_back(t);
  }
  c.copy_gbps = 2.0 * double(bytes) / (median(ms) * 1e-3) / 1e9;
  const int64_t n = 8192;
  Buffer x = make_buffer(be, DType::BF16, {n, n}), w = make_buffer(be, DType::BF16, {n, n}),
         y = make_buffer(be, DType::BF16, {n, n});
  BENCH_CHECK(be.fill_random(x.view, 2, -1, 1));
  BENCH_CHECK(be.fill_random(w.view, 3, -1, 1));
  const backend::LinearWeight lw{w.view};
  ms.clear();
  for (int i = 0; i <= reps; ++i) {
    const double t = value_or_die(be.time_ms([&] { return be.gemm({x.view, &lw, y.view}); }), "gemm");
    if (i) ms.push_back(t);
  }
  c.gemm_tflops = 2.0 * double(n) * double(n) * double(n) / (median(ms) * 1e-3) / 1e12;
  return c;
}

void print_row(const char* name, double ms, double bytes, double flops, const Ceilings& c,
               const char* anchor) {
  const double gbps = bytes / (ms * 1e-3) / 1e9, tflops = flops / (ms * 1e-3) / 1e12;
  std::printf(
      "%-26s %9.4f ms %10.1f MB %8.0f GB/s (%5.1f%% copy) %9.1f GFLOP %7.1f TF/s (%5.1f%% gemm)  %s\n", name,
      ms, bytes / 1e6, gbps, 100.0 * gbps / c.copy_gbps, flops / 1e9, tflops, 100.0 * tflops / c.gemm_tflops,
      anchor);
}

// Prefill of one T-token prompt from an empty cache (the cache already holds this step's latents), through the
// prefill attention path `path` (mla_prefill).
void bench_prefill(backend::Backend& be, const char* path, int T, int heads, int reps, const Ceilings& c) {
  BENCH_CHECK(be.set_option("mla_prefill", path));
  model::StepBatch step;
  model::SequenceStep s;
  s.n_new = T;
  for (int b = 0; b < (T + kBlock - 1) / kBlock; ++b) s.block_table.push_back(b);
  step.seqs.push_back(s);
  step.token_ids.assign(size_t(T), 0);
  backend::BatchLayoutHost host;
  BENCH_CHECK(step.to_layout(kBlock, &host));
  backend::BatchLayout l;
  BENCH_CHECK(be.upload_layout(host, kBlock, &l));
  Buffer cache = make_buffer(be, DType::BF16, {(T + kBlock - 1) / kBlock, kBlock, kWidth});
  Buffer q = make_buffer(be, DType::BF16, {T, heads, kNope + kRope});
  Buffer w = make_buffer(be, DType::BF16, {heads * (kNope + kV), kLora});
  Buffer out = make_buffer(be, DType::BF16, {T, heads * kV});
  BENCH_CHECK(be.fill_random(cache.view, 11, -2, 2));
  BENCH_CHECK(be.fill_random(q.view, 12, -2, 2));
  BENCH_CHECK(be.fill_random(w.view, 13, -0.15f, 0.15f));
  const backend::LinearWeight lw{w.view};
  backend::MlaAttentionArgs a = attention_args(heads);
  a.q = q.view;
  a.cache = cache.view;
  a.kv_b = &lw;
  a.layout = &l;
  a.out = out.view;
  Buffer scratch = plan_scratch(be, a);
  Arena arena(scratch.alloc.data(), scratch.alloc.size(), be.device());
  a.scratch = &arena;
  std::vector<double> ms;
  for (int i = 0; i < reps + 2; ++i) {
    const double t = value_or_die(be.time_ms([&] { return be.mla_attention(a); }), "prefill");
    if (i >= 2) ms.push_back(t);
  }
  const double Td = T, H = heads;
  const double sdpa_flops = 2.0 * H * (Td * (Td + 1) / 2) * (kNope + kRope + kV);  // causal q.k + p.v
  const double expand_flops = 2.0 * Td * kLora * H * (kNope + kV);
  const double bytes = Td * H * (2 * (kNope + kRope) + 2 * kV) * 2;  // q, k, v, o as SDPA sees them
  char name[64], anchor[96];
  std::snprintf(name, sizeof name, "prefill %s T=%d H=%d", path, T, heads);
  std::snprintf(anchor, sizeof anchor, "[SDPA %s ms; incl. expand %.1f GFLOP]",
                T == 2048   ? "0.106"
                : T == 8192 ? "1.24"
                            : "-",
                expand_flops / 1e9);
  print_row(name, median(ms), bytes, sdpa_flops + expand_flops, c, anchor);
  const double sdpa_tf = sdpa_flops / (median(ms) * 1e-3) / 1e12;
  std::printf("%-26s SDPA-equivalent rate %.1f TF/s (anchor %s TF/s)\n", "", sdpa_tf,
              T == 2048   ? "403"
              : T == 8192 ? "554"
                          : "-");
  BENCH_CHECK(be.set_option("mla_prefill", "auto"));
}

// The cuDNN path's K copy alone (sdpa_inputs.cu: [k_nope ; k_pe] per row and head) at a T-row prefill: part
// of that path's prefill row above, and what rill's kernel does not pay.
void bench_k_build(backend::Backend& be, int T, int heads, int reps, const Ceilings& c) {
  Buffer kvx = make_buffer(be, DType::BF16, {T, heads * (kNope + kV)});
  Buffer ctx = make_buffer(be, DType::BF16, {T, kWidth});
  // K rows, then the zeroed tail the kernel writes after them (params.h kSdpaTailRows).
  const int64_t tail = int64_t(cuda::mla::kSdpaTailRows) * heads * cuda::mla::kKvbRows;
  Buffer k = make_buffer(be, DType::BF16, {int64_t(T) * heads * (kNope + kRope) + tail});
  BENCH_CHECK(be.fill_random(kvx.view, 31, -1, 1));
  BENCH_CHECK(be.fill_random(ctx.view, 32, -1, 1));
  cuda::mla::KBuildParams p{};
  p.kvx = static_cast<const cuda::mla::bf16*>(kvx.view.data);
  p.ctx = static_cast<const cuda::mla::bf16*>(ctx.view.data);
  p.k = static_cast<cuda::mla::bf16*>(k.view.data);
  p.rows = T;
  p.n_heads = heads;
  const auto stream = static_cast<cudaStream_t>(be.native_stream());
  std::vector<double> ms;
  for (int i = 0; i < reps + 2; ++i) {
    const double t = value_or_die(be.time_ms([&] { return cuda::mla::launch_k_build(p, stream); }), "k build");
    if (i >= 2) ms.push_back(t);
  }
  const double bytes =
      double(T) * heads * (kNope + kNope + kRope) * 2 + double(T) * kRope * 2 + double(tail) * 2;
  char name[64];
  std::snprintf(name, sizeof name, "cuDNN K copy T=%d H=%d", T, heads);
  print_row(name, median(ms), bytes, 0, c, "[in the cudnn prefill row]");
}

// B decode tokens, each at context `ctx`; the cache pool is rotated across repetitions so the timed reads
// come from HBM, not L2 (METHOD.md).
void bench_decode(backend::Backend& be, int B, int ctx, int heads, int reps, const Ceilings& c) {
  const int blocks_per_seq = (ctx + kBlock - 1) / kBlock, set_blocks = B * blocks_per_seq;
  const double set_bytes = double(set_blocks) * kBlock * kWidth * 2;
  const int n_sets = std::clamp(int(std::ceil(256e6 / set_bytes)), 1, 64);
  model::StepBatch step;
  for (int i = 0; i < B; ++i) {
    model::SequenceStep s;
    s.start_pos = ctx - 1;
    s.n_new = 1;
    for (int b = 0; b < blocks_per_seq; ++b)
      s.block_table.push_back((b * B + i) % set_blocks);  // interleaved
    step.seqs.push_back(s);
    step.token_ids.push_back(0);
  }
  backend::BatchLayoutHost host;
  BENCH_CHECK(step.to_layout(kBlock, &host));
  backend::BatchLayout l;
  BENCH_CHECK(be.upload_layout(host, kBlock, &l));
  Buffer pool = make_buffer(be, DType::BF16, {int64_t(n_sets) * set_blocks, kBlock, kWidth});
  Buffer q = make_buffer(be, DType::BF16, {B, heads, kNope + kRope});
  Buffer w = make_buffer(be, DType::BF16, {heads * (kNope + kV), kLora});
  Buffer out = make_buffer(be, DType::BF16, {B, heads * kV});
  BENCH_CHECK(be.fill_random(pool.view, 21, -2, 2));
  BENCH_CHECK(be.fill_random(q.view, 22, -2, 2));
  BENCH_CHECK(be.fill_random(w.view, 23, -0.15f, 0.15f));
  const backend::LinearWeight lw{w.view};
  backend::MlaAttentionArgs a = attention_args(heads);
  a.q = q.view;
  a.kv_b = &lw;
  a.layout = &l;
  a.out = out.view;
  a.cache = pool.view.narrow(0, 0, set_blocks);
  Buffer scratch = plan_scratch(be, a);
  Arena arena(scratch.alloc.data(), scratch.alloc.size(), be.device());
  a.scratch = &arena;
  std::vector<double> ms;
  for (int i = 0; i < reps + 2; ++i) {
    a.cache = pool.view.narrow(0, int64_t(i % n_sets) * set_blocks, set_blocks);
    const double t = value_or_die(be.time_ms([&] { return be.mla_attention(a); }), "decode");
    if (i >= 2) ms.push_back(t);
  }
  const double cache_bytes = double(B) * ctx * kWidth * 2;
  const double weight_bytes = double(heads) * (kNope + kV) * kLora * 2;
  const double flops =
      2.0 * B * heads * double(ctx) * (kWidth + kLora) + 2.0 * 2.0 * B * heads * kNope * kLora;
  char name[64], anchor[128];
  std::snprintf(name, sizeof name, "decode B=%d ctx=%d H=%d", B, ctx, heads);
  std::snprintf(anchor, sizeof anchor,
                "[+%.1f MB kv_b: %.0f GB/s all bytes; torch naive %s; FlashMLA ~90%% HBM]",
                weight_bytes / 1e6, (cache_bytes + weight_bytes) / (median(ms) * 1e-3) / 1e9,
                B == 1    ? "143 us"
                : B == 64 ? "239 us"
                          : "-");
  print_row(name, median(ms), cache_bytes, flops, c, anchor);
}

}  // namespace
}  // namespace rill

int main(int argc, char** argv) {
  using namespace rill;
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  auto made = backend::make_backend("cuda");
  if (!made.ok()) {
    std::printf("mla_bench: skipped (%s)\n", made.status().message().c_str());
    return 0;
  }
  backend::Backend& be = *made.value();
  std::mt19937 rng(std::random_device{}());
  if (!validate(be, rng)) return 1;
  const int reps = quick ? 5 : 20;
  const Ceilings c = measure_ceilings(be, quick ? 3 : 5);
  std::printf("ceilings: D2D copy %.0f GB/s (read + write), cuBLASLt bf16 8192^3 %.0f TF/s\n", c.copy_gbps,
              c.gemm_tflops);
  for (int T : quick ? std::vector<int>{2048} : std::vector<int>{2048, 8192}) {
    for (const char* path : prefill_paths(be)) bench_prefill(be, path, T, 32, reps, c);
    bench_k_build(be, T, 32, reps, c);
  }
  for (int B : quick ? std::vector<int>{1, 32} : std::vector<int>{1, 8, 32, 128, 256})
    bench_decode(be, B, 4096, 32, reps, c);
  return 0;
}
