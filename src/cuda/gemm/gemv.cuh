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

// y = x W^T (grouped as in grouped_linear when groups > 1). Arguments already validated by linear.cu.
void run(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y, OutKind y_kind, int64_t ld_y,
         const GemmWorkspace* ws, cudaStream_t stream);

}  // namespace flashseek::cuda::gemv
