// Shape-agnostic fallbacks of the linear and MoE kernels, for the shapes the tensor-core paths do not take
// (grouped linears whose groups are not 64 rows x 128 columns aligned, experts whose hidden or intermediate size is
// not a multiple of 128: the tiny test configs). One warp per output element, weights dequantized element by
// element, activations read back from the prepared layout (value * block scale). Correct for any shape, slow: only
// meant for small problems. Internal to src/cuda (not a public API).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::generic {

// y[m, n] = sum_k W[n, k] * x[m, col0(n) + k], col0(n) = (n / rows_per_group) * group_cols; W = w (w.in columns).
// x_rows (optional) maps output row m to the prepared row; y row m at y + m * ld_y.
void linear(const PreparedActivation& x, const DeviceLinear& w, int64_t M, int64_t rows_per_group, int64_t group_cols,
            void* y, OutKind y_kind, int64_t ld_y, cudaStream_t stream);

}  // namespace flashseek::cuda::generic
