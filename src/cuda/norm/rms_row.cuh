// The arithmetic of an RMSNorm row held by one warp, lane `lane` holding the 16-byte chunks lane + 32 v (8 bf16 each):
// rmsnorm's vector path (rmsnorm.cu) and the persistent GEMV chain's norm of its first output (gemm/gemv_chain.cu)
// both call these, so that a row normed by either has the same bits (the sum's order and the products are in one
// place; the op tests compare the two bit for bit).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/warp_reduce.cuh"

namespace flashseek::cuda::rms_row {

// ss plus the squares of one chunk's 8 values, pair by pair in order.
__device__ __forceinline__ float add_chunk_squares(const uint4& raw, float ss) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(h[j]);
        ss += f.x * f.x + f.y * f.y;
    }
    return ss;
}

// 1 / rms of the row from every lane's partial sum of squares (the warp's butterfly, then the mean and eps).
__device__ __forceinline__ float inverse_rms(float lane_ss, int dim, float eps) {
    const float ss = warp_sum(lane_ss);
    return rsqrtf(ss / float(dim) + eps);
}

// One normed value before its rounding to bf16: x * r, then times the weight (the reference's order).
__device__ __forceinline__ float normed(float x, float r, bool with_weight, float w) {
    x *= r;
    if (with_weight) x *= w;
    return x;
}

}  // namespace flashseek::cuda::rms_row
