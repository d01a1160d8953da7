// Device core shared by the linear and MoE kernels: one warp multiplies a 16-row weight tile by up to 8 tokens
// per mma.sync, 128 K-columns ("one step") at a time, with the weights read straight from their checkpoint
// format. Layout of one step, lane = 4*g + t (g = groupID 0..7, t = 0..3), rows g and g+8 of the tile:
//   FP8  : lane reads bytes [16t, 16t+16) and [64+16t, 64+16t+16) of the step (two 16 B loads; a quad covers 64
//          contiguous bytes per load), widens e4m3 -> f16 * 2^-8 pairwise as (b0,b2),(b1,b3) per 4-byte word;
//   FP4  : lane reads bytes [16t, 16t+16) (32 nibbles = one scale group), widens e2m1 -> f16 * 2^-14 as nibble
//          pairs (n0,n4),(n1,n5),(n2,n6),(n3,n7) per word; the group's E8M0 scale relative to the row's largest
//          group in the step is folded into the f16 values (exact unless 2^-9 apart), the rest applied in fp32;
//   BF16 : lane reads elements [32c + 8t, +8) for c = 0..3, no conversion (bf16 mma).
// Either way the lane ends with 16 registers (32 values) per row, and mma j (0..7) takes registers 2j, 2j+1 as
// the A fragment's k-columns (2t..2t+1) and (2t+8..2t+9). Because the dot product does not depend on the order
// of k, the activations are stored pre-permuted (prepare_activation) so that the lane's 16 activation registers
// line up with the weights' one to one: that is the whole trick, and it lets weights stream at full width with
// no shared memory. Products accumulate in fp32 per step and are scaled per step (weight block scale x
// activation block scale), matching the official fp8_gemm's per-128-K promotion.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/linear.cuh"

namespace flashseek::cuda::mma {

constexpr int kStepK = 128;

__device__ __forceinline__ void mma_f16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two e4m3 bytes of a 4-byte weight word as an f16x2 A register: bytes (0, 2) with sel = 0x20, (1, 3) with 0x31
// (the prepared activation's FP8 order pairs columns 4j, 4j + 2 and 4j + 1, 4j + 3), converted exactly by the
// hardware's e4m3x2 -> f16x2 (wgmma_f16_gemv.cu, ring_gemv.cu).
__device__ __forceinline__ uint32_t widen_pair(uint32_t w, uint32_t sel) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(__byte_perm(w, 0u, sel)), __NV_E4M3);
    return uint32_t(h.x) | uint32_t(h.y) << 16;
}

// Streaming 16-byte load: weights are read once, keep them out of L1.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 ld_cached(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// Stored position of physical column p (0..127) inside its 128-column block of a prepared activation: FP8 layout
// swaps the middle pair of every 4 columns, FP4 layout interleaves every 8 as 0,4,1,5,2,6,3,7, BF16 is natural.
__device__ __forceinline__ int prepared_pos(WeightKind layout, int p) {
    if (layout == WeightKind::FP8_BLOCK128) {
        const int r = p & 3;
        return (p & ~3) | (r == 1 ? 2 : (r == 2 ? 1 : r));
    }
    if (layout == WeightKind::FP4_BLOCK32) return (p & ~7) | (2 * (p & 3) + ((p >> 2) & 1));
    return p;
}

// Raw weight registers of one row for one step.
template <WeightKind WK>
struct RawRow;
template <>
struct RawRow<WeightKind::FP8_BLOCK128> { uint4 v[2]; };
template <>
struct RawRow<WeightKind::FP4_BLOCK32> { uint4 v[1]; };
template <>
struct RawRow<WeightKind::BF16> { uint4 v[4]; };

// Bytes of one weight row per 128-column step.
template <WeightKind WK>
constexpr int step_bytes() { return WK == WeightKind::FP4_BLOCK32 ? 64 : (WK == WeightKind::FP8_BLOCK128 ? 128 : 256); }

// Aligned load of a row's step (row_ptr points at the step's first byte).
template <WeightKind WK>
__device__ __forceinline__ void load_row(RawRow<WK>& r, const uint8_t* step_ptr, int t) {
    if constexpr (WK == WeightKind::FP8_BLOCK128) {
        r.v[0] = ld_stream(step_ptr + 16 * t);
        r.v[1] = ld_stream(step_ptr + 64 + 16 * t);
    } else if constexpr (WK == WeightKind::FP4_BLOCK32) {
        r.v[0] = ld_stream(step_ptr + 16 * t);
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) r.v[c] = ld_stream(step_ptr + 64 * c + 16 * t);
    }
}

// Guarded byte-wise load for shapes that are not 128-aligned: `row_ptr` is the row start, `k0` the step's first
// column, `K` the row length in elements. Missing elements read as zero.
template <WeightKind WK>
__device__ __forceinline__ void load_row_guarded(RawRow<WK>& r, const uint8_t* row_ptr, int64_t k0, int64_t K, int t) {
    uint8_t* bytes = reinterpret_cast<uint8_t*>(r.v);
    if constexpr (WK == WeightKind::FP8_BLOCK128) {
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int b = 0; b < 16; ++b) {
                const int64_t k = k0 + 64 * c + 16 * t + b;
                bytes[16 * c + b] = k < K ? row_ptr[k] : uint8_t(0);
            }
    } else if constexpr (WK == WeightKind::FP4_BLOCK32) {
#pragma unroll
        for (int b = 0; b < 16; ++b) {
            const int64_t k = k0 + 32 * t + 2 * b;  // element index of the low nibble (K is even)
            bytes[b] = k < K ? row_ptr[k / 2] : uint8_t(0);
        }
    } else {
        const uint16_t* row16 = reinterpret_cast<const uint16_t*>(row_ptr);
        uint16_t* h = reinterpret_cast<uint16_t*>(r.v);
#pragma unroll
        for (int c = 0; c < 4; ++c)
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int64_t k = k0 + 32 * c + 8 * t + i;
                h[8 * c + i] = k < K ? row16[k] : uint16_t(0);
            }
    }
}

