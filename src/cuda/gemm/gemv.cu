// Decode GEMV for FP8 (e4m3 + 128x128 block scales) and FP4 (e2m1 + per-32 scales) weights, M <= 16 tokens, on
// the tensor-core GEMV core of gemv_mma.cuh. Why: the mma.sync GEMM (linear.cu) computes 8-32-token tiles with
// one real token and stages activations per chunk behind CTA barriers (29-31% of the copy bandwidth on the 33.6 MB
// matrices at M = 1), and the former SIMT GEMV spent one fp32 FMA per weight and token (45% at M = 1, 13% at M = 8).
// Design: CTA = KW warps on the same 16 rows (KW = 4 by default: a quarter of the K range each, summed in shared
// memory in a fixed order; KW = 1: one long-lived warp streams the whole range), each warp with its own activation
// staging (prepared activation, or raw bf16 rows prepared on the fly) and PF steps of weights + scales in flight.
// grid = (row tiles, K splits): K is split over CTAs until the grid is ~12 (KW = 1) / ~4 (KW = 4) CTAs per SM
// (wq_a / wkv have 64 / 32 row tiles); partials go to the GEMM workspace and the last CTA of a row tile sums
// them in split order (deterministic, one launch), as in linear.cu. M = 1 takes simt_gemv (gemv_simt.cu) by preference. Variant mma_gemv of the linear catalogue.
// f16 mma.sync + integer widening only: runs on every target (sm_80 and later).
#include "cuda/gemm/gemv.cuh"
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/gemv_mma.cuh"
#include "cuda/gemm/split_sum.cuh"

namespace flashseek::cuda::mma_gemv {
namespace {

using gmma::ActSrc;
using gmma::MatRows;

constexpr int kStageBudget = 9216;  // staged activation bytes per warp (4 warps + reduction stay under 48 KB)

struct Args {
    const uint8_t* w;
    const void* scale;
    int scale_kind;
    int64_t N, K;            // rows (all groups), columns per row
    int64_t w_row_bytes;
    int64_t scale_ld;        // FP8: K/128 per 128-row block; FP4: K/32 per row
    ActSrc src;
    int64_t M;
    int64_t rows_per_group, x_group_cols;
    int64_t steps_per_split;
    int chunk_steps;         // staging chunk per warp (steps)
    int k_splits;
    void* y;
    int y_f32;
    int64_t ld_y;
    float* partials;
    uint32_t* counters;
};

template <WeightKind WK, int NG, int KW>
__global__ void __launch_bounds__(KW * 32, KW == 1 ? 12 : 3) gemv_kernel(const Args a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    constexpr int TP = NG * gmma::group_tokens<WK>();
    extern __shared__ __align__(16) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blockIdx.x) * kRowsPerCta;
    const int split = blockIdx.y;
    const int64_t n_steps = a.K / 128;
    const int64_t cs_begin = min(n_steps, int64_t(split) * a.steps_per_split);
    const int64_t cs_end = min(n_steps, cs_begin + a.steps_per_split);
    const int64_t per = (cs_end - cs_begin + KW - 1) / KW;
    const int64_t s_begin = min(cs_end, cs_begin + warp * per), s_end = min(cs_end, s_begin + per);
    MatRows m[1];
    {
        const int64_t lo = min(row0 + g, a.N - 1), hi = min(row0 + g + 8, a.N - 1);
        m[0].w_lo = a.w + lo * a.w_row_bytes;
        m[0].w_hi = a.w + hi * a.w_row_bytes;
        m[0].scale = a.scale;
        if (WK == WeightKind::FP8_BLOCK128) {
            m[0].s_lo = m[0].s_hi = (row0 / 128) * a.scale_ld;
        } else {
            m[0].s_lo = lo * a.scale_ld;
            m[0].s_hi = hi * a.scale_ld;
        }
    }
    // Grouped linear: the CTA's 16 rows lie in one group, whose input slice starts at group * x_group_cols.
    const int64_t x_col0 = (row0 / a.rows_per_group) * a.x_group_cols;
    const int region = gmma::staged_bytes(TP, 128 * a.chunk_steps);
    unsigned char* stage = smem;
    __half* xsm = reinterpret_cast<__half*>(stage + warp * region);
    float* xss = reinterpret_cast<float*>(stage + warp * region + TP * gmma::staged_row_halves(128 * a.chunk_steps) * 2);
    float* red = reinterpret_cast<float*>(stage + KW * region);  // [warp][16 rows][TP]

