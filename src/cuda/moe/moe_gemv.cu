// Decode GEMV kernels for the routed experts of decode passes (preferred up to KernelPolicy::routed_gemv_max_tokens,
// 128 tokens by default) and the shared expert in dense mode at M <= 16 tokens, on the tensor-core GEMV core of
// gemm/gemv_mma.cuh. Why: the mma.sync expert kernels of moe.cu give the up-projection only inter/128 x experts CTAs
// and compute 8-token tiles for experts that hold 1-3 tokens; the former SIMT GEMV was issue-bound (one fp32 FMA per
// weight and token) and needed a second kernel to quantize h. Here:
//   - up: CTA = 4 warps (KernelPolicy::gemv_kw = 1: one) on the same 16 rows of w1 and w3 of
//     one active expert, each warp a quarter of K (grid = (inter / 16, max experts): ~6 CTAs per SM at M = 1,
//     several waves at M = 16). Every warp stages its K range of the expert's
//     gathered tokens (slot_token) itself and streams both matrices; the CTA sums the four K quarters in a fixed
//     order, then SwiGLU with clamp, the routing weight and the bf16 rounding exactly as moe.cu's fused kernel.
//     h is written in natural bf16 order and a small kernel turns each (row, 128-block) in place into the prepared
//     layout of w2 (act_quant per 128 in release numerics): a 16-row CTA cannot see the 128-column amax.
//   - down: the same with 16 rows of w2 (grid = (hidden / 16, max experts)), prepared h rows by slot, fp32 out;
//     one warp per tile streaming all of K when the grid has enough tiles (routed experts), else four.
// x may also be raw bf16 rows (raw_activation), prepared by each warp while staging (bit-identical).
// Tokens of an expert are processed in passes of group_tokens x NG (2/4 for FP4, 8/16 for FP8); token groups
// beyond the expert's count are skipped at run time. A CTA's later passes re-read its 16-row slice (64 KB for the
// FP4 up-projection) right after the first, from L2: at 32-256 decode sequences (1.4-6 tokens per active expert)
// each active expert's weights come from HBM about once per step, where the grouped GEMM's 128-token tiles would
// expand every FP4 weight for a handful of tokens. Grids are sized for the worst case (min(E, M*top_k) experts)
// so a step can be captured in a CUDA graph; CTAs of inactive expert slots exit at once.
#include "cuda/moe/moe_gemv.cuh"
#include "cuda/moe/moe_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/gemv_mma.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/gemm/swiglu_element.cuh"

