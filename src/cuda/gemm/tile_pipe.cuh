// The software pipeline around mma_core.cuh shared by the linear and MoE kernels: per warp, weights (and their
// scales) for a batch of U steps are requested one batch ahead (two register buffers), and the activation
// fragments come from a shared-memory copy of the CTA's tokens x (CH steps) that all warps of the CTA reuse.
// This keeps 2*U steps of weight loads in flight per lane at all times, and nothing on the critical path but
// the weight stream itself: no per-step round trip for scales or activations.
#pragma once
#include <cstdint>

#include "cuda/gemm/mma_core.cuh"

namespace flashseek::cuda::mma {

// One weight matrix seen by one warp: the rows g and g+8 of its 16-row tile.
struct MatRows {
    const uint8_t* w_lo = nullptr;
    const uint8_t* w_hi = nullptr;
    const void* scale = nullptr;
    int64_t scale_lo = 0, scale_hi = 0;  // FP8: index of the tile's row-block scale row start; FP4: rows' first scale
};

template <WeightKind WK, int MATS, int U>
struct Batch {
    RawRow<WK> lo[MATS][U], hi[MATS][U];
    float f8[MATS][U];                      // FP8: block scale * 2^8
    uint32_t s4lo[MATS][U], s4hi[MATS][U];  // FP4 fast path: the 4 E8M0 bytes of the step's groups, per row
};

// Steps per batch (register budget ~64 registers of raw weights per buffer) and per shared-memory chunk.
template <WeightKind WK, int MATS>
constexpr int batch_steps() {
    if constexpr (WK == WeightKind::FP8_BLOCK128) return MATS == 1 ? 2 : 1;
    if constexpr (WK == WeightKind::FP4_BLOCK32) return MATS == 1 ? 4 : 2;
    return 1;
}
// ~33 KB of shared memory per CTA whatever the token count: fewer chunks (barriers) when tokens are few.
template <int NT>
constexpr int chunk_steps() { return NT >= 4 ? 4 : (NT == 2 ? 8 : 16); }

struct PipeParams {
    int64_t K;          // row length in elements
    int64_t scale_ld;   // FP4: scales per row
    int scale_kind;
    bool fp4_fast;      // E8M0 FP4 scales, 4-byte aligned per step: prefetch as one u32 per row
};

template <WeightKind WK, int MATS, int U, bool ALIGNED>
__device__ __forceinline__ void load_batch(Batch<WK, MATS, U>& b, const MatRows (&m)[MATS], int s0, int s_end,
                                           const PipeParams& p, int t) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int s = s0 + u;
        if (s >= s_end) break;
        const int64_t k0 = int64_t(s) * 128;
#pragma unroll
        for (int mat = 0; mat < MATS; ++mat) {
            if constexpr (ALIGNED) {
                const int64_t off = int64_t(s) * step_bytes<WK>();
                load_row<WK>(b.lo[mat][u], m[mat].w_lo + off, t);
                load_row<WK>(b.hi[mat][u], m[mat].w_hi + off, t);
            } else {
                load_row_guarded<WK>(b.lo[mat][u], m[mat].w_lo, k0, p.K, t);
                load_row_guarded<WK>(b.hi[mat][u], m[mat].w_hi, k0, p.K, t);
            }
            if constexpr (WK == WeightKind::FP8_BLOCK128) {
                b.f8[mat][u] = load_scale(m[mat].scale, p.scale_kind, m[mat].scale_lo + s) * 256.f;
            } else if constexpr (WK == WeightKind::FP4_BLOCK32) {
                if (p.fp4_fast) {
                    const uint8_t* sb = reinterpret_cast<const uint8_t*>(m[mat].scale);
                    b.s4lo[mat][u] = __ldg(reinterpret_cast<const uint32_t*>(sb + m[mat].scale_lo + 4 * int64_t(s)));
                    b.s4hi[mat][u] = __ldg(reinterpret_cast<const uint32_t*>(sb + m[mat].scale_hi + 4 * int64_t(s)));
                }
            }
        }
    }
}

// FP4 fast path: fold 2^(e_t - e_max) into the lane's values, return 2^(e_max - 127) * 2^14.
__device__ __forceinline__ float fold_fp4_e8m0(uint32_t a[16], uint32_t bytes4, int t) {
    const int e0 = bytes4 & 255, e1 = (bytes4 >> 8) & 255, e2 = (bytes4 >> 16) & 255, e3 = bytes4 >> 24;
    const int emax = max(max(e0, e1), max(e2, e3));
    const int mine = (bytes4 >> (8 * t)) & 255;
    if (mine != emax) {
        const int d = mine - emax;  // < 0
        const __half2 h = __float2half2_rn(d < -30 ? 0.f : exp2i(d));
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            __half2 v = *reinterpret_cast<__half2*>(&a[i]);
            v = __hmul2(v, h);
            a[i] = *reinterpret_cast<uint32_t*>(&v);
        }
    }
    return e8m0_to_f32(uint8_t(emax)) * 16384.f;
}