    auto store = [&](int64_t row, int64_t tok, float v) {
        if (a.y_f32)
            reinterpret_cast<float*>(a.y)[tok * a.ld_y + row] = v;
        else
            reinterpret_cast<uint16_t*>(a.y)[tok * a.ld_y + row] = f32_to_bf16_bits(v);
    };
    for (int64_t c0 = 0; c0 < a.M; c0 += TP) {
        const int ntok = int(min(int64_t(TP), a.M - c0));
        auto row_of = [&](int tk) -> int64_t { return tk < ntok ? c0 + tk : -1; };
        float acc[1][NG][4];
#pragma unroll
        for (int p = 0; p < NG; ++p) acc[0][p][0] = acc[0][p][1] = acc[0][p][2] = acc[0][p][3] = 0.f;
        gmma::warp_range<WK, 1, NG>(acc, m, a.scale_kind, s_begin, s_end, a.src, x_col0, ntok, row_of, xsm, xss,
                                    a.chunk_steps, lane);
        gmma::finish_quad<WK, 1, NG>(acc);
        if (gmma::acc_owner<WK>(t)) {
#pragma unroll
            for (int p = 0; p < NG; ++p)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int tok = gmma::acc_token<WK>(p, r, t);
                    if (tok < TP) red[(warp * kRowsPerCta + gmma::acc_row(r, g)) * TP + tok] = acc[0][p][r];
                }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < kRowsPerCta * ntok; idx += blockDim.x) {
            const int r = idx % kRowsPerCta, tok = idx / kRowsPerCta;
            if (row0 + r >= a.N) continue;
            float v = 0.f;
            for (int w = 0; w < KW; ++w) v += red[(w * kRowsPerCta + r) * TP + tok];
            if (a.k_splits == 1)
                store(row0 + r, c0 + tok, v);
            else
                a.partials[(int64_t(split) * a.M + c0 + tok) * a.N + row0 + r] = v;
        }
        __syncthreads();
    }
    if (a.k_splits == 1) return;
    // Split-K: the last CTA of the row tile sums the partials in split order.
    __shared__ uint32_t is_last;
    if (!split_arrives_last(&a.counters[blockIdx.x], a.k_splits, is_last, threadIdx.x == 0)) return;
    for (int64_t i = threadIdx.x; i < kRowsPerCta * a.M; i += blockDim.x) {
        const int64_t row = row0 + (i % kRowsPerCta), tok = i / kRowsPerCta;
        if (row >= a.N) continue;
        store(row, tok, sum_splits(&a.partials[tok * a.N + row], int64_t(a.M) * a.N, a.k_splits));
    }
    if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;
}

using Kernel = void (*)(Args);
// Token groups per pass: FP8 8-token tiles (1 or 2), FP4 pairs (1 or 2; more tokens take several passes).
int groups_for(WeightKind kind, int64_t M) {
    if (kind == WeightKind::FP4_BLOCK32) return M <= 2 ? 1 : 2;
    return M <= 8 ? 1 : 2;
}
template <int KW>
Kernel pick_kw(WeightKind kind, int ng) {
    if (kind == WeightKind::FP4_BLOCK32)
        return ng <= 1 ? gemv_kernel<WeightKind::FP4_BLOCK32, 1, KW> : gemv_kernel<WeightKind::FP4_BLOCK32, 2, KW>;
    return ng <= 1 ? gemv_kernel<WeightKind::FP8_BLOCK128, 1, KW> : gemv_kernel<WeightKind::FP8_BLOCK128, 2, KW>;
}
Kernel pick(WeightKind kind, int ng, int kw) { return kw == 1 ? pick_kw<1>(kind, ng) : pick_kw<4>(kind, ng); }
int64_t row_blocks(const DeviceLinear& w) { return (w.out + kRowsPerCta - 1) / kRowsPerCta; }

}  // namespace

bool serves(int64_t M, const DeviceLinear& w, int groups) {
    if (w.kind != WeightKind::FP8_BLOCK128 && w.kind != WeightKind::FP4_BLOCK32) return false;
    if (M < 1 || M > kGemvMaxTokens) return false;
    if (w.in % 128 != 0 || !aligned16(w.weight)) return false;
    if (groups > 1 && (w.out / groups) % kRowsPerCta != 0) return false;
    return true;
}

