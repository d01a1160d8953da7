// Warpgroup tensor-core pieces (sm_90a only: wgmma exists on Hopper alone and needs the arch-specific build), used
// by the FP4 expert kernel of moe/moe_wgmma.cu and the decode GEMVs gemm/wgmma_gemv.cu (e4m3) and
// gemm/wgmma_f16_gemv.cu (f16). Callers guard their bodies with FS_WGMMA_AVAILABLE.
// Why wgmma: Hopper has no native FP8 mma.sync; ptxas lowers mma.sync e4m3 to f16 HMMA plus e4m3 -> f16 unpacks
// of every operand register (cuobjdump, docs/perf.md), which made the FP4 expert kernel arithmetic-bound.
//
// Operand conventions (PTX ISA, "asynchronous warpgroup level matrix" sections):
//   - A (64 x 32 e4m3) from registers: warp w of the warpgroup holds rows 16w..16w+15 in the fragment layout of
//     mma.sync m16n8k32 (a0: row g, k 4t..4t+3; a1: row g+8; a2: row g, k 16+4t..; a3: row g+8, k 16+4t..).
//   - B (32 x N e4m3, K-major) from shared memory through a matrix descriptor, no swizzle: 8 x 16-byte core
//     matrices (8 columns n, 16 consecutive k each, 128 contiguous bytes); byte (k, n) at
//     (n / 8) * SBO + (k / 16) * LBO + (n % 8) * 16 + k % 16.
//   - D (64 x N fp32): warp w rows 16w.., d[4i + 0/1] at row g, columns 8i + 2t + 0/1; d[4i + 2/3] at row g + 8.
#pragma once
#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FS_WGMMA_AVAILABLE 1
#else
#define FS_WGMMA_AVAILABLE 0
#endif

namespace flashseek::cuda::wgmma {

// The B tile layout above with LBO = 128 (the two 16-byte k halves of a column block adjacent) and SBO = 256 (the
// two 8-column blocks of N = 16): one 32 x 16 k-step is 512 contiguous bytes.
constexpr int kLbo = 128;
constexpr int kSbo = 256;
constexpr int kStepBytes = 512;
// Offset of B element (k in 0..31, n in 0..15) inside one k-step.
__host__ __device__ constexpr int b_offset(int k, int n) { return (n >> 3) * kSbo + (k >> 4) * kLbo + (n & 7) * 16 + (k & 15); }

#if FS_WGMMA_AVAILABLE
// No-swizzle descriptor of the B tile at shared address `addr` (16-byte aligned).
__device__ __forceinline__ uint64_t b_descriptor(uint32_t addr) {
    return uint64_t((addr >> 4) & 0x3fff) | (uint64_t(kLbo >> 4) << 16) | (uint64_t(kSbo >> 4) << 32);
}

// The descriptor of the operand `bytes` (a multiple of 16) past desc's: only the 14-bit address field changes, and it
// cannot carry out for shared addresses below 256 KB. One 64-bit add where b_descriptor costs ~5 instructions.
__device__ __forceinline__ uint64_t advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Pins a register operand of an in-flight wgmma at this point of the instruction stream: D is written and A read
// asynchronously, so the compiler must neither read D nor reuse A's registers before the matching wait.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

// d = A * B (C = 0): m64n16k32, e4m3 x e4m3 -> fp32, A from registers.
__device__ __forceinline__ void mma_n16(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, "
        "1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
// d += A * B (accumulating forms).
__device__ __forceinline__ void mma_n16_acc(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, "
        "1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
__device__ __forceinline__ void mma_n8_acc(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
// The same for N = 8 (columns 0..7 of the tile: only the first 8-column block is read).
__device__ __forceinline__ void mma_n8(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
// d = A * B (C = 0): m64n16k16, f16 x f16 -> fp32, A from registers (the mma.sync m16n8k16 fragment layout), B from
// shared memory; TRANS_B = imm-trans-b (0: B K-major with the LBO / SBO above and 2-byte elements: byte (k, n) at
// (n / 8) * SBO + (k / 8) * LBO + (n % 8) * 16 + (k % 8) * 2, 512 bytes per k16 step of 16 columns; verified on the
// H200 by scripts/probes/wgmma_f16_probe.cu).
template <int TRANS_B>
__device__ __forceinline__ void mma_f16_n16(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, "
        "%13;\n}\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(TRANS_B));
}
// d = A * B + (accumulate ? d : 0): m64nNk16 (N = 16, 32, 64), f16 x f16 -> fp32, A from registers, B K-major from
// shared memory (the layout above; the 8-column blocks SBO apart).
template <int N>
__device__ __forceinline__ void mma_f16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int accumulate);
template <>
__device__ __forceinline__ void mma_f16<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, "
        "0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void mma_f16<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, "
        "{%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}
template <>
__device__ __forceinline__ void mma_f16<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// After the wait of a block's wgmmas: pins its D and A registers (fence_operand), then acc[j] += d[j] x (ws x
// scales[column of j]) for the D layout's columns (j >> 2) * 8 + 2t + (j & 1): the per-block promotion of the
// block-scaled GEMVs.
template <int ND, int STEPS>
__device__ __forceinline__ void promote(float (&d)[ND], uint32_t (&a)[STEPS][4], float (&acc)[ND], float ws,
                                        const float* scales, int t) {
#pragma unroll
    for (int j = 0; j < ND; ++j) fence_operand(d[j]);
#pragma unroll
    for (int s = 0; s < STEPS; ++s)
#pragma unroll
        for (int j = 0; j < 4; ++j) fence_operand(a[s][j]);
#pragma unroll
    for (int j = 0; j < ND; ++j) acc[j] = fmaf(d[j], ws * scales[(j >> 2) * 8 + 2 * t + (j & 1)], acc[j]);
}
#endif

}  // namespace flashseek::cuda::wgmma
