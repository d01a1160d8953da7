// Small-M (decode) path of linear() for FP8 block-scaled and FP4 weights: a bandwidth-bound tensor-core GEMV, chosen
// by linear.cu when M <= small_m_gemv_max_tokens() and the shape is on the aligned grid. Takes prepared or raw
// (PreparedActivation::raw) activations.
// See gemv.cu for the kernel design.
// Internal to src/cuda/gemm: callers use linear()/grouped_linear() of linear.cuh.
#pragma once
#include <cuda_runtime.h>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::gemv {

inline constexpr int kRowsPerCta = 16;  // one mma row tile per CTA (warps per CTA: gmma::warps_per_tile())

// True when the GEMV path serves M tokens of this weight: FP8/FP4, 1 <= M <= small_m_gemv_max_tokens(),
// in % 128 == 0, 16-byte aligned weight, and (grouped) every 16-row CTA inside one group.
bool serves(int64_t M, const DeviceLinear& w, int groups);
// serves() and the activation is usable (16-byte aligned; raw rows with a stride that keeps 16-byte rows).
bool eligible(const PreparedActivation& x, const DeviceLinear& w, int groups);

// K splits the GEMV would use for this problem (1 without a workspace).
int plan_splits(const PreparedActivation& x, const DeviceLinear& w, const GemmWorkspace* ws);

// The split-K rule of both decode GEMVs (this one and gemv_simt): enough CTAs for `ctas_per_sm` per SM over
// `row_blocks` row CTAs, each split at least `min_steps` 128-column steps of the n_steps, within the workspace's
// counters and fp32 partials (m x out per split); splits are then evened out. 1 without a workspace.
int split_k(int64_t row_blocks, int64_t n_steps, int64_t m, int64_t out, int64_t ctas_per_sm, int64_t min_steps,
            const GemmWorkspace* ws);

// y = x W^T (grouped as in grouped_linear when groups > 1). Arguments already validated by linear.cu.
void run(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y, OutKind y_kind, int64_t ld_y,
         const GemmWorkspace* ws, cudaStream_t stream);

}  // namespace flashseek::cuda::gemv
