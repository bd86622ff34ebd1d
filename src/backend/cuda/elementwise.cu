// Embedding, residual add, GLU activations, sigmoid gate, row gather, seeded random fill.
// Every kernel is a grid-stride loop over (row, vector) items: 16-byte accesses (8 bf16) when the row width,
// every row stride and every base pointer allow it, single elements otherwise. Math in fp32, results
// rounded to bf16 with round-to-nearest-even. Memory-bound: one read of each input, one write of the output.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/elementwise.h"
#include "core/rng.h"

namespace rill::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

// Grid for a grid-stride loop over n items: enough blocks to fill the GPU, not one per item.
unsigned grid_for(int64_t n, const CudaContext& cx) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(blocks, int64_t(std::max(cx.sm_count, 1)) * 16)));
}

// out = op(a, b) elementwise over [M, N] rows (each with its own row stride), each operand bf16 or fp32.
template <int kVec, typename A, typename B, typename O, typename Op>
__global__ void binary_rows_kernel(const A* a, int64_t lda, const B* b, int64_t ldb, O* out, int64_t ldo,
                                   int64_t M, int64_t N, Op op) {
  pdl_prologue();
  const int64_t per_row = N / kVec, total = M * per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = (i - r * per_row) * kVec;
    float x[kVec], y[kVec];
    load_row<kVec>(a + r * lda + c, x);
    load_row<kVec>(b + r * ldb + c, y);
#pragma unroll
    for (int j = 0; j < kVec; ++j) x[j] = op(x[j], y[j]);
    store_row<kVec>(out + r * ldo + c, x);
  }
}

struct AddOp {
  __device__ float operator()(float x, float y) const { return x + y; }
};
// Spec §3.4 (K3 MLA gate): sigmoid in fp32 rounded to bf16, then the bf16 x bf16 product rounded again.
struct SigmoidGateOp {
  __device__ float operator()(float x, float g) const {
    const float s = __bfloat162float(__float2bfloat16_rn(1.0f / (1.0f + expf(-g))));
    return x * s;
  }
};
struct SiluGluOp {
  __device__ float operator()(float g, float u) const { return g / (1.0f + expf(-g)) * u; }
};
// SiTU-GLU (spec §3.6), the CPU formula term for term.
struct SituGluOp {
  float beta, linear_beta;
  __device__ float operator()(float g, float u) const {
    const float act = beta * tanhf(g / beta) * (1.0f / (1.0f + expf(-g)));
    return act * (linear_beta * tanhf(u / linear_beta));
  }
};

template <typename A, typename B, typename O, typename Op>
Status launch_binary_typed(const char* name, const TensorView& a, const TensorView& b, const TensorView& out,
                           Op op, const CudaContext& cx) {
  const int64_t M = out.size(0), N = out.size(1);
  const bool vec = N % 8 == 0 && a.stride(0) % 8 == 0 && b.stride(0) % 8 == 0 && out.stride(0) % 8 == 0 &&
                   aligned16(a.data) && aligned16(b.data) && aligned16(out.data);
  const int64_t items = vec ? M * (N / 8) : M * N;
  const auto* pa = static_cast<const A*>(a.data);
  const auto* pb = static_cast<const B*>(b.data);
  auto* po = static_cast<O*>(out.data);
  const LaunchShape shape{dim3(grid_for(items, cx)), dim3(kThreads)};
  if (vec)
    return launch(name, shape, cx.stream, binary_rows_kernel<8, A, B, O, Op>, pa, a.stride(0), pb,
                  b.stride(0), po, out.stride(0), M, N, op);
  return launch(name, shape, cx.stream, binary_rows_kernel<1, A, B, O, Op>, pa, a.stride(0), pb, b.stride(0),
                po, out.stride(0), M, N, op);
}

