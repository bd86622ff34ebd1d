// y[m, n] = sum_k x[m, k] W[n, k] for M <= 4 rows of x, for one weight or a group of independent ones in one
// launch (gemm_group: the KDA input projections of a decode step). A CTA of 8 warps computes 8 / S output
// rows of one part with S warps per row, each warp streaming a contiguous 1/S of the row with 16-byte loads
// (four chunks in flight per lane), x read through L1 (it is small and shared by every warp), fp32
// accumulation, a warp reduction, then the S partial sums of a row added in shared memory in a fixed order
// (deterministic). S (1, 2, 4 or 8) is chosen per part on the host so that enough warps stream at once to
// cover HBM latency: one warp per row left the short-N projections (N = 32..2304) on a few SMs with one or
// two loads in flight per lane.
//
// Weight formats are load policies of the one kernel body (style.md §7.10): Bf16Weights reads 8 bf16 weights
// as one 16-byte chunk; Fp8Weights<16> reads 16 E4M3 codes as one 16-byte chunk (half the bytes of a decode
// step's weight stream in the same loads in flight: the 8-byte chunks it read before left the FP8 step as
// slow as bf16's, ncu on the H200: the GEMVs at 0.9-1.2 TB/s) and multiplies them by their block's F32 scale
// (exact: codes widen to fp32 without rounding); Fp8Weights<8> (8-byte chunks) serves rows that are not
// 16-byte aligned. A group of bf16 and 16-code FP8 parts (`--quantization` keeps the 48B's KDA gate
// projections bf16 beside the FP8 q|k|v) is one launch reading each part with its own policy (MixedWeights):
// it was four launches.
//
// Launched with PDL (common/launch.h): before waiting for the kernel that produces x, each warp asks L2 for
// its slice of W (prefetch.global.L2, one request per 128-byte line), so the weight stream of this projection
// overlaps the tail of the norm or GEMV before it instead of starting after it.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/gemv.cuh"
#include "backend/cuda/norm.h"

