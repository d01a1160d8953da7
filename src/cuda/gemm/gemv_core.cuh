// Device core of the SIMT GEMV kernels (gemm/gemv_simt.cu, one-token linears):
//   - stage_x: T activation rows of a prepared activation, columns [col0, col0 + len), into shared memory as fp32
//     multiplied by their power-of-two block scale (exact), in the stored (prepared) order. That order is the one
//     in which numeric.cuh's register widening emits weights (e4m3 words -> (b0,b2),(b1,b3); e2m1 words ->
//     (n0,n4),(n1,n5),...), so no permutation is needed. Each lane-chunk (16 FP8 / 32 FP4 columns) gets 4 floats
//     of padding: the float4 reads of 8 consecutive lanes then hit distinct banks.
//   - load_weights + accumulate: R weight rows x T tokens over one staged chunk. A lane reads 16 contiguous bytes
//     of each row per iteration (coalesced across the warp, ld.global.nc.L1::no_allocate, 2 iterations = 2R loads
//     in flight; the caller may load the first iteration ahead of the activation), widens to f16 x 2^-8 (FP8) or
//     x 2^-14 (FP4), converts to fp32 and dots against the staged activations (exact products, fp32 sums); the
//     weight scale (times 2^8 / 2^14) is applied once per 16-column piece, which lies inside one 128-block (FP8)
//     or one 32-group (FP4).
// Numerics therefore equal the mma path's (exact products, fp32 sums, per-block scaling) up to summation order.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/gemm/linear.cuh"
#include "cuda/gemm/mma_core.cuh"

namespace flashseek::cuda::gemv {

constexpr int kUnroll = 2;            // lane iterations whose loads are issued together
constexpr int kSmemBudget = 24576;    // bytes of staged activation per CTA (several CTAs per SM stay resident)

template <WeightKind WK>
constexpr int cols_per_lane() { return WK == WeightKind::FP4_BLOCK32 ? 32 : 16; }
template <WeightKind WK>
constexpr int lane_stride() { return cols_per_lane<WK>() + 4; }  // floats per lane-chunk in shared memory

// Host-side: staged columns per pass (multiple of 128, >= 128, <= cap) and the shared memory they need.
inline int chunk_columns(WeightKind kind, int T, int64_t cap) {
    const int ls = kind == WeightKind::FP4_BLOCK32 ? 36 : 20, cpl = kind == WeightKind::FP4_BLOCK32 ? 32 : 16;
    const int64_t fit = int64_t(kSmemBudget) / (int64_t(T) * 4 * ls) * cpl;
    const int64_t c = fit / 128 * 128 < cap ? fit / 128 * 128 : cap;
    return int(c < 128 ? 128 : c);
}
inline size_t smem_bytes(WeightKind kind, int T, int chunk) {
    const int ls = kind == WeightKind::FP4_BLOCK32 ? 36 : 20, cpl = kind == WeightKind::FP4_BLOCK32 ? 32 : 16;
    return size_t(T) * size_t(chunk / cpl) * size_t(ls) * 4;
}
inline int token_tile(int64_t M) { return M <= 1 ? 1 : (M <= 2 ? 2 : (M <= 4 ? 4 : 8)); }

__device__ __forceinline__ float2 h2f(uint32_t v) { return __half22float2(*reinterpret_cast<const __half2*>(&v)); }

// Dot of 16 weight columns (4 FP8 words or 2 FP4 words) with 16 staged floats.
template <WeightKind WK>
__device__ __forceinline__ float dot16(const uint32_t* words, const float* xv) {
    float p = 0.f;
    if constexpr (WK == WeightKind::FP8_BLOCK128) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint32_t lo, hi;
            e4m3x4_to_f16x2x2_scaled(words[i], lo, hi);
            const float2 a = h2f(lo), b = h2f(hi);
            p = fmaf(a.x, xv[4 * i + 0], p);
            p = fmaf(a.y, xv[4 * i + 1], p);
            p = fmaf(b.x, xv[4 * i + 2], p);
            p = fmaf(b.y, xv[4 * i + 3], p);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            uint32_t h[4];
            e2m1x8_to_f16x2x4_scaled(words[i], h);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 a = h2f(h[j]);
                p = fmaf(a.x, xv[8 * i + 2 * j], p);
                p = fmaf(a.y, xv[8 * i + 2 * j + 1], p);
            }
        }
    }
    return p;
}

