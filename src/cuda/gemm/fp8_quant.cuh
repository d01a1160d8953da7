// The two device steps of the official act_quant (per 1 x 128 block, ue8m0 scales), shared by every producer of an
// Fp8Activation (act_quant.cu, the grouped expert up-projection epilogues) so that they agree bit for bit with each
// other and with the release-numerics preparation of linear.cuh: the block scale 2^ceil(log2(max(amax, 1e-4) / 448))
// (gemm/prepare_block.cuh) and one value's e4m3 code, e4m3(clamp(v / scale, +-448)) rounded to nearest even (the
// division by a power of two is the multiplication by its exact inverse).
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/gemm/prepare_block.cuh"

namespace flashseek::cuda {

__device__ __forceinline__ float fp8_block_scale(float amax) {
    return prepared_block_scale(amax, int(ActNumerics::FP8_BLOCK128));
}

__device__ __forceinline__ uint32_t fp8_code(float v, float inv_scale) {
    return uint32_t(__nv_cvt_float_to_fp8(fminf(fmaxf(v * inv_scale, -448.f), 448.f), __NV_SATFINITE, __NV_E4M3));
}
// Four consecutive values' codes in one word (x[0] in the low byte): fp8_code's values, two per conversion
// (cvt.rn.satfinite.e4m3x2 on sm_89+; the same rounding as the single form).
__device__ __forceinline__ uint32_t fp8_code4(const float* x, float inv_scale) {
    auto clamped = [&](float v) { return fminf(fmaxf(v * inv_scale, -448.f), 448.f); };
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(clamped(x[0]), clamped(x[1])), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(clamped(x[2]), clamped(x[3])), __NV_SATFINITE, __NV_E4M3);
    return lo | hi << 16;
}

// Features 8c..8c+7 of row `row` of an FP8_ROWS activation (act_quant.cuh, NATURAL order, k % 128 == 0), for
// producers holding 8 consecutive features per thread, a half warp per 128-block (lane j of the half holds columns
// 8j..8j+7 of its block; both halves of the warp call it): the block's amax over the half warp, its scale (written
// by lane 0 of the half) and the 8 codes as one 8-byte store. The bits quantize_fp8_activation gives.
__device__ __forceinline__ void store_fp8_rows_features_x8(uint8_t* codes, int64_t codes_ld, float* scales,
                                                           int64_t scales_ld, int64_t row, int c, const float (&v)[8],
                                                           int lane) {
    const float sc = fp8_block_scale(half_warp_amax8(v, lane)), inv = 1.f / sc;
    *reinterpret_cast<uint2*>(codes + row * codes_ld + 8 * int64_t(c)) = make_uint2(fp8_code4(v, inv), fp8_code4(v + 4, inv));
    if ((lane & 15) == 0) scales[(8 * int64_t(c) / 128) * scales_ld + row] = sc;
}

}  // namespace flashseek::cuda
