// M = 1 path of linear() for FP8 block-scaled and FP4 weights: the SIMT GEMV (gemv_simt.cu), chosen by linear.cu
// before the tensor-core GEMV (gemv.cuh) when the prepared activation has one token. Internal to src/cuda/gemm.
#pragma once
#include <cuda_runtime.h>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::gemv_simt {

inline constexpr int kRowsPerWarp = 4;
inline constexpr int kWarps = 4;
inline constexpr int kRowsPerCta = kRowsPerWarp * kWarps;

// True when this path serves the problem: FP8/FP4 weights, a prepared (not raw) one-token activation, the GEMV
// enabled, in % 128 == 0, 16-byte aligned pointers, and (grouped) every 16-row CTA inside one group.
bool eligible(const PreparedActivation& x, const DeviceLinear& w, int groups);
// K splits it would use (1 without a workspace).
int plan_splits(const PreparedActivation& x, const DeviceLinear& w, const GemmWorkspace* ws);
// y = x W^T (grouped as in grouped_linear when groups > 1). Arguments already validated by linear.cu.
void run(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y, OutKind y_kind, int64_t ld_y,
         const GemmWorkspace* ws, cudaStream_t stream);

}  // namespace flashseek::cuda::gemv_simt
