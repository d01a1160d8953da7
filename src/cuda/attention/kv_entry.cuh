// Device-only helpers that write and read one KV entry in its cache format (kv_cache.cuh): the FP8 simulation
// of the no-rope dims (block 64, scale 2^ceil(log2(max(amax,1e-4)/448)), e4m3 round-to-nearest-even) is done
// here once, at store time, so a stored FP8 entry dequantizes to exactly the reference's simulated bf16 values.
#pragma once
#include "cuda/attention/kv_cache.cuh"
#include "cuda/common/attn_helpers.cuh"

namespace flashseek::cuda::attn_detail {

// Block-cooperative: v[0, dim) (shared memory, fp32 values already rounded to bf16) -> entry at dst. Every warp
// of the block takes 64-dim tiles of the no-rope part; the rope part is copied as bf16. Writes v back with the
// simulated values when write_back (so callers can reuse the final vector). fp8_sim = false (BF16 entries only,
// the reference configuration, whose CPU counterpart has no quantization simulation) stores v unchanged.
__device__ inline void store_kv_entry(float* v, int dim, int rope_dim, KvFormat fmt, uint8_t* dst, bool write_back,
                                      bool fp8_sim = true) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const int nope = dim - rope_dim;
    if (!fp8_sim && fmt == KvFormat::BF16) {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) reinterpret_cast<bf16*>(dst)[i] = __float2bfloat16_rn(v[i]);
        return;
    }
    for (int tile = warp; tile < nope / 64; tile += n_warps) {
        const int d0 = tile * 64 + 2 * lane;
        const float a = v[d0], b = v[d0 + 1];
        const float amax = fmaxf(warp_max(fmaxf(fabsf(a), fabsf(b))), 1e-4f);
        const float s = pow2_ceil(amax / 448.f);
        const uint8_t qa = to_e4m3(fminf(fmaxf(a / s, -448.f), 448.f));
        const uint8_t qb = to_e4m3(fminf(fmaxf(b / s, -448.f), 448.f));
        const float ra = from_e4m3(qa) * s, rb = from_e4m3(qb) * s;
        if (fmt == KvFormat::FP8) {
            dst[d0] = qa;
            dst[d0 + 1] = qb;
            if (lane == 0) dst[nope + 2 * rope_dim + tile] = e8m0_byte(s);
        } else {
            reinterpret_cast<__nv_bfloat162*>(dst)[d0 / 2] = __floats2bfloat162_rn(ra, rb);
        }
        if (write_back) {
            v[d0] = ra;
            v[d0 + 1] = rb;
        }
    }
    const int rope_off_bytes = fmt == KvFormat::FP8 ? nope : nope * 2;
    bf16* rope_dst = reinterpret_cast<bf16*>(dst + rope_off_bytes);
    for (int i = threadIdx.x; i < rope_dim; i += blockDim.x) rope_dst[i] = __float2bfloat16_rn(v[nope + i]);
    if (fmt == KvFormat::FP8) {  // zero the padding bytes after the scales
        const int used = nope + 2 * rope_dim + nope / 64;
        const int total = int(kv_entry_bytes(fmt, dim, rope_dim));
        for (int i = used + threadIdx.x; i < total; i += blockDim.x) dst[i] = 0;
    }
}

// Dequantizes dims [d, d+2) of an entry (d even) to fp32.
__device__ __forceinline__ float2 load_kv_pair(const uint8_t* src, int dim, int rope_dim, KvFormat fmt, int d) {
    const int nope = dim - rope_dim;
    if (fmt == KvFormat::BF16) return __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(src)[d / 2]);
    if (d >= nope) return __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(src + nope)[(d - nope) / 2]);
    const float s = e8m0_value(src[nope + 2 * rope_dim + d / 64]);
    return make_float2(from_e4m3(src[d]) * s, from_e4m3(src[d + 1]) * s);
}

}  // namespace flashseek::cuda::attn_detail