// Threads tid = 0 .. nthreads - 1 of a CTA: stage rows row_of(t) (t < T; < 0 = zeros) of the prepared activation x,
// columns [col0, col0 + len) (len a multiple of 8), into xsm with t_stride floats per token. Caller syncs those
// threads before and after. kBatch: 16-byte pieces per thread whose loads are issued before any is stored (one
// memory round trip per kBatch pieces instead of per piece, where a CTA stages many columns at once).
template <WeightKind WK, int T, int kBatch, class RowOf>
__device__ __forceinline__ void stage_x_threads(float* xsm, int t_stride, const uint16_t* __restrict__ x, int64_t x_ld,
                                                const float* __restrict__ xs, int64_t xs_ld, int64_t col0, int len,
                                                RowOf row_of, int tid, int nthreads) {
    constexpr int CPL = cols_per_lane<WK>(), LS = lane_stride<WK>();
    const int per_row = len / 8, total = T * per_row;
    for (int i0 = tid; i0 < total; i0 += nthreads * kBatch) {
        uint4 v[kBatch];
        float s[kBatch];
        int64_t xr[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = i0 + j * nthreads;
            xr[j] = i < total ? row_of(i / per_row) : -1;
            if (xr[j] < 0) continue;
            const int64_t col = col0 + (i % per_row) * 8;
            v[j] = __ldg(reinterpret_cast<const uint4*>(x + xr[j] * x_ld + col));
            s[j] = __ldg(xs + xr[j] * xs_ld + col / 128);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const int i = i0 + j * nthreads;
            if (i >= total) continue;
            const int t = i / per_row, c = (i % per_row) * 8;
            float4* dst = reinterpret_cast<float4*>(xsm + t * t_stride + (c / CPL) * LS + (c % CPL));
            if (xr[j] < 0) {
                dst[0] = make_float4(0.f, 0.f, 0.f, 0.f);
                dst[1] = make_float4(0.f, 0.f, 0.f, 0.f);
                continue;
            }
            const float2 f0 = h2f(v[j].x), f1 = h2f(v[j].y), f2 = h2f(v[j].z), f3 = h2f(v[j].w);
            dst[0] = make_float4(f0.x * s[j], f0.y * s[j], f1.x * s[j], f1.y * s[j]);
            dst[1] = make_float4(f2.x * s[j], f2.y * s[j], f3.x * s[j], f3.y * s[j]);
        }
    }
}
// The whole CTA stages (stage_x_threads over every thread, one piece at a time). Caller syncs before and after.
template <WeightKind WK, int T, class RowOf>
__device__ __forceinline__ void stage_x(float* xsm, int t_stride, const uint16_t* __restrict__ x, int64_t x_ld,
                                        const float* __restrict__ xs, int64_t xs_ld, int64_t col0, int len,
                                        RowOf row_of) {
    stage_x_threads<WK, T, 1>(xsm, t_stride, x, x_ld, xs, xs_ld, col0, len, row_of, int(threadIdx.x),
                              int(blockDim.x));
}

// One lane's share of one accumulate iteration: the 16-byte pieces of R weight rows at kUnroll column positions
// and their block scales (times the widening's 2^8 / 2^14). Loaded apart from the arithmetic so that a kernel can
// issue the first iteration before anything else waits: before it stages the activation (one memory round trip
// fewer per CTA) and, for model weights that no kernel of the stream writes, before pdl_wait (pdl.cuh), when the
// loads overlap the tail of the kernel before.
template <WeightKind WK, int R>
struct WeightRegs {
    uint4 raw[kUnroll][R];
    float sc[kUnroll][R];
};