// The 16 activation registers of one token row for one step from shared memory (same layout as load_x).
template <WeightKind WK>
__device__ __forceinline__ void load_x_shared(uint32_t b[16], const uint16_t* x_step, int t) {
    const uint4* v0;
    uint4 v[4];
    if constexpr (WK == WeightKind::FP8_BLOCK128) {
        v0 = reinterpret_cast<const uint4*>(x_step + 16 * t);
        v[0] = v0[0];
        v[1] = v0[1];
        v0 = reinterpret_cast<const uint4*>(x_step + 64 + 16 * t);
        v[2] = v0[0];
        v[3] = v0[1];
    } else if constexpr (WK == WeightKind::FP4_BLOCK32) {
        v0 = reinterpret_cast<const uint4*>(x_step + 32 * t);
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] = v0[c];
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) v[c] = *reinterpret_cast<const uint4*>(x_step + 32 * c + 8 * t);
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        b[4 * c + 0] = v[c].x;
        b[4 * c + 1] = v[c].y;
        b[4 * c + 2] = v[c].z;
        b[4 * c + 3] = v[c].w;
    }
}

// Multiply-accumulate one batch: for each step, widen + scale the weights of every matrix, then one mma_step per
// token tile against the shared-memory activations (xsm: [NT*8 rows][xld], xss: [NT*8][CH] scales) of the chunk
// starting at step chunk_s0. acc[mat][tile][4] in fp32.
template <WeightKind WK, int MATS, int U, int NT, int CH>
__device__ __forceinline__ void compute_batch(Batch<WK, MATS, U>& b, const MatRows (&m)[MATS], int s0, int s_end,
                                              const PipeParams& p, const uint16_t* xsm, int xld, const float* xss,
                                              int chunk_s0, int n_tiles, float (&acc)[MATS][NT][4], int g, int t) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int s = s0 + u;
        if (s >= s_end) break;
        const int cs = s - chunk_s0;
        uint32_t bx[NT][16];
        float x0[NT], x1[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            if (j < n_tiles) {
                load_x_shared<WK>(bx[j], xsm + (8 * j + g) * xld + cs * 128, t);
                x0[j] = xss[(8 * j + 2 * t) * CH + cs];
                x1[j] = xss[(8 * j + 2 * t + 1) * CH + cs];
            }
        }
#pragma unroll
        for (int mat = 0; mat < MATS; ++mat) {
            uint32_t alo[16], ahi[16];
            widen_row<WK>(b.lo[mat][u], alo);
            widen_row<WK>(b.hi[mat][u], ahi);
            float f_lo = 1.f, f_hi = 1.f;
            if constexpr (WK == WeightKind::FP8_BLOCK128) {
                f_lo = f_hi = b.f8[mat][u];
            } else if constexpr (WK == WeightKind::FP4_BLOCK32) {
                if (p.fp4_fast) {
                    f_lo = fold_fp4_e8m0(alo, b.s4lo[mat][u], t);
                    f_hi = fold_fp4_e8m0(ahi, b.s4hi[mat][u], t);
                } else {
                    const int esz = p.scale_kind == int(ScaleKind::F32) ? 4 : 1;
                    const uint8_t* sb = reinterpret_cast<const uint8_t*>(m[mat].scale);
                    f_lo = fold_fp4_scales(alo, sb + m[mat].scale_lo * esz, p.scale_kind, int64_t(s) * 4, p.scale_ld, t);
                    f_hi = fold_fp4_scales(ahi, sb + m[mat].scale_hi * esz, p.scale_kind, int64_t(s) * 4, p.scale_ld, t);
                }
            }
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                if (j >= n_tiles) break;
                float c[4] = {0.f, 0.f, 0.f, 0.f};
                mma_step<WK>(c, alo, ahi, bx[j]);
                acc[mat][j][0] += c[0] * (f_lo * x0[j]);
                acc[mat][j][1] += c[1] * (f_lo * x1[j]);
                acc[mat][j][2] += c[2] * (f_hi * x0[j]);
                acc[mat][j][3] += c[3] * (f_hi * x1[j]);
            }
        }
    }
}

// Copies the activations of the CTA's token rows for steps [s0, s0 + CH) ∩ [.., s_end) into shared memory.
// row_of(i) gives the prepared-activation row of token slot i (< 0: zeros); col0 the first column of step 0.
template <int NT, int CH, typename RowOf>
__device__ __forceinline__ void stage_x(uint16_t* xsm, int xld, float* xss, const uint16_t* x, int64_t x_ld,
                                        const float* xs, int64_t xs_ld, int64_t col0, int s0, int s_end, RowOf row_of) {
    const int n_steps = min(CH, s_end - s0);
    const int per_row = n_steps * 16;  // uint4 per token row
    for (int i = threadIdx.x; i < NT * 8 * per_row; i += blockDim.x) {
        const int r = i / per_row, q = i % per_row;
        const int64_t src = row_of(r);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (src >= 0) v = __ldg(reinterpret_cast<const uint4*>(x + src * x_ld + col0 + int64_t(s0) * 128) + q);
        *reinterpret_cast<uint4*>(xsm + r * xld + q * 8) = v;
    }
    for (int i = threadIdx.x; i < NT * 8 * n_steps; i += blockDim.x) {
        const int r = i / n_steps, st = i % n_steps;
        const int64_t src = row_of(r);
        xss[r * CH + st] = src >= 0 ? __ldg(xs + src * xs_ld + col0 / 128 + s0 + st) : 0.f;
    }
}

}  // namespace flashseek::cuda::mma
