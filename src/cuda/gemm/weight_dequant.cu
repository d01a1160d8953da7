// dequantize_weight_bf16 (weight_dequant.cuh): a grid-stride loop with the fallback kernels' element accessor
// (generic_values.cuh), so the widening is the one every other path's dequantization agrees with. When a row's
// width is a multiple of 8 (every V4 linear) a thread widens 8 consecutive elements with weight_value's products
// from one load of their codes and one scale, and stores them with one 16-byte store: the element-wise form (byte
// loads, 2-byte stores, a 64-bit division per element) ran at 0.23 TB/s on wo_a in prefill.
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

// Eight consecutive elements of row `row` from column `col` (a multiple of 8): one 8-byte (FP8), 4-byte (FP4) or
// 16-byte (BF16) load and one scale, the products of weight_value (generic_values.cuh) for each.
__device__ __forceinline__ uint4 widen8(const generic::WeightView& w, int64_t row, int64_t col) {
    float v[8];
    if (w.kind == WeightKind::BF16) return *reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(w.w) +
                                                                         row * w.in + col);
    if (w.kind == WeightKind::FP8_BLOCK128) {
        const uint2 codes = __ldg(reinterpret_cast<const uint2*>(w.w + row * w.in + col));
        const float sc = mma::load_scale(w.scale, w.scale_kind, (row / 128) * ((w.in + 127) / 128) + col / 128);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = e4m3_to_f32(((i < 4 ? codes.x : codes.y) >> (8 * (i % 4))) & 0xffu) * sc;
    } else {
        const uint32_t codes = __ldg(reinterpret_cast<const uint32_t*>(w.w + (row * w.in + col) / 2));
        const float sc = mma::load_scale(w.scale, w.scale_kind, row * (w.in / 32) + col / 32);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = e2m1_to_f32((codes >> (4 * i)) & 15u) * sc;
    }
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
        packed[j] = uint32_t(f32_to_bf16_bits(v[2 * j])) | uint32_t(f32_to_bf16_bits(v[2 * j + 1])) << 16;
    return make_uint4(packed[0], packed[1], packed[2], packed[3]);
}

__global__ void dequantize_x8_kernel(generic::WeightView w, uint16_t* out) {
    const int64_t n8 = w.out * w.in / 8, in8 = w.in / 8;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x)
        reinterpret_cast<uint4*>(out)[i] = widen8(w, i / in8, (i % in8) * 8);
}

}  // namespace

void dequantize_weight_bf16(const DeviceLinear& w, uint16_t* out, cudaStream_t stream) {
    FS_REQUIRE(w.weight != nullptr && out != nullptr && w.out > 0 && w.in > 0,
               "dequantize_weight_bf16: null weight or output, or an empty [", w.out, ", ", w.in, "] matrix");
    const int64_t n = w.out * w.in;
    // The 8-wide loads need 8-byte (FP8), 4-byte (FP4) or 16-byte (BF16) aligned rows of a multiple of 8 elements.
    const uintptr_t align = w.kind == WeightKind::FP8_BLOCK128 ? 8 : w.kind == WeightKind::BF16 ? 16 : 4;
    if (w.in % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(w.weight) % align == 0) {
        const unsigned blocks = unsigned(std::min<int64_t>((n / 8 + 255) / 256, 132 * 16));
        dequantize_x8_kernel<<<blocks, 256, 0, stream>>>(generic::view_of(w), out);
    } else {
        const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 16));
        dequantize_kernel<<<blocks, 256, 0, stream>>>(generic::view_of(w), out);
    }
    CUDA_CHECK_LAUNCH("dequantize_weight_bf16");
}

}  // namespace flashseek::cuda
