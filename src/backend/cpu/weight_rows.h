// One row of a linear weight in fp32, whatever its format: the single place the CPU reads weights, so every CPU
// op that multiplies by a weight (gemm, MLA's kv_b, the experts) accepts every format the loader produces.
#pragma once

#include "backend/cpu/cpu_util.h"
#include "backend/cpu/fp8.h"
#include "backend/cpu/mxfp4.h"

namespace rill::backend::cpu {

inline void linear_row(const LinearWeight& w, int64_t r, float* dst) {
  switch (w.format) {
    case WeightFormat::Dense: widen_row(weight_row(w.weight, r), w.weight.dtype, w.weight.size(1), dst); return;
    case WeightFormat::Mxfp4: dequant_mxfp4_row(w, r, dst); return;
    case WeightFormat::Fp8: dequant_fp8_row(w, r, dst); return;
  }
}

}  // namespace rill::backend::cpu
