// Bulk-copy streaming kernels for the routed FP4 experts at decode (sm_90+, release numerics). See moe_bulk.cu.
// Internal to src/cuda/moe: callers use moe_expert_up/moe_expert_down of moe.cuh, which pick this path when
// eligible() holds and fall back to moe_gemv.cu otherwise.
#pragma once
#include <cuda_runtime.h>

#include "cuda/moe/moe.cuh"

namespace flashseek::cuda::moe_bulk {

// The path serves routed (grouping != nullptr) FP4 experts with hidden, inter multiples of 512, 8 <= M <= 16
// tokens (and within small_m_gemv_max_tokens()), 16-byte aligned scale pointers, a prepared (not raw) activation in release numerics (FP8_BLOCK128: values are e4m3 codes), on a device
// with compute capability >= 9.0 (bulk asynchronous copies); FLASHSEEK_MOE_BULK=0 turns it off.
bool serves(const ExpertTable& t, const MoeGrouping* grouping, int64_t M);
void set_enabled(bool enabled);  // process-wide (moe.cuh: set_moe_bulk_path)
bool eligible(const ExpertTable& t, const MoeGrouping* grouping, int64_t M, const PreparedActivation& x);

// As moe_gemv's: h is written as natural-order bf16 rows by slot, then quantized in place to w2's prepared layout.
void expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping& grouping, int64_t M, int top_k,
               float swiglu_limit, PreparedActivation& h, cudaStream_t stream);
void expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping& grouping, int64_t M, int top_k,
                 float* y, cudaStream_t stream);

}  // namespace flashseek::cuda::moe_bulk