// bf16 operands and output; with `f32_accumulator`, `a` and `out` may instead both be fp32 (a running sum
// kept in fp32, such as K3's AttnRes partial sum, plus a bf16 sublayer output).
template <typename Op>
Status launch_binary(const char* name, const TensorView& a, const TensorView& b, const TensorView& out, Op op,
                     const CudaContext& cx, bool f32_accumulator = false) {
  const bool f32 = f32_accumulator && a.dtype == DType::F32 && out.dtype == DType::F32;
  if ((!f32 && (a.dtype != DType::BF16 || out.dtype != DType::BF16)) || b.dtype != DType::BF16)
    return invalid_argument("{}: CUDA activations must be BF16{} ({}, {}, {})", name,
                            f32_accumulator ? " (or an F32 accumulator)" : "", a.describe(), b.describe(),
                            out.describe());
  if (out.size(0) == 0 || out.size(1) == 0) return {};
  if (f32) return launch_binary_typed<float, bf16, float>(name, a, b, out, op, cx);
  return launch_binary_typed<bf16, bf16, bf16>(name, a, b, out, op, cx);
}

// Rows of a [V, H] table gathered by id; an id outside [0, V) yields a zero row (the host cannot see ids).
// O: bf16 activations, or fp32 (the model's residual stream).
template <typename T, int kVec, typename O = bf16>
__global__ void embed_kernel(const T* table, int64_t ldt, int64_t V, const int32_t* ids, O* out, int64_t ldo,
                             int64_t n_tokens, int64_t H) {
  pdl_prologue();
  const int64_t per_row = H / kVec, total = n_tokens * per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, c = (i - t * per_row) * kVec;
    const int64_t id = ids[t];
    O* dst = out + t * ldo + c;
    if constexpr (kVec == 8) {
      static_assert(sizeof(T) == 2 && sizeof(O) == 2, "the vector path copies bf16 rows");
      uint4 v = make_uint4(0, 0, 0, 0);
      if (id >= 0 && id < V) v = *reinterpret_cast<const uint4*>(table + id * ldt + c);
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      float x = 0.0f;
      if (id >= 0 && id < V) {
        if constexpr (sizeof(T) == 4)
          x = table[id * ldt + c];
        else if constexpr (std::is_same_v<T, __half>)
          x = __half2float(table[id * ldt + c]);
        else
          x = __bfloat162float(table[id * ldt + c]);
      }
      if constexpr (std::is_same_v<O, float>)
        dst[0] = x;
      else
        dst[0] = __float2bfloat16_rn(x);
    }
  }
}

// Row r of out = row rows[r] of x, copied in units of U (16, 4 or 1 bytes); a row index outside [0, n_src)
// yields a zero row.
template <typename U>
__global__ void gather_rows_kernel(const char* x, int64_t ldx_bytes, int64_t n_src, const int32_t* rows,
                                   char* out, int64_t ldo_bytes, int64_t R, int64_t units_per_row) {
  pdl_prologue();
  const int64_t total = R * units_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / units_per_row, c = i - r * units_per_row;
    const int64_t src = rows[r];
    U v{};
    if (src >= 0 && src < n_src) v = reinterpret_cast<const U*>(x + src * ldx_bytes)[c];
    reinterpret_cast<U*>(out + r * ldo_bytes)[c] = v;
  }
}

// The CpuBackend::fill_random expressions with explicit round-to-nearest operations, so no fused multiply-add
// changes a value: x = lo + (hi - lo) * u; U8: lo + floor((hi - lo + 1) * u).
template <DType kType>
__global__ void fill_random_kernel(void* data, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = uniform01(seed, uint64_t(i));
    if constexpr (kType == DType::U8) {
      const float v = __fadd_rn(lo, floorf(__fmul_rn(__fadd_rn(__fsub_rn(hi, lo), 1.0f), u)));
      static_cast<uint8_t*>(data)[i] = uint8_t(v);
    } else {
      const float v = __fadd_rn(lo, __fmul_rn(__fsub_rn(hi, lo), u));
      if constexpr (kType == DType::F32)
        static_cast<float*>(data)[i] = v;
      else if constexpr (kType == DType::BF16)
        static_cast<bf16*>(data)[i] = __float2bfloat16_rn(v);
      else
        static_cast<__half*>(data)[i] = __float2half_rn(v);
    }
  }
}

}  // namespace

