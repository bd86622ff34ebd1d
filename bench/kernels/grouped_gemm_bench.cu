// Lab for issue #18: how fast cuBLAS runs the MoE prefill's expert GEMMs at the Kimi-Linear-48B shape, to
// decide (by measurement) whether rill's grouped GEMM should give way to the CUDA toolkit's. For T tokens
// routed top-8 over 256 experts it times, for gate_up ([m_e, 2304] x [2304, 2048] per expert) and down
// ([m_e, 1024] x [1024, 2304]):
//   grouped  cublasGemmGroupedBatchedEx, one call over every expert's problem (sizes on the host)
//   looped   one cublasGemmEx per expert
//   dense    one cublasGemmEx over all T * 8 rows against a single expert: the same FLOPs as one GEMM, the
//            ceiling a grouped GEMM can approach
// Routing is uniform random or skewed (expert e drawn with weight 1 / (e + 8)). CUDA events, median of reps.
//
//   grouped_gemm_bench [--tokens T] [--reps N]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kE = 256, kTopK = 8, kH = 2304, kI = 1024;

#define CK(x)                                                       \
  do {                                                              \
    const cudaError_t e_ = (x);                                     \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                 \
    }                                                               \
  } while (0)
#define CB(x)                                                      \
  do {                                                             \
    const cublasStatus_t s_ = (x);                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                             \
      std::fprintf(stderr, "%s: cuBLAS status %d\n", #x, int(s_)); \
      std::exit(2);                                                \
    }                                                              \
  } while (0)

__global__ void fill_kernel(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u + seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = __float2bfloat16((float(x & 0xffff) / 65536.0f - 0.5f) * 0.05f);
  }
}

__nv_bfloat16* alloc_filled(size_t n, uint32_t seed) {
  __nv_bfloat16* p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(__nv_bfloat16)));
  fill_kernel<<<1024, 256>>>(p, n, seed);
  CK(cudaGetLastError());
  return p;
}

