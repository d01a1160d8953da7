// M = 1 SIMT path of moe_expert_up / moe_expert_down (moe_gemv_simt.cu), an opt-in alternative to the tensor-core
// GEMV kernels of moe_gemv.cu (FLASHSEEK_MOE_SIMT=1). Internal to src/cuda/moe.
#pragma once
#include <cuda_runtime.h>

#include "cuda/moe/moe.cuh"

namespace flashseek::cuda::moe_gemv_simt {

bool enabled();  // FLASHSEEK_MOE_SIMT=1
// enabled(), M == 1, a prepared 16-byte aligned activation, hidden / inter multiples of 128.
bool eligible(const ExpertTable& t, int64_t M, const PreparedActivation& x);
void expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping* grouping, int64_t M, int top_k,
               float swiglu_limit, ActNumerics h_numerics, PreparedActivation& h, cudaStream_t stream);
void expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping* grouping, int64_t M, int top_k,
                 float* y, cudaStream_t stream);

}  // namespace flashseek::cuda::moe_gemv_simt
