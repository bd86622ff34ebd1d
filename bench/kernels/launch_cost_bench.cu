// Launch-cost lab (issue #36): does a kernel's instruction footprint cost a decode step time? A batch-1 decode
// step replays ~500 launches of ~20 kernels whose SASS is 5-37 KB each (the GEMVs' unrolled variants), and the
// per-launch profile puts each launch ~6 us above its bytes at the copy rate. Each launch's CTAs fetch the
// kernel's code into their SM's instruction caches from L2 as they run it; straight-line code is fetched once
// per SM per launch, a loop only once. This lab separates that cost from the instructions themselves:
//   - loop:     a 64-FMA body (1 KB of code) run `size` / 1 KB times;
//   - straight: the same FMAs as straight-line code of `size` KB (every instruction fetched once per launch);
//   - straight x 8: eight distinct kernels of that size launched in turn (as a decode step's kernels follow one
//     another: the caches cannot keep them all, and each launch starts cold).
// Every kernel computes the same four FMA chains, so their results are compared bit for bit first (exit 1 on a
// mismatch). Then each is replayed from a CUDA graph of back-to-back launches (no host gaps), one warp per SM and
// eight, and the table gives microseconds per launch; straight minus loop is the instruction fetch. An empty
// kernel's launch is the floor. 0 and a note without a GPU.
//
//   launch_cost_bench [--reps N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace {

#define CK(x)                                                                                 \
  do {                                                                                        \
    const cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int kBodyFmas = 64;  // one FMA is one 16-byte instruction: a body is 1 KB of code
constexpr int kLaunchesPerGraph = 64;
constexpr int kDistinct = 8;

// Four independent FMA chains (so the issue rate, not the FMA latency, bounds a warp), kept apart by asm volatile.
struct Chains {
  float a, b, c, d;
};
__device__ __forceinline__ void fma4(Chains& s, float m, float k) {
  asm volatile("fma.rn.f32 %0, %0, %4, %5;\n\tfma.rn.f32 %1, %1, %4, %5;\n\t"
               "fma.rn.f32 %2, %2, %4, %5;\n\tfma.rn.f32 %3, %3, %4, %5;"
               : "+f"(s.a), "+f"(s.b), "+f"(s.c), "+f"(s.d)
               : "f"(m), "f"(k));
}
__device__ __forceinline__ void body(Chains& s, float m, float k) {
#pragma unroll
  for (int i = 0; i < kBodyFmas / 4; ++i) fma4(s, m, k);
}
__device__ __forceinline__ Chains start() {
  const float t = float(threadIdx.x);
  return {t, t + 0.25f, t + 0.5f, t + 0.75f};
}
__device__ __forceinline__ void finish(const Chains& s, float* out) {
  if (blockIdx.x == 0) out[threadIdx.x] = s.a + s.b + s.c + s.d;
}

// kBodies bodies as a loop (the code of one body), or unrolled into straight-line code. kId only makes distinct
// kernels of the same size: each instantiation has its own code, at its own addresses.
template <int kBodies>
__global__ void loop_kernel(float m, float k, float* out) {
  Chains s = start();
#pragma unroll 1
  for (int i = 0; i < kBodies; ++i) body(s, m, k);
  finish(s, out);
}
template <int kBodies, int kId>
__global__ void straight_kernel(float m, float k, float* out) {
  Chains s = start();
#pragma unroll
  for (int i = 0; i < kBodies; ++i) body(s, m, k);
  static_assert(kId >= 0);
  finish(s, out);
}
__global__ void empty_kernel(float, float, float*) {}

using KernelFn = void (*)(float, float, float*);

template <int kBodies, int... kIds>
std::vector<KernelFn> straight_set(std::integer_sequence<int, kIds...>) {
  return {&straight_kernel<kBodies, kIds>...};
}

struct Size {
  int kb;
  KernelFn loop;
  std::vector<KernelFn> straight;  // kDistinct kernels
};

template <int kBodies>
Size make_size() {
  return {kBodies, &loop_kernel<kBodies>, straight_set<kBodies>(std::make_integer_sequence<int, kDistinct>{})};
}

// Microseconds per launch: a graph of kLaunchesPerGraph launches cycling over `fns`, replayed `reps` times
// after a warm-up; the median replay.
double per_launch_us(const std::vector<KernelFn>& fns, int ctas, int threads, float* out, int reps,
                     cudaStream_t st) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kLaunchesPerGraph; ++i)
    fns[size_t(i) % fns.size()]<<<ctas, threads, 0, st>>>(1.0000001f, 1e-7f, out);
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, st));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / kLaunchesPerGraph);
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The same chains from every kernel of a size: bit-identical outputs of block 0's threads.
bool check(const Size& s, float* out, int threads, cudaStream_t st) {
  std::vector<float> ref(static_cast<size_t>(threads)), got(static_cast<size_t>(threads));
  s.loop<<<1, threads, 0, st>>>(1.0000001f, 1e-7f, out);
  CK(cudaMemcpyAsync(ref.data(), out, ref.size() * 4, cudaMemcpyDeviceToHost, st));
  CK(cudaStreamSynchronize(st));
  for (KernelFn f : s.straight) {
    CK(cudaMemsetAsync(out, 0, got.size() * 4, st));
    f<<<1, threads, 0, st>>>(1.0000001f, 1e-7f, out);
    CK(cudaMemcpyAsync(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    if (std::memcmp(ref.data(), got.data(), ref.size() * 4) != 0) {
      std::fprintf(stderr, "launch_cost_bench: the straight-line kernel of %d KB differs from the loop\n", s.kb);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 21;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: launch_cost_bench [--reps N]\n");
      return 2;
    }
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("launch_cost_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  float* out = nullptr;
  CK(cudaMalloc(&out, 1024 * sizeof(float)));
  const std::vector<Size> sizes = {make_size<1>(), make_size<8>(), make_size<32>(), make_size<96>()};
  for (const Size& s : sizes)
    if (!check(s, out, 256, st)) return 1;
  std::printf("%s, %d SMs; microseconds per launch, graphs of %d back-to-back launches, median of %d\n", prop.name,
              prop.multiProcessorCount, kLaunchesPerGraph, reps);
  for (const int warps : {1, 8}) {
    const int ctas = prop.multiProcessorCount, threads = 32 * warps;
    std::printf("\none CTA of %d warp(s) per SM: empty kernel %.2f us\n", warps,
                per_launch_us({&empty_kernel}, ctas, threads, out, reps, st));
    std::printf("%8s %10s %10s %12s %14s %18s\n", "code KB", "FMAs", "loop", "straight", "straight x 8",
                "fetch (x8 - loop)");
    for (const Size& s : sizes) {
      const double loop = per_launch_us({s.loop}, ctas, threads, out, reps, st);
      const double one = per_launch_us({s.straight[0]}, ctas, threads, out, reps, st);
      const double many = per_launch_us(s.straight, ctas, threads, out, reps, st);
      std::printf("%8d %10d %10.2f %12.2f %14.2f %18.2f\n", s.kb, s.kb * kBodyFmas, loop, one, many, many - loop);
    }
  }
  CK(cudaFree(out));
  CK(cudaStreamDestroy(st));
  return 0;
}
