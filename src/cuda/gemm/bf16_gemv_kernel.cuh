// The bf16_gemv kernel (design and numerics: bf16_gemv.cu) as a template over a tail: work that needs the whole
// output and runs in the CTA that completes it last, in the same launch. The plain variant's tail is NoTail (the
// kernel of the linear catalogue); the router's tail is the routing and grouping of decode (moe/moe_route.cu,
// moe_router_route_and_group), which otherwise waited for the router in a launch of its own on the decode critical
// path. The output is written and summed exactly as without a tail, so the two forms give the same bits.
// Internal to src/cuda (gemm, and moe for the router's tail).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/gemm/linear_catalogue.h"
#include "cuda/gemm/mma_core.cuh"
#include "cuda/gemm/split_sum.cuh"
#include "cuda/gemm/stream_gemv.cuh"

namespace flashseek::cuda::bf16_gemv {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16;        // one mma row tile per CTA
constexpr int kChunkCols = 32;   // a lane quad's 4 x 8 columns of a row
constexpr int kUnroll = 4;       // chunks in flight per warp: 2 rows x 4 x 16 bytes per lane
constexpr int kCtasPerSm = 4;    // __launch_bounds__: <= 128 registers

// The arguments and the grid of a call planned with `splits` K splits (the catalogue's run and the router's fused
// form, moe/moe_route.cu, launch the same GEMV).
inline stream_gemv::Args launch_args(const LinearCall& c, int splits, const LinearOut& out) {
    return stream_gemv::make_args(c.x, c.w, 1, out.y, out.kind, out.ld, c.ws, splits, kChunkCols);
}
inline dim3 launch_grid(const DeviceLinear& w, int splits) { return dim3(unsigned(w.out / kRows), unsigned(splits)); }

// No tail: the linear catalogue's variant.
struct NoTail {
    static constexpr bool kActive = false;
    __device__ __forceinline__ void prefetch() const {}
    __device__ __forceinline__ void run() const {}
};

// A tail: kActive, prefetch() (every thread of CTA (0, 0), before pdl_wait: checkpoint weights only, e.g. an L2
// prefetch of what run() will read) and run() (every thread of the last CTA, once the whole output is visible).
// It needs one counter past the row tiles' split counters in the workspace (counters[gridDim.x]), which it leaves 0.
// NT token groups of 8 (M <= 8 * NT).
template <int NT, class Tail>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) bf16_gemv_kernel(const stream_gemv::Args a, const Tail tail) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, split = blockIdx.y;
    const int64_t row0 = int64_t(tile) * kRows;
    // The split's chunks, then this warp's quarter of them.
    const stream_gemv::StageRange range = stream_gemv::split_stages(a, int(a.K / kChunkCols), split);
    const int per_warp = (range.end - range.begin + kWarps - 1) / kWarps;
    const int begin = min(range.end, range.begin + warp * per_warp), end = min(range.end, begin + per_warp);
    const uint16_t* w_lo = reinterpret_cast<const uint16_t*>(a.w) + (row0 + g) * a.K + 8 * t;
    const uint16_t* w_hi = w_lo + 8 * a.K;
    uint4 wl[kUnroll], wh[kUnroll];
    auto load_weights = [&](int s0) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            if (s0 + u < end) {
                wl[u] = mma::ld_stream(w_lo + int64_t(s0 + u) * kChunkCols);
                wh[u] = mma::ld_stream(w_hi + int64_t(s0 + u) * kChunkCols);
            }
    };
    load_weights(begin);  // checkpoint weights: before the wait (common/pdl.cuh)
    if constexpr (Tail::kActive)
        if (tile == 0 && split == 0) tail.prefetch();
    pdl_wait_after_prefetch();
    pdl_trigger();

    // Token 8n + g's row; a token past M reads token 0's (its results are never stored).
    const uint16_t* x[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) x[n] = a.x + int64_t(8 * n + g < a.M ? 8 * n + g : 0) * a.x_ld + 8 * t;
    float acc[NT][4] = {};
    for (int s0 = begin; s0 < end; s0 += kUnroll) {
        if (s0 != begin) load_weights(s0);
        uint4 xv[kUnroll][NT];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            if (s0 + u < end)
#pragma unroll
                for (int n = 0; n < NT; ++n) xv[u][n] = mma::ld_cached(x[n] + int64_t(s0 + u) * kChunkCols);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            if (s0 + u < end)
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    mma::mma_bf16(acc[n], wl[u].x, wh[u].x, wl[u].y, wh[u].y, xv[u][n].x, xv[u][n].y);
                    mma::mma_bf16(acc[n], wl[u].z, wh[u].z, wl[u].w, wh[u].w, xv[u][n].z, xv[u][n].w);
                }
    }

    // The warps' sums in warp order (value r of group n: row g + 8 (r >> 1), token 8n + 2t + (r & 1)).
    __shared__ float red[kWarps][16][kRows];  // [warp][token][row]
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) red[warp][8 * n + 2 * t + (r & 1)][g + 8 * (r >> 1)] = acc[n][r];
    __syncthreads();
    for (int e = threadIdx.x; e < 16 * kRows; e += kThreads) {
        const int tok = e / kRows, row = e % kRows;
        if (tok >= a.M) continue;
        float v = red[0][tok][row];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) v += red[w][tok][row];
        stream_gemv::store_or_partial(a, row0 + row, tok, split, v);
    }
    __shared__ uint32_t last_flag;
    if (a.splits > 1) {
        // Split-K: the last CTA of this row tile sums the partials in split order.
        if (!stream_gemv::last_split(a, tile, last_flag, threadIdx.x)) return;
        stream_gemv::sum_partials<kRows, kThreads>(a, row0, threadIdx.x);
        if (threadIdx.x == 0) a.counters[tile] = 0;
    }
    if constexpr (Tail::kActive) {
        // The row tile is complete: the last tile to complete runs the tail over the whole output (the election's
        // first barrier also orders every thread's read of last_flag above before its rewrite).
        if (!split_arrives_last(&a.counters[gridDim.x], int(gridDim.x), last_flag, threadIdx.x == 0)) return;
        tail.run();
        if (threadIdx.x == 0) a.counters[gridDim.x] = 0;
    }
}

}  // namespace flashseek::cuda::bf16_gemv
