// Device pieces of the compute-bound mma.sync GEMMs (gemm/gemm_mma.cu, moe/moe_gemm_mma.cu): cp.async with zero
// fill, ldmatrix, the XOR-swizzled 128-byte tile rows, and one 32-byte k-step of a warp's 64 x 32 tile for the
// three modes of dense_gemm_problem.cuh (native e4m3, e4m3 widened exactly to f16, bf16).
// Fragment addressing, the same for every mode: a k-step is 32 bytes (k32 of e4m3 or k16 of bf16), and ldmatrix.x4
// of 8 x 16-byte rows gives exactly the A fragment of m16n8k32 e4m3 / m16n8k16 16-bit (matrices: rows 0-7 bytes
// 0-15 = a0, rows 8-15 = a1, rows 0-7 bytes 16-31 = a2, rows 8-15 = a3) and two n8 B fragments (rows 0-7 bytes 0-15
// = b0, bytes 16-31 = b1, then rows 8-15). Swizzle: the 16-byte chunk c of row r lives at chunk c ^ (r % 8), so the
// 8 rows of one ldmatrix matrix hit 8 different bank groups.
#pragma once
#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/dense_gemm_problem.cuh"

namespace flashseek::cuda::mma_tile {

using dense_gemm::MmaMode;

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// 16 bytes global -> shared, or zeros when !valid (src-size 0; src must still be a valid address).
__device__ __forceinline__ void cp_async_16_zfill(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Byte offset of (row, byte) in a swizzled tile of 128-byte rows.
__device__ __forceinline__ uint32_t swizzled(int row, int byte) {
    return uint32_t(row * 128 + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15));
}

__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();  // no FP8 mma.sync before sm_89: the host never selects this mode there
#endif
}
__device__ __forceinline__ void mma_16bit(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1, bool bf16) {
    if (bf16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One k-step (32 bytes of K) of the warp's 64 x 32 tile (rows 64 wm.., columns 32 wn..): fragments from the stage's
// swizzled A and B tiles, 16 mma (32 for FP8_AS_F16). FP8_AS_F16: a register of four e4m3 (k = 4t..4t+3) widens
// to lo = (k 4t, 4t+2), hi = (k 4t+1, 4t+3) (value x 2^-8 each); the m16n8k16 slots (2t, 2t+1) take lo and
// (2t+8, 2t+9) take hi, for A and B alike, so each slot pairs the same k.
template <MmaMode MODE>
__device__ __forceinline__ void k_step(float (&acc)[4][4][4], uint32_t a_base, uint32_t b_base, int ks, int wm, int wn,
                                       int lane) {
    uint32_t b[4][2];  // the four n8 B fragments first, then one m16 A fragment at a time (fewer live registers)
#pragma unroll
    for (int nj = 0; nj < 2; ++nj) {
        const int row = wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8;
        uint32_t r[4];
        ldmatrix_x4(r, b_base + swizzled(row, ks * 32 + ((lane >> 3) & 1) * 16));
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
        uint32_t a[4];
        const int row = wm * 64 + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(a, a_base + swizzled(row, ks * 32 + (lane >> 4) * 16));
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            if constexpr (MODE == MmaMode::FP8_NATIVE) {
                mma_e4m3(acc[mi][ni], a, b[ni][0], b[ni][1]);
            } else if constexpr (MODE == MmaMode::BF16) {
                mma_16bit(acc[mi][ni], a[0], a[1], a[2], a[3], b[ni][0], b[ni][1], true);
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {  // h = 0: k 0..15 of the step (a0, a1, b0); h = 1: k 16..31
                    uint32_t a_lo0, a_hi0, a_lo1, a_hi1, b_lo, b_hi;
                    e4m3x4_to_f16x2x2_scaled(a[2 * h], a_lo0, a_hi0);      // row g
                    e4m3x4_to_f16x2x2_scaled(a[2 * h + 1], a_lo1, a_hi1);  // row g + 8
                    e4m3x4_to_f16x2x2_scaled(b[ni][h], b_lo, b_hi);
                    mma_16bit(acc[mi][ni], a_lo0, a_lo1, a_hi0, a_hi1, b_lo, b_hi, false);
                }
            }
        }
    }
}

// A warp's 64 x 32 fp32 tile (4 x 4 fragments of m16n8) set to zero.
__device__ __forceinline__ void zero_tile(float (&t)[4][4][4]) {
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int j = 0; j < 4; ++j) t[mi][ni][j] = 0.f;
}

// The factor the FP8 modes' products carry: 2^-16 when both operands were widened to f16 (x 2^-8 each).
template <MmaMode MODE>
constexpr float product_unscale() {
    return MODE == MmaMode::FP8_AS_F16 ? 65536.f : 1.f;
}

}  // namespace flashseek::cuda::mma_tile
