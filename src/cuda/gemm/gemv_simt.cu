// Decode GEMV for FP8 (e4m3 + 128x128 block scales) and FP4 (e2m1 + per-32 scales) weights at M = 1 (SIMT).
// Why it is kept next to the tensor-core GEMV (gemv.cu): at one token it streams faster per byte on the H200
// (33.6 MB FP8 matrices: 17.6-19.6 us vs 23-25 us, docs/perf.md), while the tensor-core kernels win from 2 tokens on.
// Design (device core in gemv_core.cuh):
//   - CTA = 4 warps x 4 rows = 16 rows; grid = (row blocks, K splits). Each warp issues the loads of its first
//     iteration (4 rows x 2 x 16 bytes per lane, with their scales) before pdl_wait, since weights are constant
//     during a pass; then the CTA stages its activation slice in shared memory (fp32, scaled) chunk by chunk and
//     every warp streams its 4 rows with 16-byte loads. At K = 1,024 (wq_b) the first iteration is the whole row,
//     so a CTA's weight bytes are in flight before it reads anything an earlier kernel wrote.
//   - Lane partials are reduced with warp shuffles. K is split over CTAs until the grid has ~4 CTAs per SM
//     (wq_a / wkv have 1024 / 512 rows); partials go to the GEMM workspace and the last CTA of a row block sums
//     them in split order (deterministic, one launch), as in linear.cu.
// Only integer ops, f16->f32 conversion, fp32 FMA and 16-byte loads: runs on every target (sm_80 and later).
// Variant simt_gemv of the linear catalogue (linear_catalogue.h).
#include "cuda/gemm/gemv_simt.cuh"
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/gemv.cuh"
#include "cuda/gemm/gemv_core.cuh"
#include "cuda/gemm/split_sum.cuh"

