// Warpgroup (wgmma) decode GEMV for FP8 block-scaled weights on sm_90a (release numerics, 2-16 tokens). See
// wgmma_gemv.cu. Internal to src/cuda/gemm: linear()/grouped_linear() take it first when eligible() holds, then
// bulk_gemv.cu, gemv_simt.cu, gemv.cu.
#pragma once
#include <cuda_runtime.h>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::wgmma_gemv {

// FP8_BLOCK128 weight (E8M0 or fp32 scales) with in % 256 == 0 and out % 64 == 0 (grouped: rows per group % 64 ==
// 0), 16-byte aligned, 2 <= M <= min(16, small_m_gemv_max_tokens()), >= 4 MB of weights, a prepared (not raw)
// activation in release numerics, a compute capability 9.0 device with the sm_90a build, and the process-wide
// switch on (set_enabled / FLASHSEEK_WGMMA_GEMV=0). any_size (tests, benchmarks) drops the token and size floors.
bool eligible(const PreparedActivation& x, const DeviceLinear& w, int groups);
void set_enabled(bool enabled, bool any_size = false);

// K splits it would use (1 without a workspace).
int plan_splits(const PreparedActivation& x, const DeviceLinear& w, const GemmWorkspace* ws);

// y = x W^T (grouped as grouped_linear when groups > 1). Arguments validated by linear.cu.
void run(const PreparedActivation& x, const DeviceLinear& w, int groups, void* y, OutKind y_kind, int64_t ld_y,
         const GemmWorkspace* ws, cudaStream_t stream);

}  // namespace flashseek::cuda::wgmma_gemv