Status launch_embed(const backend::EmbedArgs& a, const CudaContext& cx) {
  if (a.out.dtype != DType::BF16 && a.out.dtype != DType::F32)
    return invalid_argument("embed: CUDA output must be BF16 or F32, got {}", a.out.describe());
  const int64_t T = a.ids.size(0), H = a.table.size(1), V = a.table.size(0);
  if (T == 0 || H == 0) return {};
  const auto* ids = a.ids.ptr<const int32_t>();
  if (a.out.dtype == DType::F32) {  // the fp32 residual stream: exact widening of the table's values
    auto* out32 = static_cast<float*>(a.out.data);
    const int64_t ldt = a.table.stride(0), ldo = a.out.stride(0);
    const unsigned grid = grid_for(T * H, cx);
    switch (a.table.dtype) {
      case DType::BF16:
        RILL_TRY(launch("embed", {dim3(grid), dim3(kThreads)}, cx.stream, embed_kernel<bf16, 1, float>,
                        static_cast<const bf16*>(a.table.data), ldt, V, ids, out32, ldo, T, H));
        break;
      case DType::F16:
        RILL_TRY(launch("embed", {dim3(grid), dim3(kThreads)}, cx.stream, embed_kernel<__half, 1, float>,
                        static_cast<const __half*>(a.table.data), ldt, V, ids, out32, ldo, T, H));
        break;
      case DType::F32:
        RILL_TRY(launch("embed", {dim3(grid), dim3(kThreads)}, cx.stream, embed_kernel<float, 1, float>,
                        static_cast<const float*>(a.table.data), ldt, V, ids, out32, ldo, T, H));
        break;
      default:
        return invalid_argument("embed: unsupported table dtype {}", dtype_name(a.table.dtype));
    }
    RILL_CUDA_CHECK_LAUNCH("embed");
    return {};
  }
  auto* out = static_cast<bf16*>(a.out.data);
  const int64_t ldt = a.table.stride(0), ldo = a.out.stride(0);
  switch (a.table.dtype) {
    case DType::BF16: {
      const bool vec =
          H % 8 == 0 && ldt % 8 == 0 && ldo % 8 == 0 && aligned16(a.table.data) && aligned16(out);
      const auto* table = static_cast<const bf16*>(a.table.data);
      if (vec)
        RILL_TRY(launch("embed", {dim3(grid_for(T * (H / 8), cx)), dim3(kThreads)}, cx.stream,
                        embed_kernel<bf16, 8>, table, ldt, V, ids, out, ldo, T, H));
      else
        RILL_TRY(launch("embed", {dim3(grid_for(T * H, cx)), dim3(kThreads)}, cx.stream,
                        embed_kernel<bf16, 1>, table, ldt, V, ids, out, ldo, T, H));
      break;
    }
    case DType::F16:
      RILL_TRY(launch("embed", {dim3(grid_for(T * H, cx)), dim3(kThreads)}, cx.stream,
                      embed_kernel<__half, 1>, static_cast<const __half*>(a.table.data), ldt, V, ids, out,
                      ldo, T, H));
      break;
    case DType::F32:
      RILL_TRY(launch("embed", {dim3(grid_for(T * H, cx)), dim3(kThreads)}, cx.stream, embed_kernel<float, 1>,
                      static_cast<const float*>(a.table.data), ldt, V, ids, out, ldo, T, H));
      break;
    default:
      return invalid_argument("embed: unsupported table dtype {}", dtype_name(a.table.dtype));
  }
  RILL_CUDA_CHECK_LAUNCH("embed");
  return {};
}

