// FP4 expert weights -> e4m3 for the grouped expert GEMMs: whole swizzled tiles for moe_gemm_mma.cu; the scale folding
// pieces (reference exponent, magnitude table, promotion scale) also for moe_gemm_sm90.cu, which converts into wgmma
// register fragments itself. One weight row of one 128-K block: 64 packed bytes (element 2i in the low nibble of byte
// i) and four E8M0 scales, one per 32 values. e2m1 -> e4m3 is exact; the four scales are folded: the block's reference
// exponent r is their maximum, a group with exponent s is stored as e4m3 codes of value x 2^(6 + s - r) (at most 6 x
// 2^6 = 384 < 448; exact for s - r >= -14, further below rounded as e4m3 rounds), and 2^(r - 127 - 6) becomes the row's
// promotion scale (column scale of the GEMM). Codes through an 8-entry magnitude table per group (4 exact fp32 -> e4m3
// conversions) and one byte_perm per 4 values; sign bits moved by bit operations.
// Output rows are 128 bytes with the 16-byte chunk c of row r at chunk c ^ (r % 8): the layout of TMA's 128-byte
// swizzle (wgmma descriptors) and of the mma.sync tiles (gemm/mma_tile.cuh) alike.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"

namespace flashseek::cuda::fp4_expand {

// e4m3 codes of four e2m1 values (nibbles in the low 16 bits of w, element j at bits 4j..4j+3) through the
// magnitude table (lut_lo: magnitudes 0..3, lut_hi: 4..7); each nibble's sign bit becomes its byte's bit 7.
__device__ __forceinline__ uint32_t fp4x4_to_codes(uint32_t w, uint32_t lut_lo, uint32_t lut_hi) {
    const uint32_t mag = __byte_perm(lut_lo, lut_hi, w & 0x7777u);
    const uint32_t x = __byte_perm(w, 0u, 0x1100u);  // bytes [b0, b0, b1, b1] of w
    return mag | ((x << 4) & 0x00800080u) | (x & 0x80008000u);
}

// The magnitude table of a group stored x 2^(6 + d), d = its exponent - the reference (<= 0): e4m3 codes of
// {0, 0.5, 1, 1.5, 2, 3, 4, 6} x 2^(6 + d).
__device__ __forceinline__ void magnitude_table(int d, uint32_t& lut_lo, uint32_t& lut_hi) {
    const float s = exp2i(max(d, -60) + 6);
    const uint32_t c01 = __nv_cvt_float2_to_fp8x2(make_float2(0.f, 0.5f * s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t c23 = __nv_cvt_float2_to_fp8x2(make_float2(s, 1.5f * s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t c45 = __nv_cvt_float2_to_fp8x2(make_float2(2.f * s, 3.f * s), __NV_SATFINITE, __NV_E4M3);
    const uint32_t c67 = __nv_cvt_float2_to_fp8x2(make_float2(4.f * s, 6.f * s), __NV_SATFINITE, __NV_E4M3);
    lut_lo = c01 | c23 << 16;
    lut_hi = c45 | c67 << 16;
}

// The four E8M0 bytes of one row and 128-K block (group j in byte j) from global memory, and their maximum.
__device__ __forceinline__ uint32_t load_scales4(const uint8_t* p) {
    return uint32_t(__ldg(p)) | uint32_t(__ldg(p + 1)) << 8 | uint32_t(__ldg(p + 2)) << 16 | uint32_t(__ldg(p + 3)) << 24;
}
__device__ __forceinline__ int reference_exponent(uint32_t scales4) {
    return max(max(int(scales4 & 0xffu), int((scales4 >> 8) & 0xffu)),
               max(int((scales4 >> 16) & 0xffu), int(scales4 >> 24)));
}
// The row's promotion scale for reference exponent r.
__device__ __forceinline__ float column_scale(int ref) { return exp2i(max(ref - 127 - 6, -126)); }

// Group `group` (0..3) of one row: its 16 packed bytes `v` -> 32 e4m3 bytes at chunks 2*group, 2*group + 1 of row
// `row` of the swizzled tile.
__device__ __forceinline__ void expand_group(uint4 v, unsigned char* tile, int row, int group, uint32_t scales4,
                                             int ref) {
    uint32_t lut_lo, lut_hi;
    magnitude_table(int((scales4 >> (8 * group)) & 0xffu) - ref, lut_lo, lut_hi);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t c[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        c[2 * i] = fp4x4_to_codes(w[i] & 0xffffu, lut_lo, lut_hi);
        c[2 * i + 1] = fp4x4_to_codes(w[i] >> 16, lut_lo, lut_hi);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int chunk = 2 * group + j;
        *reinterpret_cast<uint4*>(tile + row * 128 + ((chunk ^ (row & 7)) << 4)) =
            make_uint4(c[4 * j], c[4 * j + 1], c[4 * j + 2], c[4 * j + 3]);
    }
}

// Groups 2*half and 2*half + 1 of one row: 32 packed bytes at `raw` (the row's 64 bytes) -> 64 e4m3 bytes at chunks
// 4*half .. 4*half + 3 of row `row` of the swizzled tile.
__device__ __forceinline__ void expand_half_row(const unsigned char* raw, unsigned char* tile, int row, int half,
                                                uint32_t scales4, int ref) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const int group = 2 * half + q;
        expand_group(*reinterpret_cast<const uint4*>(raw + 16 * group), tile, row, group, scales4, ref);
    }
}

}  // namespace flashseek::cuda::fp4_expand
