// One warp writes one 128-column block of a prepared activation (linear.cuh PreparedActivation): 4 values per lane in
// natural column order (lane l holds columns 4l..4l+3), the block's power-of-two scale (release numerics:
// act_quant to e4m3 codes; exact: the f16 form), values stored at their permuted positions for the weight layout.
// Used by prepare_activation and by the kernels that produce a prepared activation directly (moe_gemv.cu
// quantize_h, moe_swiglu.cu, mhc_pre's fused norm).
#pragma once
#include <cuda_fp16.h>

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
// One value of such a block as stored: divided by the scale (release: act_quant to an e4m3 value), as f16 bits.
__device__ __forceinline__ uint16_t prepared_value_bits(float v, float sc, int numerics) {
    float q = v / sc;
    if (numerics == int(ActNumerics::FP8_BLOCK128)) q = round_e4m3(fminf(fmaxf(q, -448.f), 448.f));
    return __half_as_ushort(__float2half_rn(q));
}

// Every lane of the warp must call it (warp-wide amax). `block` points at the block's 128 values, `scale` at its
// scale (written by lane 0).
__device__ __forceinline__ void store_prepared_block(const float (&v)[4], int lane, WeightKind layout, int numerics,
                                                     uint16_t* block, float* scale) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = warp_max(amax);  // also orders every lane's reads of `block` before any lane's writes (in-place use)
    const float sc = prepared_block_scale(amax, numerics);
#pragma unroll
    for (int i = 0; i < 4; ++i) block[mma::prepared_pos(layout, 4 * lane + i)] = prepared_value_bits(v[i], sc, numerics);
    if (lane == 0) *scale = sc;
}

// The same for a block held by a half warp, 8 values per lane: lane j of the half (lane % 16) holds columns 8j..8j+7
// and writes them with one 16-byte store (the FP8 / FP4 permutations stay inside each group of 8). Both lanes of
// the half must call it; `block` is 16-byte aligned. For producers that hold 8 consecutive features per thread
// (mhc_pre's fused norm).
template <WeightKind L>
__device__ __forceinline__ void store_prepared_block_x8(const float (&v)[8], int lane, int numerics, uint16_t* block,
                                                        float* scale) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const unsigned half = 0xffffu << (lane & 16);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(half, amax, o));
    const float sc = prepared_block_scale(amax, numerics);
    const int j = lane & 15;
    uint16_t q[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) q[mma::prepared_pos(L, 8 * j + i) - 8 * j] = prepared_value_bits(v[i], sc, numerics);
    uint4 out;
    out.x = uint32_t(q[0]) | uint32_t(q[1]) << 16;
    out.y = uint32_t(q[2]) | uint32_t(q[3]) << 16;
    out.z = uint32_t(q[4]) | uint32_t(q[5]) << 16;
    out.w = uint32_t(q[6]) | uint32_t(q[7]) << 16;
    *reinterpret_cast<uint4*>(block + 8 * j) = out;
    if (j == 0) *scale = sc;
}

}  // namespace flashseek::cuda
