// Decode GEMV for BF16 weights (the router, the compressors' wkv / wgate, the indexer's weights_proj, the head) at
// 1-16 tokens. Why: these linears ran on tile_gemm, whose CTAs stage the
// activation behind barriers and compute 8-32-token tiles, a cost that grows with the tokens: on the H200 the
// router's 2.1 MB took 5.3 us at one token and 11.0 us at 16 (0.5 us at the copy rate), the compressors' 8.4 MB
// 7.2 / 16.6 us, the head (1.06 GB) 84% / 64% of the copy rate; this kernel takes 4.1 / 4.4 us, 6.2 / 6.8 us and
// 92% / 95% (docs/perf.md, kernel choice).
// Design:
//   - bf16 operands need no widening, so a lane's 16-byte weight loads are mma.sync m16n8k16 A fragments as they
//     arrive. Lane 4g + t loads columns [8t, 8t + 8) of a 32-column chunk of rows g and g + 8; mma j (0, 1) takes the
//     lane's 32-bit words 2j and 2j + 1 as the fragment's k-columns (2t, 2t + 1) and (2t + 8, 2t + 9). The dot
//     product does not depend on the order of k, so the B fragment (token g, the same k-columns) is the same 16 bytes
//     of that token's activation row: no shared memory and no permuted activation layout.
//   - CTA = 4 warps on one 16-row tile, each a quarter of the CTA's K range, summed in shared memory in warp order;
//     grid = (row tiles, K splits), the splits chosen so that a warp's weight loads (4 chunks, 4 KB) are in flight
//     at once on the small matrices (the router: 8 splits x 16 row tiles, one DRAM round trip per warp). The first
//     loads are issued before pdl_wait, since weights are constant during a pass; the activation is read through
//     L1 (ld.global.nc), the weights bypass it (ld.global.nc.L1::no_allocate).
//   - Split-K partials are summed in split order by the last CTA of a row tile (stream_gemv's plan and sum:
//     deterministic). The split depends on the weight's shape and the workspace, never on the token count, so a
//     token's result is the same at every count from 1 to 16.
// Numerics: exact bf16 products summed in fp32 by the tensor core per 16 columns, then in fp32: bf16_gemm's and
// tile_gemm's up to summation order. mma.sync bf16 runs on every target (sm_80 and later).
// Variant bf16_gemv of the linear catalogue (linear_catalogue.h).
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/mma_core.cuh"
#include "cuda/gemm/stream_gemv.cuh"

namespace flashseek::cuda::bf16_gemv {
namespace {

using stream_gemv::Args;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16;        // one mma row tile per CTA
constexpr int kChunkCols = 32;   // a lane quad's 4 x 8 columns of a row
constexpr int kUnroll = 4;       // chunks in flight per warp: 2 rows x 4 x 16 bytes per lane
constexpr int kCtasPerSm = 4;    // __launch_bounds__: <= 128 registers

// NT token groups of 8 (M <= 8 * NT).
template <int NT>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) bf16_gemv_kernel(const Args a) {
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
    if (a.splits == 1) return;
    // Split-K: the last CTA of this row tile sums the partials in split order.
    __shared__ uint32_t last_flag;
    if (!stream_gemv::last_split(a, tile, last_flag, threadIdx.x)) return;
    stream_gemv::sum_partials<kRows, kThreads>(a, row0, threadIdx.x);
    if (threadIdx.x == 0) a.counters[tile] = 0;
}

int64_t cta_slots() { return int64_t(current_arch().sm_count) * kCtasPerSm; }

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (w.kind != WeightKind::BF16 || x.layout != WeightKind::BF16 || x.raw || c.groups != 1) return false;
    if (x.m < 1 || x.m > kGemvMaxTokens) return false;
    return w.out % kRows == 0 && w.in % kChunkCols == 0 && x.k_pad % 8 == 0 && aligned16(w.weight) &&
           aligned16(x.values);
}

// Measured faster than tile_gemm on every BF16 linear of V4-Flash at 1-16 tokens (docs/perf.md, kernel choice).
bool preferred(const LinearCall& c, const KernelPolicy& policy) { return c.x.m <= policy.gemv_max_tokens; }

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    // About two CTAs per CTA slot, >= one load group (kUnroll chunks) per warp and split: a split of 16 chunks (512
    // columns) is one DRAM round trip per warp. Partials sized for 16 tokens whatever M is, so that M never changes
    // the split.
    LinearPlan p;
    p.variant = "bf16_gemv";
    p.tokens_per_pass = int(c.x.m);
    p.k_splits = stream_gemv::plan_splits(c.w.out / kRows, c.w.in / kChunkCols, cta_slots(), 2 * kWarps * kUnroll,
                                          kWarps * kUnroll, kGemvMaxTokens, c.w.out, c.ws);
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out,
         cudaStream_t stream) {
    const int splits = plan.k_splits;
    const Args a = stream_gemv::make_args(c.x, c.w, 1, out.y, out.kind, out.ld, c.ws, splits, kChunkCols);
    const dim3 grid(unsigned(c.w.out / kRows), unsigned(splits));
    auto kernel = c.x.m > 8 ? bf16_gemv_kernel<2> : bf16_gemv_kernel<1>;
    launch_pdl("bf16_gemv_kernel", kernel, grid, dim3(kThreads), 0, stream, a);
}

}  // namespace flashseek::cuda::bf16_gemv
