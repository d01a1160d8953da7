// Device helpers shared by the attention-side kernels (norm, rope, mhc, compressor, indexer, attention): argument
// checks with "{}" messages, block reductions, the reference's quantization simulations (FP8 e4m3 / FP4 e2m1 with
// power-of-two scales), RoPE rotation and the 128-point Hadamard transform. Everything matches src/cpu/ops.h bit
// for bit where the CPU op is exact (scales from exponent bits, round-to-nearest-even conversions, cos/sin of the
// fp32 angle evaluated in double), so the GPU and CPU paths differ only by fp32 summation order.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include <sstream>
#include <string>
#include <utility>

#include "cuda/common/check.cuh"
#include "cuda/common/warp_reduce.cuh"

namespace flashseek::cuda::attn_detail {
// Messages with "{}" placeholders, formatted here (util/error.h pulls in fmt, whose C++20 consteval checks nvcc
// cannot compile) and thrown as flashseek::Error by cuda::throw_error (common/check.cuh).
inline void format_into(std::ostringstream& os, const char* f) { os << f; }
template <typename T, typename... Rest>
void format_into(std::ostringstream& os, const char* f, T&& v, Rest&&... rest) {
    for (; *f; ++f) {
        if (f[0] == '{' && f[1] == '}') {
            os << v;
            format_into(os, f + 2, std::forward<Rest>(rest)...);
            return;
        }
        os << *f;
    }
}
template <typename... Args>
[[noreturn]] void fail_rt(const char* f, Args&&... args) {
    std::ostringstream os;
    format_into(os, f, std::forward<Args>(args)...);
    throw_error(os.str());
}
}  // namespace flashseek::cuda::attn_detail

// FS_ATTN_REQUIRE(cond, "message {}", value): throws flashseek::Error when cond is false (host code).
#define FS_ATTN_REQUIRE(cond, ...)                                          \
    do {                                                                    \
        if (!(cond)) ::flashseek::cuda::attn_detail::fail_rt(__VA_ARGS__); \
    } while (0)

namespace flashseek::cuda::attn_detail {

using bf16 = __nv_bfloat16;

// Block-wide sum (warp_reduce.cuh per warp); every thread gets the result. `scratch` holds at least 32 floats;
// blockDim.x % 32 == 0.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < n_warps ? scratch[lane] : 0.f;
    return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < n_warps ? scratch[lane] : -INFINITY;
    return warp_max(r);
}

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// 2^ceil(log2(v)) for finite v > 0, exact (from the exponent bits, like the CPU op's frexp).
__device__ __forceinline__ float pow2_ceil(float v) {
    int e;
    const float m = frexpf(v, &e);
    return m == 0.5f ? ldexpf(1.f, e - 1) : ldexpf(1.f, e);
}
// Biased E8M0 exponent byte of a power of two s (s = 2^(byte - 127)).
__device__ __forceinline__ uint8_t e8m0_byte(float pow2) {
    return uint8_t((__float_as_uint(pow2) >> 23) & 0xff);
}
__device__ __forceinline__ float e8m0_value(uint8_t b) { return __uint_as_float(uint32_t(b) << 23); }

// e4m3fn byte of x (already clamped to +-448), round to nearest even.
__device__ __forceinline__ uint8_t to_e4m3(float x) {
    return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float from_e4m3(uint8_t b) {
    __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3);
    return __half2float(__half(h));
}

// e2m1 code (bit 3 = sign) nearest to x, ties to the even mantissa code, saturating at 6 (as util/numeric.h).
__device__ __forceinline__ uint8_t to_e2m1(float x) {
    const uint8_t sign = signbit(x) ? 8 : 0;
    const float a = fabsf(x);
    uint8_t code;
    if (a <= 0.25f) code = 0;        // tie 0.25 -> 0 (even)
    else if (a < 0.75f) code = 1;
    else if (a <= 1.25f) code = 2;   // the tie 0.75 goes up to code 2 (even)
    else if (a < 1.75f) code = 3;
    else if (a <= 2.5f) code = 4;
    else if (a < 3.5f) code = 5;
    else if (a <= 5.f) code = 6;
    else code = 7;
    return sign | code;
}
__device__ __forceinline__ float from_e2m1(uint8_t code) {
    const int e = (code >> 1) & 3, mant = code & 1;  // magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6
    const float v = e == 0 ? 0.5f * float(mant) : ldexpf(1.f + 0.5f * float(mant), e - 1);
    return (code & 8) ? -v : v;
}

// cos/sin of the fp32 angle pos * inv_freq, evaluated in double and rounded to fp32 (as the CPU op does).
// Out of line: a double-precision sincos is ~100 instructions, and callers inside unrolled loops (the decode
// attention's output pairs, the norms' rope pairs) inlined one copy per iteration, code that a CTA running once per
// layer fetched cold, or jumped across where it did not need it (the attention kernel's instruction fetches were a
// quarter of its stall samples at one sequence, docs/perf-log/2026-12-07_attention-fusions.md). Its own arithmetic is
// the same either way; a caller's rotation after it (a c - b s) may be contracted into a multiply-add the other way
// round: compressor_emit_kernel's second component went from fma(a, s, b c) to fma(b, c, a s) when this went out of
// line, which moved logits inside the envelope (tiny-a in exact numerics, golden-a and golden-d in both; runs
// 605-606, docs/perf-log/2026-12-07_vocabulary-passes-and-merge-loads.md). rope_rotate leaves the contraction to
// the compiler.
static __device__ __noinline__ void rope_cos_sin(int64_t pos, float inv_freq, float& c, float& s) {
    const float angle = float(pos) * inv_freq;
    double sd, cd;
    sincos(double(angle), &sd, &cd);
    c = float(cd);
    s = float(sd);
}
// The (cos, sin) of a token's n_pairs rope pairs at pos for a whole CTA: rope_cos_sin per pair, the pairs spread over
// the CTA's threads, then a barrier. Every thread of the CTA calls it; kernels whose CTA rows share a token use it
// so that each angle is evaluated once rather than once per row.
__device__ __forceinline__ void cta_rope_table(int64_t pos, const float* inv_freq, int n_pairs, float2* cos_sin) {
    for (int i = int(threadIdx.x); i < n_pairs; i += int(blockDim.x)) {
        float c, s;
        rope_cos_sin(pos, inv_freq[i], c, s);
        cos_sin[i] = make_float2(c, s);
    }
    __syncthreads();
}
// (cos, sin) of rope pair `pair` at pos: read from the CTA's table when there is one (cta_rope_table), else
// evaluated (rope_cos_sin). Both give the same bits.
__device__ __forceinline__ void rope_pair_cos_sin(const float2* table, int64_t pos, const float* inv_freq, int pair,
                                                  float& c, float& s) {
    if (table) {
        c = table[pair].x;
        s = table[pair].y;
    } else {
        rope_cos_sin(pos, inv_freq[pair], c, s);
    }
}
// Rotates the pair (x0, x1) by +angle (or -angle when inverse). Which product of each component the compiler fuses
// into a multiply-add is its choice and can differ between call sites and builds (see rope_cos_sin).
__device__ __forceinline__ void rope_rotate(float& x0, float& x1, float c, float s, bool inverse) {
    if (inverse) s = -s;
    const float a = x0, b = x1;
    x0 = a * c - b * s;
    x1 = b * c + a * s;
}

}  // namespace flashseek::cuda::attn_detail
