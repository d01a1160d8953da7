// mma_gemv, the small-M (decode) variant of the linear catalogue for FP8 block-scaled and FP4 weights: a
// bandwidth-bound f16 mma.sync GEMV (1-16 tokens, shapes on the aligned grid), which also takes raw activations
// (PreparedActivation::raw). See gemv.cu for the kernel design; its catalogue functions are declared in
// linear_catalogue.h. Internal to src/cuda/gemm.
#pragma once
#include <cuda_runtime.h>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::mma_gemv {

inline constexpr int kRowsPerCta = 16;  // one mma row tile per CTA (warps per CTA: gmma::warps_per_tile())

// The weight side of supports(): FP8/FP4, 1 <= M <= kGemvMaxTokens, in % 128 == 0, 16-byte aligned weight, and
// (grouped) every 16-row CTA inside one group.
bool serves(int64_t M, const DeviceLinear& w, int groups);

// The split-K rule of both decode GEMVs (this one and simt_gemv): enough CTAs for `ctas_per_sm` per SM over
// `row_blocks` row CTAs, each split at least `min_steps` 128-column steps of the n_steps, within the workspace's
// counters and fp32 partials (m x out per split); splits are then evened out. 1 without a workspace.
int split_k(int64_t row_blocks, int64_t n_steps, int64_t m, int64_t out, int64_t ctas_per_sm, int64_t min_steps,
            const GemmWorkspace* ws);

}  // namespace flashseek::cuda::mma_gemv