// Widen a row's raw registers to 16 f16x2/bf16x2 registers in mma order.
template <WeightKind WK>
__device__ __forceinline__ void widen_row(const RawRow<WK>& r, uint32_t a[16]) {
    if constexpr (WK == WeightKind::FP8_BLOCK128) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const uint32_t w[4] = {r.v[c].x, r.v[c].y, r.v[c].z, r.v[c].w};
#pragma unroll
            for (int i = 0; i < 4; ++i) e4m3x4_to_f16x2x2_scaled(w[i], a[8 * c + 2 * i], a[8 * c + 2 * i + 1]);
        }
    } else if constexpr (WK == WeightKind::FP4_BLOCK32) {
        const uint32_t w[4] = {r.v[0].x, r.v[0].y, r.v[0].z, r.v[0].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) e2m1x8_to_f16x2x4_scaled(w[i], &a[4 * i]);
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            a[4 * c + 0] = r.v[c].x;
            a[4 * c + 1] = r.v[c].y;
            a[4 * c + 2] = r.v[c].z;
            a[4 * c + 3] = r.v[c].w;
        }
    }
}

// The 16 activation registers of one token row for one step (x_step points at the step's first stored value).
template <WeightKind WK>
__device__ __forceinline__ void load_x(uint32_t b[16], const uint16_t* x_step, int t) {
    uint4 v[4];
    if constexpr (WK == WeightKind::FP8_BLOCK128) {
        v[0] = ld_cached(x_step + 16 * t);
        v[1] = ld_cached(x_step + 16 * t + 8);
        v[2] = ld_cached(x_step + 64 + 16 * t);
        v[3] = ld_cached(x_step + 64 + 16 * t + 8);
    } else if constexpr (WK == WeightKind::FP4_BLOCK32) {
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] = ld_cached(x_step + 32 * t + 8 * c);
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] = ld_cached(x_step + 32 * c + 8 * t);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        b[4 * c + 0] = v[c].x;
        b[4 * c + 1] = v[c].y;
        b[4 * c + 2] = v[c].z;
        b[4 * c + 3] = v[c].w;
    }
}

// c[4] += A(16 rows: a_lo = row g, a_hi = row g+8) x B(token column) over one step: 8 mmas.
template <WeightKind WK>
__device__ __forceinline__ void mma_step(float c[4], const uint32_t a_lo[16], const uint32_t a_hi[16],
                                         const uint32_t b[16]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if constexpr (WK == WeightKind::BF16)
            mma_bf16(c, a_lo[2 * j], a_hi[2 * j], a_lo[2 * j + 1], a_hi[2 * j + 1], b[2 * j], b[2 * j + 1]);
        else
            mma_f16(c, a_lo[2 * j], a_hi[2 * j], a_lo[2 * j + 1], a_hi[2 * j + 1], b[2 * j], b[2 * j + 1]);
    }
}

// Scale of a weight element group as fp32 (E8M0 byte or f32), from a scale tensor of the given kind.
__device__ __forceinline__ float load_scale(const void* scale, int kind, int64_t idx) {
    if (kind == int(ScaleKind::F32)) return __ldg(reinterpret_cast<const float*>(scale) + idx);
    return e8m0_to_f32(__ldg(reinterpret_cast<const uint8_t*>(scale) + idx));
}

// FP4: fold this lane's group scale into its 16 f16x2 registers relative to the row's largest group scale in the
// step; returns the row factor (largest scale * 2^14) that the fp32 result must be multiplied by.
// `scale_row` points at the row's scales, `g0` is the step's first group, n_groups the row's group count.
__device__ __forceinline__ float fold_fp4_scales(uint32_t a[16], const void* scale_row, int kind, int64_t g0,
                                                 int64_t n_groups, int t) {
    float mine = 0.f, ref = 0.f;
    if (kind == int(ScaleKind::F32)) {
        const float* s = reinterpret_cast<const float*>(scale_row);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float v = g0 + i < n_groups ? __ldg(s + g0 + i) : 0.f;
            ref = fmaxf(ref, fabsf(v));
            if (i == t) mine = v;
        }
    } else {
        const uint8_t* s = reinterpret_cast<const uint8_t*>(scale_row);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float v = g0 + i < n_groups ? e8m0_to_f32(__ldg(s + g0 + i)) : 0.f;
            ref = fmaxf(ref, v);
            if (i == t) mine = v;
        }
    }
    if (ref == 0.f) return 0.f;
    const float ratio = mine / ref;  // power of two for E8M0, in [0, 1]
    if (ratio != 1.f) {
        const __half2 h = __float2half2_rn(ratio);
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            __half2 v = *reinterpret_cast<__half2*>(&a[i]);
            v = __hmul2(v, h);
            a[i] = *reinterpret_cast<uint32_t*>(&v);
        }
    }
    return ref * 16384.f;
}

}  // namespace flashseek::cuda::mma