int split_k(int64_t row_blocks, int64_t n_steps, int64_t m, int64_t out, int64_t ctas_per_sm, int64_t min_steps,
            const GemmWorkspace* ws) {
    if (!ws || !ws->partials || !ws->counters || row_blocks > ws->n_counters) return 1;
    const int64_t target = ctas_per_sm * int64_t(current_arch().sm_count);
    int64_t splits =
        std::min<int64_t>((target + row_blocks - 1) / row_blocks, std::max<int64_t>(1, n_steps / min_steps));
    const size_t per_split = size_t(m) * size_t(out) * 4;
    splits = std::min<int64_t>(splits, int64_t(ws->partial_bytes / per_split));
    splits = std::max<int64_t>(splits, 1);
    const int64_t per = (n_steps + splits - 1) / splits;
    return int((n_steps + per - 1) / per);
}

bool supports(const LinearCall& c) {
    if (!serves(c.x.m, c.w, c.groups) || !aligned16(c.x.values)) return false;
    return c.x.raw ? c.x.raw_ld % 8 == 0 : c.x.k_pad % 8 == 0;
}

bool preferred(const LinearCall& c, const KernelPolicy& policy) { return c.x.m <= policy.gemv_max_tokens; }

LinearPlan plan(const LinearCall& c, const KernelPolicy& policy) {
    // ~12 (one-warp CTAs) or ~4 (four-warp CTAs) CTAs per SM keep enough loads in flight; every split keeps >= 4
    // steps (one per warp, four-warp CTAs) or >= 8 steps (one-warp CTAs: one warp streams the split).
    const bool one_warp = gmma::warps_per_tile(policy) == 1;
    LinearPlan p;
    p.variant = "mma_gemv";
    p.tokens_per_pass = int(c.x.m);
    p.k_splits = split_k(row_blocks(c.w), c.w.in / 128, c.x.m, c.w.out, one_warp ? 12 : 4, one_warp ? 8 : 4, c.ws);
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy& policy, const LinearOut& out,
         cudaStream_t stream) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    const int groups = c.groups;
    const GemmWorkspace* ws = c.ws;
    void* y = out.y;
    const OutKind y_kind = out.kind;
    const int64_t ld_y = out.ld;
    const int splits = plan.k_splits;
    const int64_t n_steps = w.in / 128;
    const int ng = groups_for(w.kind, x.m);
    const int tp = ng * (w.kind == WeightKind::FP4_BLOCK32 ? 2 : 8);
    Args a{};
    a.w = reinterpret_cast<const uint8_t*>(w.weight);
    a.scale = w.scale;
    a.scale_kind = int(w.scale_kind);
    a.N = w.out;
    a.K = w.in;
    a.w_row_bytes = w.kind == WeightKind::FP8_BLOCK128 ? w.in : w.in / 2;
    a.scale_ld = w.kind == WeightKind::FP8_BLOCK128 ? w.in / 128 : w.in / 32;
    a.src.x = x.values;
    if (x.raw) {
        a.src.raw = 1;
        a.src.ld = x.raw_ld;
        a.src.numerics = int(x.numerics);
    } else {
        a.src.xs = x.scales;
        a.src.ld = x.k_pad;
        a.src.xs_ld = x.k_pad / 128;
    }
    a.M = x.m;
    a.rows_per_group = groups > 1 ? w.out / groups : w.out;
    a.x_group_cols = groups > 1 ? w.in : 0;
    a.steps_per_split = (n_steps + splits - 1) / splits;
    const int kw = gmma::warps_per_tile(policy);
    const int64_t per_warp = (a.steps_per_split + kw - 1) / kw * 128;
    a.chunk_steps = gmma::staged_chunk_cols(tp, per_warp, kStageBudget) / 128;
    a.k_splits = splits;
    a.y = y;
    a.y_f32 = y_kind == OutKind::F32;
    a.ld_y = ld_y;
    a.partials = ws ? ws->partials : nullptr;
    a.counters = ws ? ws->counters : nullptr;
    const size_t smem = size_t(kw) * gmma::staged_bytes(tp, 128 * a.chunk_steps) + size_t(kw) * kRowsPerCta * tp * 4;
    dim3 grid(unsigned(row_blocks(w)), unsigned(splits));
    const Kernel k = pick(w.kind, ng, kw);
    allow_dynamic_smem(k, smem);
    launch_pdl("gemv_kernel", k, grid, dim3(kw * 32), smem, stream, a);
}

}  // namespace flashseek::cuda::mma_gemv