// Loads the iteration at staged column kk of a chunk that starts at absolute column kw0 and holds len columns.
// wrow[r] points at the row's first byte, sidx[r] at the row's scale-row start (FP8: its 128-row block's, FP4: its
// own). Positions past len are left unloaded (the arithmetic skips them too).
template <WeightKind WK, int R>
__device__ __forceinline__ void load_weights(WeightRegs<WK, R>& w, const uint8_t* const (&wrow)[R],
                                             const int64_t (&sidx)[R], const void* scale, int scale_kind,
                                             int64_t kw0, int kk, int len, int lane) {
    constexpr int CPL = cols_per_lane<WK>(), WARP_COLS = 32 * CPL;
    constexpr float kWiden = WK == WeightKind::FP8_BLOCK128 ? 256.f : 16384.f;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int col = kk + u * WARP_COLS + lane * CPL;
        if (col < len) {
            const int64_t kabs = kw0 + col;
            const int64_t byte = WK == WeightKind::FP4_BLOCK32 ? kabs / 2 : kabs;
#pragma unroll
            for (int r = 0; r < R; ++r) w.raw[u][r] = mma::ld_stream(wrow[r] + byte);
#pragma unroll
            for (int r = 0; r < R; ++r)
                w.sc[u][r] = mma::load_scale(scale, scale_kind,
                                             sidx[r] + (WK == WeightKind::FP8_BLOCK128 ? kabs / 128 : kabs / 32)) *
                             kWiden;
        }
    }
}

// One warp, one iteration: acc[r][t] += W[row r, kw0 + kk + c] * xsm[t][kk + c] over the lane's columns of the
// iteration at staged column kk (w holds them: load_weights).
template <WeightKind WK, int R, int T>
__device__ __forceinline__ void compute_weights(float (&acc)[R][T], const WeightRegs<WK, R>& w, const float* xsm,
                                                int t_stride, int kk, int len, int lane) {
    constexpr int CPL = cols_per_lane<WK>(), LS = lane_stride<WK>(), WARP_COLS = 32 * CPL;
    constexpr int TG = T < 4 ? T : 4;  // tokens whose activations sit in registers at once
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
        const int col = kk + u * WARP_COLS + lane * CPL;
        if (col >= len) continue;
        const float* xlane = xsm + (col / CPL) * LS;
#pragma unroll
        for (int sub = 0; sub < CPL / 16; ++sub) {
#pragma unroll
            for (int tg = 0; tg < T; tg += TG) {
                float xv[TG][16];
#pragma unroll
                for (int tt = 0; tt < TG; ++tt) {
                    const float4* src = reinterpret_cast<const float4*>(xlane + (tg + tt) * t_stride + 16 * sub);
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const float4 f = src[q];
                        xv[tt][4 * q + 0] = f.x;
                        xv[tt][4 * q + 1] = f.y;
                        xv[tt][4 * q + 2] = f.z;
                        xv[tt][4 * q + 3] = f.w;
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const uint32_t all[4] = {w.raw[u][r].x, w.raw[u][r].y, w.raw[u][r].z, w.raw[u][r].w};
                    const uint32_t* words = all + (WK == WeightKind::FP8_BLOCK128 ? 0 : 2 * sub);
#pragma unroll
                    for (int tt = 0; tt < TG; ++tt)
                        acc[r][tg + tt] = fmaf(dot16<WK>(words, xv[tt]), w.sc[u][r], acc[r][tg + tt]);
                }
            }
        }
    }
}

// One warp: acc[r][t] += sum over staged columns [0, len) of W[row r, kw0 + c] * xsm[t][c]. When `preloaded`, w
// already holds the iteration at kk = 0 (load_weights with the same kw0 and len).
template <WeightKind WK, int R, int T>
__device__ __forceinline__ void accumulate(float (&acc)[R][T], WeightRegs<WK, R>& w, bool preloaded,
                                           const uint8_t* const (&wrow)[R], const int64_t (&sidx)[R],
                                           const void* scale, int scale_kind, const float* xsm, int t_stride,
                                           int64_t kw0, int len, int lane) {
    constexpr int ITER_COLS = kUnroll * 32 * cols_per_lane<WK>();
    for (int kk = 0; kk < len; kk += ITER_COLS) {
        if (!preloaded || kk > 0) load_weights<WK, R>(w, wrow, sidx, scale, scale_kind, kw0, kk, len, lane);
        compute_weights<WK, R, T>(acc, w, xsm, t_stride, kk, len, lane);
    }
}

}  // namespace flashseek::cuda::gemv
