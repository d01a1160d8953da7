// Bulk-copy decode GEMV for FP8 block-scaled weights (sm_90+, release numerics, 1-16 tokens). See bulk_gemv.cu.
// Internal to src/cuda/gemm: linear()/grouped_linear() take it when eligible() holds, else gemv.cu / gemv_simt.cu.
#pragma once
#include <cuda_runtime.h>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::bulk_gemv {

// FP8_BLOCK128 weight with in % 256 == 0 and out % 16 == 0 (grouped: rows per group % 16 == 0), 16-byte aligned,
// 2 <= M <= min(16, small_m_gemv_max_tokens()) and >= 16 MB of weights (where it beats the other GEMVs), a prepared
// (not raw) activation in release numerics (FP8_BLOCK128), compute capability >= 9.0, and the process-wide switch on
// (set_enabled / FLASHSEEK_BULK_GEMV=0). any_size drops the token and size floors (tests of edge shapes).
bool eligible(const PreparedActivation& x, const DeviceLinear& w, int groups);
void set_enabled(bool enabled, bool any_size = false);
bool enabled();

// K splits it would use (1 without a workspace).
int plan_splits(const PreparedActivation& x, const DeviceLinear& w, const GemmWorkspace* ws);

// y = x W^T (grouped as grouped_linear when groups > 1). Arguments validated by linear.cu.
void run(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y, OutKind y_kind, int64_t ld_y,
         const GemmWorkspace* ws, cudaStream_t stream);

}  // namespace flashseek::cuda::bulk_gemv