namespace rill::cuda {
namespace gemv {
namespace {

bool fp8(const backend::GemmArgs& a) { return a.w->format == backend::WeightFormat::Fp8; }

// FP8 rows read as 16-code chunks when every row starts 16-byte aligned and a chunk stays inside one scale block.
bool fp8_wide(const backend::GemmArgs& a) {
  const backend::LinearWeight& w = *a.w;
  const int64_t K = a.x.size(1);
  return K % 16 == 0 && aligned16(w.weight.data) && w.weight.stride(0) % 16 == 0 &&
         (w.block.cols % 16 == 0 || w.block.cols >= K);
}

// The policy a part alone would be read with; a group of Bf16 and Fp8x16 parts is read as Mixed.
GemvWeights part_weights(const backend::GemmArgs& a) {
  return !fp8(a) ? GemvWeights::Bf16 : fp8_wide(a) ? GemvWeights::Fp8x16 : GemvWeights::Fp8x8;
}

// The one policy of a group, or false where its parts cannot share a launch (8-code FP8 beside anything
// else).
bool group_weights(const backend::GemmGroupArgs& a, GemvWeights& out) {
  out = part_weights(a.parts[0]);
  for (const backend::GemmArgs& p : a.parts) {
    const GemvWeights w = part_weights(p);
    if (w == out) continue;
    if (w == GemvWeights::Fp8x8 || out == GemvWeights::Fp8x8) return false;
    out = GemvWeights::Mixed;
  }
  return true;
}

GemvPart make_part(const backend::GemmArgs& a, int sm_count) {
  GemvPart p{};
  p.x = static_cast<const __nv_bfloat16*>(a.x.data);
  p.ldx = a.x.stride(0);
  p.w = a.w->weight.data;
  p.ldw = a.w->weight.stride(0);
  if (fp8(a)) {
    p.scales = static_cast<const float*>(a.w->scales.data);
    p.lds = a.w->scales.stride(0);
    p.block_rows = a.w->block.rows;
    // Per-channel scales (block.cols = kWholeRow = 2^30): every chunk's column index divides to block 0.
    p.block_cols = int(std::min<int64_t>(a.w->block.cols, int64_t(1) << 30));
  }
  p.out = a.out.data;
  p.ldo = a.out.stride(0);
  p.N = int(a.w->out_features());
  p.K = int(a.x.size(1));
  p.out_f32 = a.out.dtype == DType::F32;
  p.split = gemv_split(p.N, p.K / (fp8(a) && fp8_wide(a) ? 16 : 8), sm_count);
  p.first_block = 0;
  return p;
}

}  // namespace

GemvPlan plan_gemv_group(const backend::GemmGroupArgs& a, int sm_count) {
  GemvPlan plan;
  plan.g.n_parts = int(a.parts.size());
  for (int i = 0; i < plan.g.n_parts; ++i) {
    plan.g.part[i] = make_part(a.parts[size_t(i)], sm_count);
    plan.g.part[i].first_block = plan.blocks;
    const int rows = kWarps / plan.g.part[i].split;
    plan.blocks += (plan.g.part[i].N + rows - 1) / rows;
  }
  plan.M = int(a.parts[0].x.size(0));
  (void)group_weights(a, plan.weights);  // (the callers checked gemv_group_eligible)
  return plan;
}

size_t attach_norm(GemvPlan& plan, const backend::AddRmsNormArgs& n, unsigned* counter) {
  GemvNorm& nm = plan.g.norm;
  nm.residual = static_cast<float*>(n.residual.data);
  nm.ldr = n.residual.stride(0);
  nm.delta = static_cast<const __nv_bfloat16*>(n.delta.data);
  nm.ldd = n.delta.stride(0);
  nm.weight = n.weight.ptr<const float>();
  nm.eps = n.eps;
  nm.out = static_cast<__nv_bfloat16*>(n.out.data);
  nm.ldo = n.out.stride(0);
  nm.K = int(n.residual.size(1));
  nm.threads = norm_row_threads(nm.K, kNormVec);
  plan.norm = true;
  plan.g.counter = counter;
  plan.g.tail_smem = int(gemv_norm_smem(n.residual.size(0), nm.K));
  return size_t(plan.g.tail_smem);
}

}  // namespace gemv

using gemv::fp8;
using gemv::fp8_wide;
using gemv::GemvWeights;

int gemv_split(int64_t N, int64_t chunks, int sm_count) {
  // Split while the warps still fit one wave of the device at 64 warps per SM (a second, partial wave
  // costs a whole latency round) and every warp keeps at least two 16-byte loads per lane (a warp with a
  // single load spends its life on launch and reduction). Measured with ncu on the 48B decode step: one warp
  // per row left the 32- and 128-row projections at 5.5-6 us; eight warps per row on 2048 rows was slower
  // than one.
  const int64_t wave_warps = int64_t(std::max(sm_count, 1)) * 64;
  int split = 1;
  while (split < gemv::kWarps && N * split * 2 <= wave_warps && chunks / (split * 2) >= 64) split *= 2;
  return split;
}

bool gemv_eligible(const backend::GemmArgs& a) {
  const backend::LinearWeight& w = *a.w;
  const int64_t M = a.x.size(0), K = a.x.size(1);
  const bool weight_ok =
      (w.format == backend::WeightFormat::Dense && w.weight.dtype == DType::BF16 && aligned16(w.weight.data)) ||
      (w.format == backend::WeightFormat::Fp8 && w.weight.dtype == DType::F8E4M3 && w.scales.dtype == DType::F32 &&
       (w.block.cols % 8 == 0 || w.block.cols >= K) && (reinterpret_cast<uintptr_t>(w.weight.data) & 7) == 0 &&
       (w.scales.size(1) <= 1 || w.scales.stride(1) == 1));
  return M >= 1 && M <= kGemvMaxRows && weight_ok && a.x.dtype == DType::BF16 &&
         (a.out.dtype == DType::BF16 || a.out.dtype == DType::F32) && K % 8 == 0 &&
         (w.weight.size(1) <= 1 || w.weight.stride(1) == 1) && w.weight.stride(0) % 8 == 0 &&
         (M == 1 || a.x.stride(0) % 8 == 0) && aligned16(a.x.data);
}

bool gemv_group_eligible(const backend::GemmGroupArgs& a) {
  if (a.parts.empty() || int(a.parts.size()) > backend::kMaxGemmGroup) return false;
  for (const backend::GemmArgs& p : a.parts)
    if (!gemv_eligible(p) || p.x.size(0) != a.parts[0].x.size(0)) return false;
  GemvWeights w;
  return gemv::group_weights(a, w);  // one launch: one policy, or bf16 and 16-code FP8 parts mixed
}

size_t gemv_norm_smem(int64_t M, int64_t K) {
  return size_t(M * K * 2 + 15) / 16 * 16;
}

bool gemv_norm_fusable(const backend::AddRmsNormArgs& n, size_t tail_smem) {
  const TensorView &r = n.residual, &d = n.delta, &o = n.out;
  const int64_t M = r.size(0), K = r.size(1);
  // add_rms_norm's 8-wide path (norm.cu) on an F32 residual, rows inside the kernel's shared memory.
  return M >= 1 && M <= kGemvMaxRows && r.dtype == DType::F32 && d.dtype == DType::BF16 && o.dtype == DType::BF16 &&
         K % gemv::kNormVec == 0 && r.stride(0) % 8 == 0 && d.stride(0) % 8 == 0 && o.stride(0) % 8 == 0 &&
         (K <= 1 || (r.stride(1) == 1 && d.stride(1) == 1 && o.stride(1) == 1)) && aligned16(r.data) &&
         aligned16(d.data) && aligned16(o.data) && gemv_norm_smem(M, K) + tail_smem <= kGemvMaxSmem;
}

namespace {

// Consecutive runs of parts that can share a launch (8-code FP8 parts apart from the others): one launch
// each.
std::vector<backend::GemmGroupArgs> policy_runs(const backend::GemmGroupArgs& a) {
  std::vector<backend::GemmGroupArgs> runs;
  for (const backend::GemmArgs& p : a.parts) {
    if (runs.empty() || !gemv_group_eligible({{runs.back().parts[0], p}})) runs.emplace_back();
    runs.back().parts.push_back(p);
  }
  return runs;
}

}  // namespace

// Every part on the GEMV (the same M): FP8 quantisation leaves some of a group bf16 (the 48B's KDA gate
// projections), which then runs as one launch per policy, the norm folded into the first.
bool gemv_group_fuses_norm(const backend::GemmGroupArgs& a) {
  if (a.norm == nullptr || a.parts.empty() || !gemv_norm_fusable(*a.norm, 0)) return false;
  for (const backend::GemmArgs& p : a.parts)
    if (!gemv_eligible(p) || p.x.size(0) != a.parts[0].x.size(0)) return false;
  return true;
}

namespace {

Status launch_plan(const gemv::GemvPlan& plan, size_t smem, cudaStream_t stream) {
  using namespace gemv;
  switch (plan.weights) {
    case GemvWeights::Bf16: return launch_gemv_plan<Bf16Weights>("gemv_kernel", plan, NoTail{}, smem, stream);
    case GemvWeights::Fp8x16:
      return launch_gemv_plan<Fp8Weights<16>>("gemv_kernel", plan, NoTail{}, smem, stream);
    case GemvWeights::Fp8x8:
      return launch_gemv_plan<Fp8Weights<8>>("gemv_kernel", plan, NoTail{}, smem, stream);
    default:
      return launch_gemv_plan<MixedWeights>("gemv_kernel", plan, NoTail{}, smem, stream);
  }
}

}  // namespace

Status launch_gemv_group(const backend::GemmGroupArgs& a, const CudaContext& cx) {
  if (!a.norm) return launch_plan(gemv::plan_gemv_group(a, cx.sm_count), 0, cx.stream);
  if (!gemv_group_fuses_norm(a)) return internal_error("gemm_group: this input norm cannot fold into the GEMV");
  // The first launch writes h (its last CTA) before the later ones read it: stream order.
  bool first = true;
  for (const backend::GemmGroupArgs& run : policy_runs(a)) {
    gemv::GemvPlan plan = gemv::plan_gemv_group(run, cx.sm_count);
    RILL_TRY(launch_plan(plan, first ? gemv::attach_norm(plan, *a.norm, cx.gemv_counter) : 0, cx.stream));
    first = false;
  }
  return {};
}

Status launch_gemv(const backend::GemmArgs& a, int sm_count, cudaStream_t stream) {
  return launch_plan(gemv::plan_gemv_group(backend::GemmGroupArgs{{a}}, sm_count), 0, stream);
}

}  // namespace rill::cuda
