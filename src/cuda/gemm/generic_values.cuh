// Element accessors for the shape-agnostic fallback kernels: one weight element of a checkpoint-format matrix as
// fp32 (e4m3 x 128x128 block scale, e2m1 x per-32 scale, or bf16) and one activation element read back from a
// prepared activation (stored value x its block scale, undoing the fragment permutation).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/linear.cuh"
#include "cuda/gemm/mma_core.cuh"

namespace flashseek::cuda::generic {

struct WeightView {
    WeightKind kind;
    int scale_kind;
    int64_t out, in;
    const uint8_t* w;
    const void* scale;
};
struct PreparedView {
    WeightKind layout;
    int64_t k_pad;
    const uint16_t* values;
    const float* scales;
};

inline WeightView view_of(const DeviceLinear& d) {
    return {d.kind, int(d.scale_kind), d.out, d.in, static_cast<const uint8_t*>(d.weight), d.scale};
}
inline PreparedView view_of(const PreparedActivation& p) { return {p.layout, p.k_pad, p.values, p.scales}; }

__device__ __forceinline__ float weight_value(const WeightView& w, int64_t n, int64_t k) {
    if (w.kind == WeightKind::BF16) return bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(w.w)[n * w.in + k]);
    if (w.kind == WeightKind::FP8_BLOCK128) {
        const int64_t sld = (w.in + 127) / 128;
        return e4m3_to_f32(w.w[n * w.in + k]) * mma::load_scale(w.scale, w.scale_kind, (n / 128) * sld + k / 128);
    }
    const uint8_t byte = w.w[(n * w.in + k) / 2];
    const uint32_t code = (k & 1) ? (byte >> 4) : (byte & 15);
    return e2m1_to_f32(code) * mma::load_scale(w.scale, w.scale_kind, n * (w.in / 32) + k / 32);
}

__device__ __forceinline__ float prepared_value(const PreparedView& x, int64_t m, int64_t k) {
    const int64_t blk = k / 128;
    const uint16_t raw = x.values[m * x.k_pad + blk * 128 + mma::prepared_pos(x.layout, int(k % 128))];
    const float v = x.layout == WeightKind::BF16 ? bf16_bits_to_f32(raw) : __half2float(__ushort_as_half(raw));
    return v * x.scales[m * (x.k_pad / 128) + blk];
}

}  // namespace flashseek::cuda::generic
