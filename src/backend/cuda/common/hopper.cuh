// Hopper (sm_90a) PTX wrappers, defined once: mbarriers, the TMA tile loads, wgmma and register reallocation
// (PTX ISA 8.x: "mbarrier", "cp.async.bulk.tensor", "wgmma", "setmaxnreg"). Every body compiles to nothing
// except on sm_90a (the arch-specific feature macro), so the backend still builds for other targets; the
// callers choose the path on the host from the device's compute capability (moe/experts.cu).
// Shared-memory operands are 32-bit shared-window addresses (smem_addr()); tensor maps are the addresses of
// `const __grid_constant__ CUtensorMap` kernel parameters (common/tensor_map.h makes them).
#pragma once

#include <cstdint>

namespace rill::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RILL_SM90A_ASM(...) asm volatile(__VA_ARGS__)
#else
#define RILL_SM90A_ASM(...) \
  do {                      \
  } while (0)
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------------------------- mbarriers

// Initialises the barrier at `bar` for `count` arrivals per phase (phase 0, parity 0, in progress).
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  RILL_SM90A_ASM("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialisations above visible to the other threads and to the async proxy (TMA's complete_tx);
// followed by a CTA barrier before any use.
__device__ __forceinline__ void mbar_fence_init() {
  RILL_SM90A_ASM("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival (release semantics at CTA scope).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  RILL_SM90A_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// One arrival that also raises the phase's expected transaction count by `bytes`: the phase completes once
// every arrival is in and the TMA loads have completed that many bytes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  RILL_SM90A_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so waiting on parity
// 1 returns at once (the phase "before" it counts as complete): producers start on parity 1 of the empty
// barriers, consumers on parity 0 of the full ones, and each flips its parity every pass over the stages.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (TMA, wgmma) — for
// shared memory written with ordinary stores and then read by TMA or wgmma.
__device__ __forceinline__ void fence_proxy_async_smem() {
  RILL_SM90A_ASM("fence.proxy.async.shared::cta;" ::: "memory");
}

// Named barrier `id` (1-15; 0 is __syncthreads') over `threads` threads, a multiple of the warp size: the
// warps of a few warpgroups meeting without the rest of the CTA.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// -------------------------------------------------------------------------------------------------- TMA

// Loads the box at element coordinates (c0 innermost, c1[, c2]) of the tensor map into shared memory at
// `dst`, completing its bytes on barrier `bar`. Out-of-range elements arrive as zeros and still count.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1) {
  RILL_SM90A_ASM(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, uint32_t bar, int c0, int c1,
                                            int c2) {
  RILL_SM90A_ASM(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// Fetches the tensor map (a kernel parameter) into the TMA unit's cache ahead of the first load.
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  RILL_SM90A_ASM("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ------------------------------------------------------------------------------------------------ wgmma

// Before a warpgroup's first wgmma, and after its accumulator registers were touched by other instructions.
__device__ __forceinline__ void wgmma_fence() {
  RILL_SM90A_ASM("wgmma.fence.sync.aligned;" ::: "memory");
}
// Closes the wgmma operations issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() {
  RILL_SM90A_ASM("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most kPending committed groups are still running (their shared-memory reads included).
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  RILL_SM90A_ASM("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of an accumulator across the asynchronous wgmma that writes
// it: an empty asm that "modifies" the register.
__device__ __forceinline__ void wgmma_fence_operand(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

// The 128 accumulator operands of an m64n256 wgmma (%0 .. %127 in the instruction, "+f" bindings).
#define RILL_WGMMA_N256_D_REGS                                                                   \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "             \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define RILL_WGMMA_N256_D_BIND(d)                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),            \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),            \
      "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),            \
      "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),            \
      "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),            \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),            \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),            \
      "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),            \
      "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]),            \
      "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),            \
      "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]),            \
      "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),            \
      "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]),     \
      "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),     \
      "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),     \
      "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// d (64 x 256 fp32, kWgAccRegs = 128 registers per thread, wgmma's D layout) = A . B^T (+ d when scale_d !=
// 0), A 64 x 16 and B 256 x 16 bf16, both K-major in shared memory behind descriptors (moe/wgmma_schedule.h
// wgmma_desc_sw128), no negation or transposition.
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                      uint32_t scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " RILL_WGMMA_N256_D_REGS
      ", %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : RILL_WGMMA_N256_D_BIND(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

// d (64 x 256 fp32, 128 registers per thread, the same D layout) = A . B^T (+ d when scale_d != 0), A 64 x 32
// and B 256 x 32 E4M3 codes, K-major in shared memory behind 128B-swizzle descriptors (a k32 step is 32 bytes
// of a 128-byte row, as bf16's k16), unscaled: the per-channel FP8 experts (moe/grouped_wgmma.cu
// Fp8ChannelWeights) scale d in their epilogue.
__device__ __forceinline__ void wgmma_m64n256k32_e4m3(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                      uint32_t scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 " RILL_WGMMA_N256_D_REGS
      ", %128, %129, p, 1, 1;\n"
      "}\n"
      : RILL_WGMMA_N256_D_BIND(d)
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

// d (64 x 128 fp32, 64 registers per thread, the same D layout as the bf16 shapes) = A . B^T (+ d when scale_d
// != 0), A 64 x 32 and B 128 x 32 E4M3 codes, both K-major in shared memory behind 128B-swizzle descriptors (a
// k32 step is 32 bytes of a 128-byte row, as bf16's k16). FP8 wgmma has no transpose operands; both inputs
// are unscaled (imm-scale 1): the caller applies the block scales to d.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      uint32_t scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#endif
}

// Register reallocation between warpgroups (all threads of the warpgroup execute it): the loading warpgroup
// gives registers back, the computing ones take them. Counts are multiples of 8 in [24, 256].
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  RILL_SM90A_ASM("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  RILL_SM90A_ASM("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace rill::cuda