namespace flashseek::cuda::simt_gemv {
namespace {

using namespace flashseek::cuda::gemv;  // the SIMT core (gemv_core.cuh)

struct Args {
    const uint8_t* w;
    const void* scale;
    int scale_kind;
    int64_t N, K;            // rows (all groups), columns per row
    int64_t w_row_bytes;
    int64_t scale_ld;        // FP8: ceil(K/128) per 128-row block; FP4: K/32 per row
    const uint16_t* x;
    const float* xs;
    int64_t x_ld, xs_ld;
    int64_t M;
    int64_t rows_per_group, x_group_cols;
    int64_t k_per_split;     // multiple of 128
    int chunk_cols;          // staged columns per pass (multiple of 128)
    int k_splits;
    void* y;
    int y_f32;
    int64_t ld_y;
    float* partials;
    uint32_t* counters;
};

template <WeightKind WK, int T>
__global__ void __launch_bounds__(kWarps * 32, T <= 2 ? 4 : (T <= 4 ? 3 : 2)) gemv_kernel(const Args a) {
    constexpr int CPL = cols_per_lane<WK>();
    constexpr int LS = lane_stride<WK>();
    extern __shared__ __align__(16) float xsm[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t cta_row0 = int64_t(blockIdx.x) * kRowsPerCta;
    const int64_t row0 = cta_row0 + kRowsPerWarp * warp;
    const int split = blockIdx.y;
    const int64_t k_begin = int64_t(split) * a.k_per_split;
    const int64_t k_end = min(a.K, k_begin + a.k_per_split);
    const bool warp_active = row0 < a.N;
    const int64_t cta_col0 = (cta_row0 / a.rows_per_group) * a.x_group_cols;
    const int t_stride = (a.chunk_cols / CPL) * LS;

    const uint8_t* wrow[kRowsPerWarp];
    int64_t sidx[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int64_t row = min(row0 + r, a.N - 1);
        wrow[r] = a.w + row * a.w_row_bytes;
        sidx[r] = WK == WeightKind::FP8_BLOCK128 ? (row / 128) * a.scale_ld : row * a.scale_ld;
    }
    // The weights are model weights, which no kernel of the stream writes: the first iteration's loads are issued
    // before pdl_wait (common/pdl.cuh), so they overlap the previous kernel's tail and this CTA's activation staging.
    WeightRegs<WK, kRowsPerWarp> w;
    if (warp_active && k_begin < k_end)
        load_weights<WK, kRowsPerWarp>(w, wrow, sidx, a.scale, a.scale_kind, k_begin, 0,
                                       int(min(int64_t(a.chunk_cols), k_end - k_begin)), lane);
    pdl_wait();  // PDL: before the first read of the activation and before any write (common/pdl.cuh contract)
    pdl_trigger();
    float acc[kRowsPerWarp][T];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = 0.f;
    // Tokens >= M read as zero (their rows exist in the prepared padding, but need not be staged).
    auto row_of = [&](int t) -> int64_t { return t < a.M ? int64_t(t) : -1; };
    for (int64_t k0 = k_begin; k0 < k_end; k0 += a.chunk_cols) {
        const int len = int(min(int64_t(a.chunk_cols), k_end - k0));
        __syncthreads();
        stage_x<WK, T>(xsm, t_stride, a.x, a.x_ld, a.xs, a.xs_ld, cta_col0 + k0, len, row_of);
        __syncthreads();
        if (warp_active)
            accumulate<WK, kRowsPerWarp, T>(acc, w, k0 == k_begin, wrow, sidx, a.scale, a.scale_kind, xsm, t_stride,
                                            k0, len, lane);
    }

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int t = 0; t < T; ++t) acc[r][t] = warp_sum(acc[r][t]);

    auto store = [&](int64_t row, int64_t tok, float v) {
        if (row >= a.N || tok >= a.M) return;
        if (a.y_f32)
            reinterpret_cast<float*>(a.y)[tok * a.ld_y + row] = v;
        else
            reinterpret_cast<uint16_t*>(a.y)[tok * a.ld_y + row] = f32_to_bf16_bits(v);
    };
    if (a.k_splits == 1) {
        if (lane == 0 && warp_active)
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
                for (int t = 0; t < T; ++t) store(row0 + r, t, acc[r][t]);
        return;
    }
    // Split-K: partials[split][token][row]; the last CTA of the row block sums them in split order.
    if (lane == 0 && warp_active)
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
            for (int t = 0; t < T; ++t)
                if (row0 + r < a.N && t < a.M) a.partials[(int64_t(split) * a.M + t) * a.N + row0 + r] = acc[r][t];
    __shared__ uint32_t is_last;
    if (!split_arrives_last(&a.counters[blockIdx.x], a.k_splits, is_last, threadIdx.x == 0)) return;
    for (int i = threadIdx.x; i < kRowsPerCta * T; i += blockDim.x) {
        const int64_t row = cta_row0 + (i % kRowsPerCta), tok = i / kRowsPerCta;
        if (row >= a.N || tok >= a.M) continue;
        store(row, tok, sum_splits(&a.partials[tok * a.N + row], int64_t(a.M) * a.N, a.k_splits));
    }
    if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;
}

using Kernel = void (*)(Args);
template <WeightKind WK>
Kernel pick_tokens(int T) {
    if (T == 1) return gemv_kernel<WK, 1>;
    if (T == 2) return gemv_kernel<WK, 2>;
    if (T <= 4) return gemv_kernel<WK, 4>;
    return gemv_kernel<WK, 8>;
}
int64_t row_blocks(const DeviceLinear& w) { return (w.out + kRowsPerCta - 1) / kRowsPerCta; }

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (w.kind != WeightKind::FP8_BLOCK128 && w.kind != WeightKind::FP4_BLOCK32) return false;
    if (x.m != 1 || x.raw) return false;
    if (w.in % 128 != 0 || !aligned16(w.weight) || !aligned16(x.values) || x.k_pad % 8 != 0) return false;
    if (c.groups > 1 && (w.out / c.groups) % kRowsPerCta != 0) return false;
    return true;
}

bool preferred(const LinearCall&, const KernelPolicy& policy) { return policy.gemv_max_tokens >= 1; }

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    // ~4 CTAs (16 warps) per SM keep enough loads in flight; every split keeps >= 4 steps (512 columns) so that
    // a warp streams at least one full iteration per row.
    LinearPlan p;
    p.variant = "simt_gemv";
    p.tokens_per_pass = 1;
    p.k_splits = mma_gemv::split_k(row_blocks(c.w), c.w.in / 128, c.x.m, c.w.out, 4, 4, c.ws);
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out,
         cudaStream_t stream) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    const int groups = c.groups;
    const GemmWorkspace* ws = c.ws;
    void* y = out.y;
    const OutKind y_kind = out.kind;
    const int64_t ld_y = out.ld;
    const int T = token_tile(x.m);
    const int splits = plan.k_splits;
    const int64_t n_steps = w.in / 128;
    Args a{};
    a.w = reinterpret_cast<const uint8_t*>(w.weight);
    a.scale = w.scale;
    a.scale_kind = int(w.scale_kind);
    a.N = w.out;
    a.K = w.in;
    a.w_row_bytes = w.kind == WeightKind::FP8_BLOCK128 ? w.in : w.in / 2;
    a.scale_ld = w.kind == WeightKind::FP8_BLOCK128 ? w.in / 128 : w.in / 32;
    a.x = x.values;
    a.xs = x.scales;
    a.x_ld = x.k_pad;
    a.xs_ld = x.k_pad / 128;
    a.M = x.m;
    a.rows_per_group = groups > 1 ? w.out / groups : w.out;
    a.x_group_cols = groups > 1 ? w.in : 0;
    a.k_per_split = ((n_steps + splits - 1) / splits) * 128;
    a.chunk_cols = chunk_columns(w.kind, T, a.k_per_split);
    a.k_splits = splits;
    a.y = y;
    a.y_f32 = y_kind == OutKind::F32;
    a.ld_y = ld_y;
    a.partials = ws ? ws->partials : nullptr;
    a.counters = ws ? ws->counters : nullptr;
    const Kernel k = w.kind == WeightKind::FP8_BLOCK128 ? pick_tokens<WeightKind::FP8_BLOCK128>(T)
                                                        : pick_tokens<WeightKind::FP4_BLOCK32>(T);
    const size_t smem = smem_bytes(w.kind, T, a.chunk_cols);
    dim3 grid(unsigned(row_blocks(w)), unsigned(splits));
    launch_pdl("gemv_simt_kernel", k, grid, dim3(kWarps * 32), smem, stream, a);
}

}  // namespace flashseek::cuda::simt_gemv
