// The tensor-core step of every mma.sync kernel in the backend (KDA chunk phases, MLA attention, MoE grouped
// GEMMs and the MXFP4 decode GEMV): m16n8k16, bf16 inputs, fp32 accumulate, d += a * b. Fragments as in the
// PTX ISA (g = lane / 4, t = lane % 4): a0 (row g, k 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
// b0 (k 2t.., column g), b1 (k 2t+8.., column g); d0, d1 (row g, columns 2t, 2t+1), d2, d3 (row g+8, same).
#pragma once

#include <cstdint>

namespace rill::cuda {

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_bf16(d, a, b[0], b[1]);
}

}  // namespace rill::cuda
