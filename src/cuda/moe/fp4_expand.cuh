// FP4 expert weights -> e4m3 for the grouped expert GEMMs: whole swizzled tiles for moe_gemm_mma.cu; the scale folding
// pieces (reference exponent, magnitude table, promotion scale, and group_table / codes8, eight codes from a word of
// nibbles) also for moe_gemm_sm90.cu, which converts into wgmma register fragments itself. One weight row of one 128-K block: 64 packed bytes (element 2i in the low nibble of byte
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

// The magnitude table of a 32-group stored x 2^(6 + d) (d = its exponent - the block's reference, <= 0): the d = 0
// codes {0, 0x60, 0x68, 0x6c | 0x70, 0x74, 0x78, 0x7c} with every non-zero exponent field lowered by -d while the
// smallest (0.5 x 2^(6 + d)) stays normal, else the exact conversions of fp4_expand::magnitude_table.
__device__ __forceinline__ uint2 group_table(int d) {
    if (d >= -11) {
        const uint32_t k = uint32_t(-d);
        return make_uint2(0x6C686000u - k * 0x08080800u, 0x7C787470u - k * 0x08080808u);
    }
    uint32_t lo, hi;
    fp4_expand::magnitude_table(d, lo, hi);
    return make_uint2(lo, hi);
}

// e4m3 codes of the eight e2m1 values of w (element j in bits 4j..4j+3) through their group's table: lo gets
// elements 0-3, hi 4-7, one byte each. Magnitudes: one byte_perm over the table per four, selectors the masked
// nibbles. Signs: element j's sign bit (4j + 3) must land on bit 7 of its byte; byte_perm picks, per output byte,
// the source byte of w << 4 (elements 0, 2, 4, 6: bit 4j + 3 moves to the top of byte j / 2) or of w (elements 1, 3,
// 5, 7: already the top of byte (j - 1) / 2), and one LOP3 merges sign and magnitude. 9 instructions per 8 values
// (a sign-replicate byte_perm per four values, its shift and the high half's own shift took 11).
// (PTX prmt: its selectors' bit 3 is clear in every use here; __byte_perm would mask them again.)
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
__device__ __forceinline__ void codes8(uint32_t w, uint2 t, uint32_t& lo, uint32_t& hi) {
    const uint32_t m = w & 0x77777777u, w4 = w << 4;
    const uint32_t mag_lo = prmt(t.x, t.y, m), mag_hi = prmt(t.x, t.y, m >> 16);
    const uint32_t sgn_lo = prmt(w4, w, 0x5140u), sgn_hi = prmt(w4, w, 0x7362u);
    lo = mag_lo | (sgn_lo & 0x80808080u);
    hi = mag_hi | (sgn_hi & 0x80808080u);
}

}  // namespace flashseek::cuda::fp4_expand
