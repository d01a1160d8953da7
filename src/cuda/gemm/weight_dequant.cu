// dequantize_weight_bf16 (weight_dequant.cuh): a grid-stride loop over the elements with the fallback kernels'
// element accessor (generic_values.cuh), so the widening is the one every other path's dequantization agrees with.
#include "cuda/gemm/weight_dequant.cuh"

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/gemm/generic_values.cuh"

namespace flashseek::cuda {
namespace {

__global__ void dequantize_kernel(generic::WeightView w, uint16_t* out) {
    const int64_t n = w.out * w.in;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        out[i] = f32_to_bf16_bits(generic::weight_value(w, i / w.in, i % w.in));
}

}  // namespace

void dequantize_weight_bf16(const DeviceLinear& w, uint16_t* out, cudaStream_t stream) {
    FS_REQUIRE(w.weight != nullptr && out != nullptr && w.out > 0 && w.in > 0,
               "dequantize_weight_bf16: null weight or output, or an empty [", w.out, ", ", w.in, "] matrix");
    const int64_t n = w.out * w.in;
    const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 16));
    dequantize_kernel<<<blocks, 256, 0, stream>>>(generic::view_of(w), out);
    CUDA_CHECK_LAUNCH("dequantize_weight_bf16");
}

}  // namespace flashseek::cuda
