// One element of the release-numerics SwiGLU of DeepSeek-V4's experts (docs/model.md, MoE): the reference's expert
// GEMMs output bf16, then silu(min(gate, limit)) * clamp(up, -limit, limit), times the routing weight (1 for the
// shared expert), rounded to bf16. Shared by the epilogues and quantizers that produce a down-projection's input
// (moe/grouped_gemm_common.cuh, gemm/act_quant.cu) and the decode expert kernels' epilogues (moe_gemv.cu,
// moe_simt.cu, moe_bulk.cu, moe_wgmma.cu), so they agree bit for bit with moe_swiglu.cu (same formula, same device
// expf).
#pragma once
#include <cstdint>

#include "cuda/common/numeric.cuh"

namespace flashseek::cuda {

// round_sums = false: the sums enter unrounded (exact numerics, where the reference's expert GEMMs stay fp32).
__device__ __forceinline__ uint16_t swiglu_bf16(float gate_sum, float up_sum, float weight, float limit,
                                                bool round_sums = true) {
    if (round_sums) round_bf16_pair(gate_sum, up_sum);  // cvt.rn.bf16x2: round_bf16's bits (numeric.cuh)
    const float gate = fminf(gate_sum, limit);
    const float up = fminf(fmaxf(up_sum, -limit), limit);
    return f32_to_bf16_bits_rn(gate / (1.f + expf(-gate)) * up * weight);
}

}  // namespace flashseek::cuda