namespace flashseek::cuda::gemv_experts {
namespace {

using gmma::ActSrc;
using gmma::MatRows;

constexpr int kRows = 16;
constexpr int kStageBudget = 9216;  // staged activation bytes per warp (4 warps + reduction stay under 48 KB)
// Measured (docs/perf.md, run D, H200): routed FP4 MoE up+down 65.9 us / 28.8% of the copy bandwidth at M = 1
// (6 experts; mma path 86.0), 712 us / 33.7% at M = 16 (76 experts; mma path 822).

struct Args {
    const void* const* w_a;  // w1 (up) or w2 (down)
    const void* const* s_a;
    const void* const* w_b;  // w3 (up only)
    const void* const* s_b;
    int scale_kind;
    int64_t N, K;            // rows per expert, row length (multiples of 128)
    ActSrc src;
    const int32_t* active;   // null: dense mode (expert 0, dense_m tokens, weight 1)
    const int32_t* n_active;
    const int32_t* count;
    const int32_t* offset;
    const int32_t* slot_token;
    const float* slot_weight;
    int64_t dense_m;
    int chunk_steps;         // staging chunk per warp (steps)
    float limit;
    int round_glu;           // up, release numerics: w1/w3 outputs rounded to bf16 before SwiGLU
    uint16_t* h;             // up: bf16 [rows, h_ld], natural order
    int64_t h_ld;
    float* y;                // down: fp32 [rows, N]
};

template <WeightKind WK>
__device__ __forceinline__ MatRows mat_rows(const void* w, const void* s, int64_t row0, int g, int64_t K, int64_t N) {
    const int64_t row_bytes = WK == WeightKind::FP4_BLOCK32 ? K / 2 : K;
    const int64_t lo = min(row0 + g, N - 1), hi = min(row0 + g + 8, N - 1);
    MatRows m;
    m.w_lo = static_cast<const uint8_t*>(w) + lo * row_bytes;
    m.w_hi = static_cast<const uint8_t*>(w) + hi * row_bytes;
    m.scale = s;
    if (WK == WeightKind::FP4_BLOCK32) {
        m.s_lo = lo * (K / 32);
        m.s_hi = hi * (K / 32);
    } else {
        m.s_lo = m.s_hi = (row0 / 128) * (K / 128);
    }
    return m;
}

// Resident CTAs per SM the register cap aims at: 12 single warps, 3 quads (fewer registers spill; the one-token FP4
// up-projection at 128 registers / 4 CTAs per SM measured slower: 853 vs 804 us per step, eager; two-warp tiles at 6
// CTAs per SM no faster end to end, docs/perf-log).
template <WeightKind WK, bool UP, int NG, int KW>
constexpr int min_blocks() {
    return KW == 1 ? 12 : 3;
}

template <WeightKind WK, bool UP, int NG, int KW>
__global__ void __launch_bounds__(KW * 32, min_blocks<WK, UP, NG, KW>()) expert_kernel(const Args a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    constexpr int NM = UP ? 2 : 1;
    constexpr int TP = NG * gmma::group_tokens<WK>();
    extern __shared__ __align__(16) unsigned char smem[];
    int e = 0, count = int(a.dense_m), offset = 0;
    if (a.active) {
        // Both loads in flight together (active[] has E >= gridDim.y entries; a slot past n_active reads a stale
        // entry and leaves): one round trip fewer before the weights stream.
        const int n_active = *a.n_active, expert = a.active[blockIdx.y];
        if (int(blockIdx.y) >= n_active) return;
        e = expert;
        count = a.count[e];
        offset = a.offset[e];
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blockIdx.x) * kRows;
    const int64_t n_steps = a.K / 128, per = (n_steps + KW - 1) / KW;
    const int64_t s_begin = min(n_steps, warp * per), s_end = min(n_steps, s_begin + per);
    MatRows m[NM];
    m[0] = mat_rows<WK>(a.w_a[e], a.s_a[e], row0, g, a.K, a.N);
    if constexpr (UP) m[1] = mat_rows<WK>(a.w_b[e], a.s_b[e], row0, g, a.K, a.N);

    const int region = gmma::staged_bytes(TP, 128 * a.chunk_steps);
    unsigned char* stage = smem;
    __half* xsm = reinterpret_cast<__half*>(stage + warp * region);
    float* xss = reinterpret_cast<float*>(stage + warp * region + TP * gmma::staged_row_halves(128 * a.chunk_steps) * 2);
    float* red = reinterpret_cast<float*>(stage + KW * region);  // [warp][NM][16 rows][TP]

    for (int c0 = 0; c0 < count; c0 += TP) {
        const int ntok = min(TP, count - c0);
        auto row_of = [&](int tk) -> int64_t {
            if (tk >= ntok) return -1;
            const int c = c0 + tk;
            if (!a.active) return c;
            return UP ? int64_t(a.slot_token[offset + c]) : int64_t(offset + c);
        };
        float acc[NM][NG][4];
#pragma unroll
        for (int i = 0; i < NM; ++i)
#pragma unroll
            for (int p = 0; p < NG; ++p) acc[i][p][0] = acc[i][p][1] = acc[i][p][2] = acc[i][p][3] = 0.f;
        gmma::warp_range<WK, NM, NG>(acc, m, a.scale_kind, s_begin, s_end, a.src, 0, ntok, row_of, xsm, xss,
                                     a.chunk_steps, lane);
        gmma::finish_quad<WK, NM, NG>(acc);
        if (gmma::acc_owner<WK>(t)) {
#pragma unroll
            for (int i = 0; i < NM; ++i)
#pragma unroll
                for (int p = 0; p < NG; ++p)
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const int tok = gmma::acc_token<WK>(p, r, t);
                        if (tok < TP) red[((warp * NM + i) * kRows + gmma::acc_row(r, g)) * TP + tok] = acc[i][p][r];
                    }
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < kRows * ntok; idx += blockDim.x) {
            const int r = idx % kRows, tok = idx / kRows;
            if (row0 + r >= a.N) continue;
            float s[NM];
#pragma unroll
            for (int i = 0; i < NM; ++i) {
                s[i] = 0.f;
                for (int w = 0; w < KW; ++w) s[i] += red[((w * NM + i) * kRows + r) * TP + tok];
            }
            const int c = c0 + tok;
            const int64_t out_row = a.active ? int64_t(offset + c) : int64_t(c);
            if constexpr (UP) {
                const float wgt = a.active ? a.slot_weight[offset + c] : 1.f;
                a.h[out_row * a.h_ld + row0 + r] = swiglu_bf16(s[0], s[NM - 1], wgt, a.limit, a.round_glu);
            } else {
                a.y[out_row * a.N + row0 + r] = s[0];
            }
        }
        __syncthreads();
    }
}

// Warp per (row, 128-block) of h: natural-order bf16 -> prepared layout (act_quant per 128 in FP8 numerics),
// in place (a 16-row CTA of the up-projection cannot see the 128-column amax). Rows past the grouped slots
// (routed) or M (dense) are left alone. Preparing h once here costs one small launch; preparing it inside every
// down-projection CTA (raw h) was measured 2.5x slower (docs/perf.md, run B/C).
__global__ void quantize_h_kernel(uint16_t* __restrict__ h, float* __restrict__ hs, int64_t rows, int64_t h_kpad,
                                  int64_t inter, const int32_t* __restrict__ offset_end, WeightKind layout,
                                  int numerics) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    const int lane = threadIdx.x & 31;
    const int64_t n_blk = h_kpad / 128;
    const int64_t idx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= rows * n_blk) return;
    const int64_t r = idx / n_blk, blk = idx % n_blk;
    if (offset_end && r >= *offset_end) return;
    uint16_t* row = h + r * h_kpad + blk * 128;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t col = blk * 128 + 4 * lane + i;
        v[i] = col < inter ? bf16_bits_to_f32(row[4 * lane + i]) : 0.f;
    }
    store_prepared_block(v, lane, layout, numerics, row, hs + r * n_blk + blk);
}

