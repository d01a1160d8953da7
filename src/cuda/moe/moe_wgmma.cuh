// Warpgroup (wgmma) kernels for the routed FP4 experts at decode on sm_90a. See moe_wgmma.cu.
// Internal to src/cuda/moe: moe_expert_up/down of moe.cuh pick this path when eligible() holds, before the
// bulk-copy kernels (moe_bulk.cu) and moe_gemv.cu.
#pragma once
#include <cuda_runtime.h>

#include "cuda/moe/moe.cuh"

namespace flashseek::cuda::moe_wgmma {

// Routed (grouping with act tiles attached) FP4 experts with E8M0 scales 16-byte aligned, hidden and inter
// multiples of 256 within the tiles' K, 8 <= M <= 16 tokens (and within small_m_gemv_max_tokens()), on a
// compute capability 9.0 device with the sm_90a build; FLASHSEEK_MOE_WGMMA=0 or set_enabled(false) turns it off.
bool serves(const ExpertTable& t, const MoeGrouping* grouping, int64_t M);
void set_enabled(bool enabled, bool any_tokens = false);  // any_tokens (tests, benchmarks): also below 8 tokens
// serves() and x a prepared (not raw) FP4-layout activation in release numerics (e4m3 codes), 16-byte aligned.
bool eligible(const ExpertTable& t, const MoeGrouping* grouping, int64_t M, const PreparedActivation& x);

// As moe_bulk's: the activation rows are packed into the grouping's tiles first; up writes natural-order bf16 h
// rows by slot, then quantizes them in place to w2's prepared layout (moe_gemv::quantize_h).
void expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping& grouping, int64_t M, int top_k,
               float swiglu_limit, PreparedActivation& h, cudaStream_t stream);
void expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping& grouping, int64_t M, int top_k,
                 float* y, cudaStream_t stream);
// Split-item scratch (MoeGrouping::split_partials): per CTA boundary both halves' per-thread sums (2 x 128 x 16
// floats), for up to max_ctas() CTAs.
inline constexpr int kSplitFloatsPerSlot = 2 * 128 * 16;
int max_ctas();

}  // namespace flashseek::cuda::moe_wgmma
