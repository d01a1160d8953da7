// Persistent cp.async-ring kernels for the routed FP4 experts at decode (moe_stream.cu: design, why, measurements).
// Opt-in (FLASHSEEK_MOE_STREAM=1 or set_moe_stream(1, ...), moe.cuh): when on and eligible, moe.cu uses them ahead of
// the per-tile GEMV kernels (moe_gemv.cu), which stay the default (faster on the H200). Internal to src/cuda/moe.
#pragma once
#include <cuda_runtime.h>

#include "cuda/moe/moe.cuh"

namespace flashseek::cuda::moe_stream {

// Routed (grouping != null) FP4 + E8M0 experts, hidden / inter multiples of 128, 1 <= M <= the small-M GEMV limit,
// prepared (not raw) 16-byte-aligned activation, the ring fits the device; and the path is switched on.
bool eligible(const ExpertTable& t, int64_t M, const PreparedActivation& x, const MoeGrouping* g);

// Same contracts as moe_expert_up / moe_expert_down (arguments validated by moe.cu, h's fields set).
void expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping& g, int64_t M, int top_k,
               float swiglu_limit, ActNumerics h_numerics, PreparedActivation& h, cudaStream_t stream);
void expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping& g, int64_t M, int top_k,
                 float* y, cudaStream_t stream);

}  // namespace flashseek::cuda::moe_stream
