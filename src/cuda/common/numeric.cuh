// Device-side number formats of DeepSeek-V4 (the device twins of util/numeric.h, bit-exact with them):
// bf16, FP8 e4m3fn, E8M0 power-of-two scales, FP4 e2m1 (packed two per byte, low nibble = even element), plus
// the fast packed conversions the GEMV/MoE kernels use to feed f16 tensor cores; the warp reductions
// (warp_reduce.cuh) come with it.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/warp_reduce.cuh"

namespace flashseek::cuda {

// ---- scalar formats ------------------------------------------------------------------------------------------
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {  // round to nearest even, NaN kept quiet
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
__device__ __forceinline__ float round_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }
// The same roundings by the conversion instructions (cvt.rn.bf16.f32 / cvt.rn.bf16x2.f32): the same bits as
// f32_to_bf16_bits / round_bf16 for every non-NaN input (a NaN comes back as the canonical NaN, not with its
// payload), one instruction per value or pair where the bit-twiddled form takes five to six. For epilogues that
// convert every output.
__device__ __forceinline__ uint16_t f32_to_bf16_bits_rn(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ uint32_t bf16x2_bits_rn(float lo, float hi) {  // lo in the low half
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ void round_bf16_pair(float& a, float& b) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    a = __low2float(h);
    b = __high2float(h);
}
// A 16-byte word of 8 bf16 values as floats in column order, and 8 floats rounded to such a word (the vector paths'
// 8 features per thread: mHC, rmsnorm's prepared copy, ring_gemv's raw row).
__device__ __forceinline__ void bf16x8_to_float(const uint4& word, float* f) {
    const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&word);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 v = __bfloat1622float2(h2[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}
__device__ __forceinline__ uint4 float_to_bf16x8(const float* f) {
    uint4 word;
    __nv_bfloat162* h2 = reinterpret_cast<__nv_bfloat162*>(&word);
#pragma unroll
    for (int i = 0; i < 4; ++i) h2[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return word;
}

// E8M0: 2^(b-127); 255 = NaN.
__device__ __forceinline__ float e8m0_to_f32(uint8_t b) {
    if (b == 255) return __uint_as_float(0x7fc00000u);
    if (b == 0) return __uint_as_float(0x00400000u);  // 2^-127 is an fp32 subnormal
    return __uint_as_float(uint32_t(b) << 23);
}

// e4m3fn (bias 7, max 448, NaN = 0x7f/0xff, no inf) to fp32, exact.
__device__ __forceinline__ float e4m3_to_f32(uint8_t b) {
    const uint32_t sign = uint32_t(b & 0x80) << 24;
    const uint32_t exp = (b >> 3) & 0xf, man = b & 7;
    if (exp == 15 && man == 7) return __uint_as_float(0x7fc00000u);
    float v;
    if (exp == 0)
        v = float(man) * (1.f / 512.f);
    else
        v = __uint_as_float(((exp + 120) << 23) | (man << 20));
    return __uint_as_float(__float_as_uint(v) | sign);
}

// fp32 to e4m3fn, round to nearest even, saturating to +-448 (as util/numeric.h f32_to_e4m3). NaN -> 0x7f.
__device__ __forceinline__ uint8_t f32_to_e4m3(float f) {
    const uint32_t u = __float_as_uint(f);
    const uint8_t sign = (u >> 24) & 0x80;
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7f;
    const float a = fabsf(f);
    if (a >= 448.f) return sign | 0x7e;
    int e = int((__float_as_uint(a) >> 23) & 0xff) - 127;  // floor(log2 a) for normal a
    if (e < -6) e = -6;                                      // subnormal quantum 2^-9
    const float quantum = __uint_as_float(uint32_t(e - 3 + 127) << 23);
    const float q = rintf(a / quantum);  // exact division by a power of two; rintf = nearest even
    const float r = q * quantum;
    if (r >= 448.f) return sign | 0x7e;
    if (r == 0.f) return sign;
    const int re = int((__float_as_uint(r) >> 23) & 0xff) - 127;
    if (re < -6) return sign | uint8_t(int(q));  // subnormal: q counts 2^-9 units (q < 8)
    const int man = int(r / __uint_as_float(uint32_t(re - 3 + 127) << 23)) - 8;
    return sign | uint8_t(((re + 7) << 3) | man);
}
__device__ __forceinline__ float round_e4m3(float f) { return e4m3_to_f32(f32_to_e4m3(f)); }

// e2m1 code (bit 3 = sign) to fp32.
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
    const uint32_t mag = code & 7;
    const float v = mag < 2 ? 0.5f * float(mag) : float(1u << ((mag >> 1) - 1)) * (1.f + 0.5f * float(mag & 1));
    return (code & 8) ? -v : v;
}

// 2^e as fp32 for integer e in [-126, 127] (exact; callers clamp).
__device__ __forceinline__ float exp2i(int e) { return __uint_as_float(uint32_t(e + 127) << 23); }
// ceil(log2(x)) for finite x > 0 (exact on powers of two, subnormals included).
__device__ __forceinline__ int ceil_log2(float x) {
    int e = 0;
    const float m = frexpf(x, &e);  // x = m * 2^e, m in [0.5, 1)
    return m == 0.5f ? e - 1 : e;
}

// ---- packed conversions for f16 tensor cores -------------------------------------------------------------
// These keep exact values but shifted by a fixed power of two, which the kernels fold into their fp32 scales.

// Four e4m3 bytes w = [b0 b1 b2 b3] -> two f16x2: lo = (b0, b2), hi = (b1, b3), each f16 = value * 2^-8
// (e4m3 subnormals become f16 subnormals: still exact). NaN bytes become f16 NaN-like values: callers never
// store NaN weights. The pairing (b0,b2),(b1,b3) is a fixed K permutation the activations follow.
__device__ __forceinline__ void e4m3x4_to_f16x2x2_scaled(uint32_t w, uint32_t& lo, uint32_t& hi) {
    const uint32_t a = w << 8;  // b0 -> byte 1, b2 -> byte 3
    lo = ((a & 0x7f007f00u) >> 1) | (a & 0x80008000u);
    hi = ((w & 0x7f007f00u) >> 1) | (w & 0x80008000u);
}

// Eight e2m1 nibbles w = [n0..n7] (n0 = low nibble of byte 0) -> four f16x2, each f16 = value * 2^-14:
// out[0] = (n0, n4), out[1] = (n1, n5), out[2] = (n2, n6), out[3] = (n3, n7). Exact (0.5 becomes an f16
// subnormal). Again a fixed K permutation that the activations follow.
__device__ __forceinline__ void e2m1x8_to_f16x2x4_scaled(uint32_t w, uint32_t out[4]) {
    // For nibble pair (n_i, n_{i+4}) shift so that the nibble's magnitude lands on f16 bits 9..11 (and 25..27) and its
    // sign on bit 12 (28); then move bit 12 to bit 15 with (x & bit12) * 7 + x.
    uint32_t q;
    q = (w << 9) & 0x1e001e00u;
    out[0] = (q & 0x10001000u) * 7u + q;
    q = (w << 5) & 0x1e001e00u;
    out[1] = (q & 0x10001000u) * 7u + q;
    q = (w << 1) & 0x1e001e00u;
    out[2] = (q & 0x10001000u) * 7u + q;
    q = (w >> 3) & 0x1e001e00u;
    out[3] = (q & 0x10001000u) * 7u + q;
}

}  // namespace flashseek::cuda