Status launch_add(const backend::AddArgs& a, const CudaContext& cx) {
  return launch_binary("add", a.inout, a.x, a.inout, AddOp{}, cx, /*f32_accumulator=*/true);
}

Status launch_sigmoid_gate(const backend::SigmoidGateArgs& a, const CudaContext& cx) {
  return launch_binary("sigmoid_gate", a.inout, a.gate, a.inout, SigmoidGateOp{}, cx);
}

Status launch_glu(const backend::GluArgs& a, const CudaContext& cx) {
  switch (a.activation) {
    case backend::Activation::Silu:
      return launch_binary("glu", a.gate, a.up, a.out, SiluGluOp{}, cx);
    case backend::Activation::Situ:
      return launch_binary("glu", a.gate, a.up, a.out, SituGluOp{a.beta, a.linear_beta}, cx);
  }
  return internal_error("glu: unknown activation");
}

Status launch_gather_rows(const backend::GatherRowsArgs& a, const CudaContext& cx) {
  const int64_t R = a.rows.size(0), T = a.x.size(0);
  const int64_t esize = int64_t(dtype_size(a.x.dtype));
  const int64_t row_bytes = a.x.size(1) * esize, ldx = a.x.stride(0) * esize, ldo = a.out.stride(0) * esize;
  if (R == 0 || row_bytes == 0) return {};
  const auto* x = static_cast<const char*>(a.x.data);
  auto* out = static_cast<char*>(a.out.data);
  const auto* rows = a.rows.ptr<const int32_t>();
  const uint64_t bits = uint64_t(row_bytes) | uint64_t(ldx) | uint64_t(ldo) | reinterpret_cast<uintptr_t>(x) |
                        reinterpret_cast<uintptr_t>(out);
  if ((bits & 15) == 0)
    RILL_TRY(launch("gather_rows", {dim3(grid_for(R * row_bytes / 16, cx)), dim3(kThreads)}, cx.stream,
                    gather_rows_kernel<uint4>, x, ldx, T, rows, out, ldo, R, row_bytes / 16));
  else if ((bits & 3) == 0)
    RILL_TRY(launch("gather_rows", {dim3(grid_for(R * row_bytes / 4, cx)), dim3(kThreads)}, cx.stream,
                    gather_rows_kernel<uint32_t>, x, ldx, T, rows, out, ldo, R, row_bytes / 4));
  else
    RILL_TRY(launch("gather_rows", {dim3(grid_for(R * row_bytes, cx)), dim3(kThreads)}, cx.stream,
                    gather_rows_kernel<uint8_t>, x, ldx, T, rows, out, ldo, R, row_bytes));
  RILL_CUDA_CHECK_LAUNCH("gather_rows");
  return {};
}

Status launch_fill_random(TensorView t, uint64_t seed, float lo, float hi, const CudaContext& cx) {
  if (!t.is_contiguous()) return internal_error("fill_random: view {} is not contiguous", t.describe());
  const int64_t n = t.numel();
  if (n == 0) return {};
  const unsigned grid = grid_for(n, cx);
  switch (t.dtype) {
    case DType::F32:
      fill_random_kernel<DType::F32><<<grid, kThreads, 0, cx.stream>>>(t.data, n, seed, lo, hi);
      break;
    case DType::BF16:
      fill_random_kernel<DType::BF16><<<grid, kThreads, 0, cx.stream>>>(t.data, n, seed, lo, hi);
      break;
    case DType::F16:
      fill_random_kernel<DType::F16><<<grid, kThreads, 0, cx.stream>>>(t.data, n, seed, lo, hi);
      break;
    case DType::U8:
      fill_random_kernel<DType::U8><<<grid, kThreads, 0, cx.stream>>>(t.data, n, seed, lo, hi);
      break;
    default:
      return internal_error("fill_random: unsupported dtype {}", dtype_name(t.dtype));
  }
  RILL_CUDA_CHECK_LAUNCH("fill_random");
  return {};
}

}  // namespace rill::cuda