using Kernel = void (*)(Args);
template <WeightKind WK, bool UP, int KW>
Kernel pick_groups(int ng) {
    return ng <= 1 ? expert_kernel<WK, UP, 1, KW> : expert_kernel<WK, UP, 2, KW>;
}
template <WeightKind WK, bool UP>
Kernel pick_kw(int ng, int kw) {
    return kw == 1 ? pick_groups<WK, UP, 1>(ng) : pick_groups<WK, UP, 4>(ng);
}
// Token groups per pass for M tokens: FP4 pairs (1 or 2: an expert with more than 4 tokens takes several passes;
// 4 pairs spill registers), FP8 8-token tiles (1 or 2).
int groups_for(WeightKind kind, int64_t M) {
    if (kind == WeightKind::FP4_BLOCK32) return M <= 2 ? 1 : 2;
    return M <= 8 ? 1 : 2;
}

ActSrc source_of(const PreparedActivation& x) {
    ActSrc s;
    s.x = x.values;
    if (x.raw) {
        s.raw = 1;
        s.ld = x.raw_ld;
        s.numerics = int(x.numerics);
    } else {
        s.xs = x.scales;
        s.ld = x.k_pad;
        s.xs_ld = x.k_pad / 128;
    }
    return s;
}

void launch(bool up, const Args& base, WeightKind kind, const MoeGrouping* g, int64_t M, int top_k,
            const KernelPolicy& policy, cudaStream_t stream) {
    Args a = base;
    // Warps per 16-row tile: the down-projection takes one long-lived warp per tile when that still gives ~8 warps
    // per SM (routed experts, 1536 tiles at one token; measured in the real backend: routed w2 528 vs 625 us at C=1,
    // 5737 vs 6488 us at C=16, eager, 20 layers; C=1 TPOT 4.745 -> 4.675 ms, docs/perf-log); the up-projection and the
    // single shared expert keep four (KW=1 lost there: routed up 1203 vs 848 us at C=1, shared up 1297 vs 485 us,
    // shared w2 244 vs 522 us). KernelPolicy::gemv_kw overrides both; moe_up_kw / moe_down_kw the routed ones.
    const int64_t slots = g ? std::min<int64_t>(g->E, M * top_k) : 1;
    const int64_t tile_warps = (a.N + kRows - 1) / kRows * slots;
    int kw = !up && tile_warps >= 8 * int64_t(current_arch().sm_count) ? 1 : 4;
    if (policy.gemv_kw) kw = policy.gemv_kw;
    const int direction_kw = up ? policy.moe_up_kw : policy.moe_down_kw;
    if (g && direction_kw) kw = direction_kw;
    const int ng = groups_for(kind, M);
    const int tp = ng * (kind == WeightKind::FP4_BLOCK32 ? 2 : 8);
    const int64_t per_warp = (a.K / 128 + kw - 1) / kw * 128;
    a.chunk_steps = gmma::staged_chunk_cols(tp, per_warp, kStageBudget) / 128;
    const int nm = up ? 2 : 1;
    const size_t smem = size_t(kw) * gmma::staged_bytes(tp, 128 * a.chunk_steps) + size_t(kw) * nm * kRows * tp * 4;
    Kernel k;
    if (kind == WeightKind::FP4_BLOCK32)
        k = up ? pick_kw<WeightKind::FP4_BLOCK32, true>(ng, kw) : pick_kw<WeightKind::FP4_BLOCK32, false>(ng, kw);
    else
        k = up ? pick_kw<WeightKind::FP8_BLOCK128, true>(ng, kw) : pick_kw<WeightKind::FP8_BLOCK128, false>(ng, kw);
    const int64_t experts = g ? std::min<int64_t>(g->E, M * top_k) : 1;
    dim3 grid(unsigned((a.N + kRows - 1) / kRows), unsigned(experts));
    allow_dynamic_smem(k, smem);
    launch_pdl(up ? "moe_gemv expert_kernel<up>" : "moe_gemv expert_kernel<down>", k, grid, dim3(kw * 32), smem,
               stream, a);
}

