// One warp writes one 128-column block of a prepared activation (linear.cuh PreparedActivation): 4 values per lane in
// natural column order (lane l holds columns 4l..4l+3), the block's power-of-two scale (release numerics:
// act_quant to e4m3 codes; exact: the f16 form), values stored at their permuted positions for the weight layout.
// Used by the kernels that produce a prepared activation directly (moe_gemv.cu quantize_h, moe_swiglu.cu).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/mma_core.cuh"

namespace flashseek::cuda {

// Every lane of the warp must call it (warp-wide amax). `block` points at the block's 128 values, `scale` at its
// scale (written by lane 0).
__device__ __forceinline__ void store_prepared_block(const float (&v)[4], int lane, WeightKind layout, int numerics,
                                                     uint16_t* block, float* scale) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
    amax = warp_max(amax);  // also orders every lane's reads of `block` before any lane's writes (in-place use)
    float sc = 1.f;
    if (numerics == int(ActNumerics::FP8_BLOCK128))
        sc = exp2i(max(-126, min(127, ceil_log2(fmaxf(amax, 1e-4f) / 448.f))));
    else if (amax > 0.f)
        sc = exp2i(max(-126, min(127, ceil_log2(amax) - 14)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float q = v[i] / sc;
        if (numerics == int(ActNumerics::FP8_BLOCK128)) q = round_e4m3(fminf(fmaxf(q, -448.f), 448.f));
        block[mma::prepared_pos(layout, 4 * lane + i)] = __half_as_ushort(__float2half_rn(q));
    }
    if (lane == 0) *scale = sc;
}

}  // namespace flashseek::cuda
