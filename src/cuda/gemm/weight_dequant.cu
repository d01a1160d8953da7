// dequantize_weight_bf16 (weight_dequant.cuh): a grid-stride loop with the fallback kernels' element accessor
// (generic_values.cuh), so the widening is the one every other path's dequantization agrees with. When a row's
// width is a multiple of 8 (every V4 linear) a thread widens 8 consecutive elements with weight_value's products
// from one load of their codes and one scale, and stores them with one 16-byte store: the element-wise form (byte
// loads, 2-byte stores, a 64-bit division per element) ran at 0.23 TB/s on wo_a in prefill. A thread divides its
// first index once and steps its (row, column) through the grid-stride loop; FP8 codes widen through the hardware's
// e4m3x2 -> f16x2 conversion (exact) and the products round to bf16 in pairs (round to nearest even, the bits of
// f32_to_bf16_bits for every non-NaN value): with a 64-bit division and the bit-twiddled conversions per 8 values
// it took 54 us per 4,096-token pass on wo_a (40 M instructions for 33.5 M values).
#include "cuda/gemm/weight_dequant.cuh"

#include <algorithm>

#include <cuda_fp8.h>

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
        const float sc = mma::load_scale(w.scale, w.scale_kind, (row >> 7) * ((w.in + 127) >> 7) + (col >> 7));
        const uint32_t c4[2] = {codes.x, codes.y};
        uint32_t packed[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {  // codes 2 j, 2 j + 1: e4m3 -> f16 (exact) -> f32, times the scale, to bf16
            const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                __nv_fp8x2_storage_t((c4[j / 2] >> (16 * (j % 2))) & 0xffffu), __NV_E4M3);
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
            const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * sc, f.y * sc);
            packed[j] = *reinterpret_cast<const uint32_t*>(&b);
        }
        return make_uint4(packed[0], packed[1], packed[2], packed[3]);
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
    const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
    if (first >= n8) return;
    // (row, 8-column group) of index i, stepped by the stride: two divisions per thread instead of per item
    int64_t row = first / in8, c8 = first % in8;
    const int64_t row_step = stride / in8, c8_step = stride % in8;
    for (int64_t i = first; i < n8; i += stride) {
        reinterpret_cast<uint4*>(out)[i] = widen8(w, row, c8 * 8);
        row += row_step;
        c8 += c8_step;
        if (c8 >= in8) {
            c8 -= in8;
            ++row;
        }
    }
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
