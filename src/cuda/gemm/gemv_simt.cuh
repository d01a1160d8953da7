// simt_gemv, the one-token variant of the linear catalogue for FP8 block-scaled and FP4 weights (SIMT, every
// target). See gemv_simt.cu for the design; its catalogue functions are declared in linear_catalogue.h. Internal
// to src/cuda/gemm.
#pragma once
#include <cuda_runtime.h>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::simt_gemv {

inline constexpr int kRowsPerWarp = 4;
inline constexpr int kWarps = 4;
inline constexpr int kRowsPerCta = kRowsPerWarp * kWarps;

}  // namespace flashseek::cuda::simt_gemv
