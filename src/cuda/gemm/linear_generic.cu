// Shape-agnostic fallback linear (see linear_generic.cuh): one warp per output, element-wise dequantization.
#include "cuda/gemm/linear_generic.cuh"

#include "cuda/common/check.cuh"
#include "cuda/gemm/generic_values.cuh"

namespace flashseek::cuda::generic {
namespace {

__global__ void linear_kernel(PreparedView x, WeightView w, int64_t M, int64_t rows_per_group, int64_t group_cols,
                              void* y, int y_f32, int64_t ld_y) {
    const int lane = threadIdx.x & 31;
    const int64_t idx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= M * w.out) return;
    const int64_t m = idx / w.out, n = idx % w.out;
    const int64_t col0 = (n / rows_per_group) * group_cols;
    float acc = 0.f;
    for (int64_t k = lane; k < w.in; k += 32) acc += weight_value(w, n, k) * prepared_value(x, m, col0 + k);
    acc = warp_sum(acc);
    if (lane == 0) {
        if (y_f32)
            static_cast<float*>(y)[m * ld_y + n] = acc;
        else
            static_cast<uint16_t*>(y)[m * ld_y + n] = f32_to_bf16_bits(acc);
    }
}

}  // namespace

void linear(const PreparedActivation& x, const DeviceLinear& w, int64_t M, int64_t rows_per_group, int64_t group_cols,
            void* y, OutKind y_kind, int64_t ld_y, cudaStream_t stream) {
    const int64_t outputs = M * w.out;
    const int warps = 8;
    FS_REQUIRE((outputs + warps - 1) / warps < (int64_t(1) << 31), "generic linear: too many outputs (", outputs, ")");
    linear_kernel<<<unsigned((outputs + warps - 1) / warps), 32 * warps, 0, stream>>>(
        view_of(x), view_of(w), M, rows_per_group, group_cols, y, y_kind == OutKind::F32, ld_y);
    CUDA_CHECK_LAUNCH("generic linear_kernel");
}

}  // namespace flashseek::cuda::generic
