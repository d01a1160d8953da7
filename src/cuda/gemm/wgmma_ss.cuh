// Warpgroup MMA with both operands in shared memory (wgmma "SS" forms, sm_90a only: callers guard with
// FS_WGMMA_AVAILABLE), for the compute-bound GEMMs: m64 x N x k32 e4m3 and m64 x N x k16 bf16 with fp32 results,
// N = 128 or 64. A and B come from K-major 128B-swizzled tiles through descriptors (gemm/tma.cuh); for bf16 the
// transpose immediates are 0 (both K-major), e4m3 has no transpose (K-major only).
// D (64 x N fp32) in registers as in common/wgmma.cuh: warp w of the warpgroup holds rows 16w..16w+15;
// d[4i + 0/1] at row g (= lane / 4), columns 8i + 2t + 0/1 (t = lane % 4); d[4i + 2/3] at row g + 8.
// accumulate = 0 computes D = A * B (the previous contents are ignored), otherwise D += A * B.
// One register list per width (FS_WGMMA_ACC* / FS_WGMMA_REGS*): the four instructions differ in shape and type only.
// (The grouped expert kernel's register-operand forms, moe/moe_gemm_sm90.cu, use the lists too, n32 included.)
#pragma once
#include <cstdint>

#include "cuda/common/wgmma.cuh"

namespace flashseek::cuda::wgmma {

// The accumulator operands of one instruction, "+f"(d[0]) .. "+f"(d[N - 1]), and their register list "%0, .., %N-1"
// (the descriptors and the accumulate flag follow as %N, %N+1, %N+2).
#define FS_WGMMA_ACC8(d, o)                                                                             \
    "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), \
        "+f"(d[o + 6]), "+f"(d[o + 7])
#define FS_WGMMA_ACC16(d) FS_WGMMA_ACC8(d, 0), FS_WGMMA_ACC8(d, 8)
#define FS_WGMMA_ACC32(d) FS_WGMMA_ACC16(d), FS_WGMMA_ACC8(d, 16), FS_WGMMA_ACC8(d, 24)
#define FS_WGMMA_ACC64(d) FS_WGMMA_ACC32(d), FS_WGMMA_ACC8(d, 32), FS_WGMMA_ACC8(d, 40), FS_WGMMA_ACC8(d, 48), \
                          FS_WGMMA_ACC8(d, 56)
#define FS_WGMMA_REGS16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define FS_WGMMA_REGS32                                                                \
    FS_WGMMA_REGS16 ", "                                                               \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FS_WGMMA_REGS64                                                                \
    FS_WGMMA_REGS32 ", "                                                               \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

#if FS_WGMMA_AVAILABLE
__device__ __forceinline__ void mma_e4m3_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" FS_WGMMA_REGS64 "}, %64, %65, p, 1, 1;\n}\n"
                 : FS_WGMMA_ACC64(d)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void mma_e4m3_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" FS_WGMMA_REGS32 "}, %32, %33, p, 1, 1;\n}\n"
                 : FS_WGMMA_ACC32(d)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void mma_bf16_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" FS_WGMMA_REGS64
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : FS_WGMMA_ACC64(d)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
__device__ __forceinline__ void mma_bf16_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, uint32_t accumulate) {
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" FS_WGMMA_REGS32
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : FS_WGMMA_ACC32(d)
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}
#endif

}  // namespace flashseek::cuda::wgmma
