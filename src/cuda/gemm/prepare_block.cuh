// One warp writes one 128-column block of a prepared activation (linear.cuh PreparedActivation): 4 values per lane in
// natural column order (lane l holds columns 4l..4l+3), the block's power-of-two scale (release numerics:
// act_quant to e4m3 codes; exact: the f16 form), values stored at their permuted positions for the weight layout.
// Used by prepare_activation and by the kernels that produce a prepared activation directly (moe_gemv.cu
// quantize_h, moe_wgmma.cu quantize_h_tiles_kernel, moe_swiglu.cu, mhc_pre's fused norm).
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/mma_core.cuh"

namespace flashseek::cuda {

// The power-of-two scale of a 128-block whose absolute maximum is amax (prepare_activation's rule: release numerics
// put the block's amax just under the e4m3 maximum 448, exact numerics just under the f16 one; an all-zero exact
// block keeps 1).
__device__ __forceinline__ float prepared_block_scale(float amax, int numerics) {
    if (numerics == int(ActNumerics::FP8_BLOCK128)) return exp2i(max(-126, min(127, ceil_log2(fmaxf(amax, 1e-4f) / 448.f))));
    return amax > 0.f ? exp2i(max(-126, min(127, ceil_log2(amax) - 14))) : 1.f;
}
// One value of such a block in release numerics: times 1 / scale (exact: the scale is a power of two, so this equals
// the division), act_quant to e4m3 (clamped to +-448, round to nearest even: the hardware cvt on sm_89+,
// bit-identical to util/numeric.h f32_to_e4m3 for every finite value), the e4m3 code.
__device__ __forceinline__ __nv_fp8_storage_t prepared_e4m3(float v, float inv_scale) {
    return __nv_cvt_float_to_fp8(fminf(fmaxf(v * inv_scale, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3);
}
// ... as stored: f16 bits (release numerics: of that e4m3 value, exact in f16).
__device__ __forceinline__ uint16_t prepared_value_bits(float v, float inv_scale, int numerics) {
    if (numerics == int(ActNumerics::FP8_BLOCK128))
        return __nv_cvt_fp8_to_halfraw(prepared_e4m3(v, inv_scale), __NV_E4M3).x;
    return __half_as_ushort(__float2half_rn(v * inv_scale));
}

// Every lane of the warp must call it (warp-wide amax). `block` points at the block's 128 values, `scale` at its
// scale (written by lane 0).
__device__ __forceinline__ void store_prepared_block(const float (&v)[4], int lane, WeightKind layout, int numerics,
                                                     uint16_t* block, float* scale) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = warp_max(amax);  // also orders every lane's reads of `block` before any lane's writes (in-place use)
    const float sc = prepared_block_scale(amax, numerics), inv = 1.f / sc;
#pragma unroll
    for (int i = 0; i < 4; ++i) block[mma::prepared_pos(layout, 4 * lane + i)] = prepared_value_bits(v[i], inv, numerics);
    if (lane == 0) *scale = sc;
}

// The absolute maximum of a 128-block held by a half warp, 8 values per lane (both halves of the warp call it).
__device__ __forceinline__ float half_warp_amax8(const float (&v)[8], int lane) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const unsigned half = 0xffffu << (lane & 16);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(half, amax, o));
    return amax;
}

// The same for a block held by a half warp, 8 values per lane: lane j of the half (lane % 16) holds columns 8j..8j+7
// and writes them with one 16-byte store (the FP8 / FP4 permutations stay inside each group of 8). Both lanes of
// the half must call it; `block` is 16-byte aligned. For producers that hold 8 consecutive features per thread
// (mhc_pre's fused norm).
// The block's scale and the lane's 8 stored values (q in the stored order of its group of 8), without the stores:
// store_prepared_block_x8's arithmetic, also for a consumer that stages them itself (simt_gemv's normed input).
template <WeightKind L>
__device__ __forceinline__ float prepared_block_x8_bits(const float (&v)[8], int lane, int numerics, uint16_t (&q)[8]) {
    const float sc = prepared_block_scale(half_warp_amax8(v, lane), numerics), inv = 1.f / sc;
#pragma unroll
    for (int i = 0; i < 8; ++i)  // the permutations stay inside groups of 8: position 8j + i goes to 8j + pos(i)
        q[mma::prepared_pos(L, i)] = prepared_value_bits(v[i], inv, numerics);
    return sc;
}

// A lane's 8 stored values as one 16-byte word (position 0 in the lowest bits).
__device__ __forceinline__ uint4 pack_prepared_x8(const uint16_t (&q)[8]) {
    uint4 out;
    out.x = uint32_t(q[0]) | uint32_t(q[1]) << 16;
    out.y = uint32_t(q[2]) | uint32_t(q[3]) << 16;
    out.z = uint32_t(q[4]) | uint32_t(q[5]) << 16;
    out.w = uint32_t(q[6]) | uint32_t(q[7]) << 16;
    return out;
}

template <WeightKind L>
__device__ __forceinline__ void store_prepared_block_x8(const float (&v)[8], int lane, int numerics, uint16_t* block,
                                                        float* scale) {
    uint16_t q[8];
    const float sc = prepared_block_x8_bits<L>(v, lane, numerics, q);
    const int j = lane & 15;
    *reinterpret_cast<uint4*>(block + 8 * j) = pack_prepared_x8(q);
    if (j == 0) *scale = sc;
}

// A padding row's part of a block (all zeros), as store_prepared_block_x8 writes it without the conversions: zero
// values and the scale of an all-zero block.
__device__ __forceinline__ void store_prepared_zero_x8(int lane, int numerics, uint16_t* block, float* scale) {
    const int j = lane & 15;
    *reinterpret_cast<uint4*>(block + 8 * j) = make_uint4(0u, 0u, 0u, 0u);
    if (j == 0) *scale = prepared_block_scale(0.f, numerics);
}

// Features 8c..8c+7 of row `row` of a prepared activation of `dim` columns (dim % 128 == 0, values row stride dim):
// the block and scale addressing and the layout dispatch, for producers holding 8 consecutive features per thread
// (a half warp per 128-block); zero = a padding row (store_prepared_zero_x8).
__device__ __forceinline__ void store_prepared_features_x8(uint16_t* values, float* scales, int dim, int64_t row, int c,
                                                           int layout, int numerics, const float (&v)[8], int lane,
                                                           bool zero = false) {
    const int64_t blk = (8 * c) / 128;
    uint16_t* block = values + row * dim + blk * 128;
    float* scale = scales + row * (dim / 128) + blk;
    if (zero)
        store_prepared_zero_x8(lane, numerics, block, scale);
    else if (layout == int(WeightKind::FP4_BLOCK32))
        store_prepared_block_x8<WeightKind::FP4_BLOCK32>(v, lane, numerics, block, scale);
    else
        store_prepared_block_x8<WeightKind::FP8_BLOCK128>(v, lane, numerics, block, scale);
}

}  // namespace flashseek::cuda