Args base_args(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping* g, int64_t M) {
    Args a{};
    a.scale_kind = int(t.scale_kind);
    a.src = source_of(x);
    set_grouping(a, g);
    a.dense_m = M;
    return a;
}

}  // namespace

bool supports(const ExpertCall& c) {
    const ExpertTable& t = c.t;
    // Routed experts at any M (each expert's token group in passes, its weights re-read from L2 after the first);
    // the dense expert (every token one group) up to the GEMVs' 16 tokens.
    if (c.M < 1 || (c.grouping == nullptr && c.M > kGemvMaxTokens)) return false;
    if (t.hidden % 128 != 0 || t.inter % 128 != 0) return false;
    if (t.kind != WeightKind::FP4_BLOCK32 && t.kind != WeightKind::FP8_BLOCK128) return false;
    if (!aligned16(c.x.values)) return false;
    return c.x.raw ? c.x.raw_ld % 8 == 0 : true;
}

bool preferred(const ExpertCall& c, const KernelPolicy& policy) {
    return c.M <= (c.grouping ? policy.routed_gemv_max_tokens : policy.gemv_max_tokens);
}

void up(const ExpertCall& c, const KernelPolicy& policy, float swiglu_limit, PreparedActivation& h,
        cudaStream_t stream) {
    const ExpertTable& t = c.t;
    Args a = base_args(c.x, t, c.grouping, c.M);
    set_projection(a, t, true);
    a.limit = swiglu_limit;
    a.round_glu = c.h_numerics == ActNumerics::FP8_BLOCK128;
    a.h = h.values;
    a.h_ld = h.k_pad;
    launch(true, a, t.kind, c.grouping, c.M, c.top_k, policy, stream);
    quantize_h(h, t, c.grouping, c.h_numerics, stream);
}

void quantize_h(PreparedActivation& h, const ExpertTable& t, const MoeGrouping* grouping, ActNumerics h_numerics,
                cudaStream_t stream) {
    const int64_t warps = h.m * (h.k_pad / 128);
    launch_pdl("quantize_h_kernel", quantize_h_kernel, dim3(unsigned((warps + 7) / 8)), dim3(256), 0, stream, h.values,
               h.scales, h.m, h.k_pad, t.inter, grouping ? grouping->expert_offset + grouping->E : nullptr, t.kind,
               int(h_numerics));
}

void down(const ExpertCall& c, const KernelPolicy& policy, float* y, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    Args a = base_args(c.x, t, c.grouping, c.M);
    set_projection(a, t, false);
    a.y = y;
    launch(false, a, t.kind, c.grouping, c.M, c.top_k, policy, stream);
}

}  // namespace flashseek::cuda::gemv_experts