double time_median(int reps, const std::function<void()>& body) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < reps + 2; ++i) {
    CK(cudaEventRecord(a));
    body();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    if (i >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

// Tokens per expert for T tokens routed top-8 (distinct experts per token).
std::vector<int> route(int T, bool skewed, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> w(kE);
  for (int e = 0; e < kE; ++e) w[e] = skewed ? 1.0 / (e + 8) : 1.0;
  std::vector<int> counts(kE, 0);
  for (int t = 0; t < T; ++t) {
    std::vector<double> ww = w;
    for (int j = 0; j < kTopK; ++j) {
      std::discrete_distribution<int> d(ww.begin(), ww.end());
      const int e = d(rng);
      ++counts[e];
      ww[e] = 0;
    }
  }
  return counts;
}

struct Shape {
  const char* name;
  int n, k;  // out features, in features
};

}  // namespace

int main(int argc, char** argv) {
  int T = 8192, reps = 10;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc)
      T = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick"))
      reps = 5;
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("grouped_gemm_bench: no usable CUDA GPU, nothing to measure\n");
    return 0;
  }
  cublasHandle_t h;
  CB(cublasCreate(&h));
  const int rows = T * kTopK;
  const Shape shapes[] = {{"gate_up", 2 * kI, kH}, {"down", kH, kI}};
  std::printf(
      "grouped_gemm_bench: %d tokens x top-%d of %d experts (%d rows), bf16 in/out, fp32 accumulate\n", T,
      kTopK, kE, rows);
  std::printf("%-8s %-8s %10s %10s %10s   %s\n", "routing", "gemm", "grouped ms", "looped ms", "dense ms",
              "TFLOP/s grouped / looped / dense");
  for (const Shape& s : shapes) {
    __nv_bfloat16* w = alloc_filled(size_t(kE) * s.n * s.k, 7);
    __nv_bfloat16* x = alloc_filled(size_t(rows) * s.k, 11);
    __nv_bfloat16* y = nullptr;
    CK(cudaMalloc(&y, size_t(rows) * s.n * sizeof(__nv_bfloat16)));
    for (bool skewed : {false, true}) {
      const std::vector<int> counts = route(T, skewed, 5);
      // Problem e (column-major): C_e^T [n, m_e] = W_e [n, k] . X_e^T [k, m_e], i.e. row-major Y_e = X_e
      // W_e^T.
      std::vector<const void*> a_ptr, b_ptr;
      std::vector<void*> c_ptr;
      std::vector<int> m_arr, n_arr, k_arr, lda, ldb, ldc, group_size;
      std::vector<cublasOperation_t> ta, tb;
      std::vector<float> alpha, beta;
      int off = 0;
      for (int e = 0; e < kE; ++e) {
        if (counts[e] == 0) continue;
        a_ptr.push_back(w + size_t(e) * s.n * s.k);
        b_ptr.push_back(x + size_t(off) * s.k);
        c_ptr.push_back(y + size_t(off) * s.n);
        m_arr.push_back(s.n), n_arr.push_back(counts[e]), k_arr.push_back(s.k);
        lda.push_back(s.k), ldb.push_back(s.k), ldc.push_back(s.n);
        ta.push_back(CUBLAS_OP_T), tb.push_back(CUBLAS_OP_N);
        alpha.push_back(1.0f), beta.push_back(0.0f);
        group_size.push_back(1);
        off += counts[e];
      }
      const int G = int(a_ptr.size());
      void** dev_ptrs = nullptr;
      CK(cudaMalloc(&dev_ptrs, 3 * size_t(G) * sizeof(void*)));
      CK(cudaMemcpy(dev_ptrs, a_ptr.data(), G * sizeof(void*), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dev_ptrs + G, b_ptr.data(), G * sizeof(void*), cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dev_ptrs + 2 * G, c_ptr.data(), G * sizeof(void*), cudaMemcpyHostToDevice));
      const double flops = 2.0 * rows * s.n * s.k;
      const double grouped = time_median(reps, [&] {
        CB(cublasGemmGroupedBatchedEx(
            h, ta.data(), tb.data(), m_arr.data(), n_arr.data(), k_arr.data(), alpha.data(),
            reinterpret_cast<const void* const*>(dev_ptrs), CUDA_R_16BF, lda.data(),
            reinterpret_cast<const void* const*>(dev_ptrs + G), CUDA_R_16BF, ldb.data(), beta.data(),
            dev_ptrs + 2 * G, CUDA_R_16BF, ldc.data(), G, group_size.data(), CUBLAS_COMPUTE_32F));
      });
      const float one = 1.0f, zero = 0.0f;
      const double looped = time_median(reps, [&] {
        for (int g = 0; g < G; ++g)
          CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, n_arr[g], s.k, &one, a_ptr[g], CUDA_R_16BF, s.k,
                          b_ptr[g], CUDA_R_16BF, s.k, &zero, c_ptr[g], CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT));
      });
      const double dense = time_median(reps, [&] {
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, rows, s.k, &one, w, CUDA_R_16BF, s.k, x,
                        CUDA_R_16BF, s.k, &zero, y, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
      });
      std::printf("%-8s %-8s %10.3f %10.3f %10.3f   %.0f / %.0f / %.0f (%d experts, %d..%d rows)\n",
                  skewed ? "skewed" : "uniform", s.name, grouped, looped, dense, flops / grouped * 1e-9,
                  flops / looped * 1e-9, flops / dense * 1e-9, G,
                  *std::min_element(n_arr.begin(), n_arr.end()),
                  *std::max_element(n_arr.begin(), n_arr.end()));
      CK(cudaFree(dev_ptrs));
    }
    CK(cudaFree(w));
    CK(cudaFree(x));
    CK(cudaFree(y));
  }
  CB(cublasDestroy(h));
  return 0;
}
