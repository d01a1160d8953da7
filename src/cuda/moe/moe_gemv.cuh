// Small-M (decode) path of moe_expert_up / moe_expert_down (moe.cuh): bandwidth-bound tensor-core GEMV kernels over
// each active expert's weights, used by moe.cu when M <= small_m_gemv_max_tokens() and hidden / inter are multiples
// of 128. The up-projection leaves h as raw bf16 rows (PreparedActivation::raw) that the down-projection prepares. See moe_gemv.cu for the design. Internal to src/cuda/moe.
#pragma once
#include <cuda_runtime.h>

#include "cuda/moe/moe.cuh"

namespace flashseek::cuda::moe_gemv {

// True when the GEMV path serves M tokens for these experts (same settings as the linear GEMV, linear.cuh).
bool serves(const ExpertTable& t, int64_t M);
// serves() and the activation is usable (16-byte aligned; raw rows with a stride that keeps 16-byte rows).
bool eligible(const ExpertTable& t, int64_t M, const PreparedActivation& x);

// Same contracts as moe_expert_up / moe_expert_down; arguments already validated by moe.cu, h's fields set.
void expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping* grouping, int64_t M, int top_k,
               float swiglu_limit, ActNumerics h_numerics, PreparedActivation& h, cudaStream_t stream);
// h (natural-order bf16 rows written by an up-projection, fields set) -> prepared layout of w2 in place.
void quantize_h(PreparedActivation& h, const ExpertTable& t, const MoeGrouping* grouping, ActNumerics h_numerics,
                cudaStream_t stream);
void expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping* grouping, int64_t M, int top_k,
                 float* y, cudaStream_t stream);

}  // namespace flashseek::cuda::moe_gemv
