// simt_experts, the one-token variant of the expert catalogue: the routed experts (and the shared expert in dense
// mode) of a pass with a single token, as SIMT GEMVs on the core of gemm/gemv_core.cuh (the simt_gemv linear's).
// Why: at one token gemv_experts' f16 mma.sync GEMV streams the FP4 experts at 1.1-1.8 TB/s on their marginal
// bytes (Nsight Compute, H200: routed up 42 us for 53.6 MB, down 31.5 us for 26.9 MB; shared up 21.8 us for 16.9 MB,
// down 14.6 us for 8.5 MB): an m16n8k16 tile computes 8 token columns of which one is used, and each FP4 step is
// widened to f16 operands before the tensor core sees it. The SIMT core widens each weight once and does one fp32
// FMA per weight, which at one token is all the arithmetic there is (simt_gemv streams FP8 linears at ~2.5 TB/s
// marginal on the same GPU). Measured, it wins on FP8 experts (the shared expert) and on FP4 down-projections, and
// loses on the FP4 up-projection (preferred() below): FP4's widening costs more instructions per byte and
// registers than FP8's, and the mma GEMV's tensor cores absorb it.
// Design:
//   - up: grid = (inter / 8, expert slots); CTA = 4 warps, each on 2 rows of w1 and the same 2 rows of w3 of its
//     slot's expert (4 rows through one accumulate: 4 rows x 2 x 16 bytes of loads in flight per lane). The
//     CTA stages the slot's token (the prepared activation, fp32 x its block scale) once per chunk. Lane sums are
//     reduced by warp shuffles; lane 0 applies the bf16 rounding of the w1 / w3 outputs (release numerics), the
//     SwiGLU with clamp and the routing weight exactly as gemv_experts does and writes natural-order bf16 h;
//     gemv_experts::quantize_h then turns h into w2's prepared layout.
//   - down: grid = (hidden / 16, expert slots); CTA = 4 warps x 4 rows of w2 on the slot's h row; fp32 out by slot.
//   - Slots past the pass's active experts exit at once (grids are sized for top_k slots: CUDA-graph capturable).
//   - Round trips before the weights stream: the active count and the slot's expert are read together, then the
//     expert's pointers; each warp then issues its first weight loads before it reads the slot's token and stages
//     the activation (those two round trips overlap the weights').
//   - w3's scales are addressed relative to w1's (accumulate takes one scale base): the difference of the two
//     per-expert pointers, in scale elements.
// Numerics: exact products of the widened weights and activations, fp32 sums per 16-column piece, per-block
// scaling; equal to gemv_experts' up to summation order.
#include "cuda/moe/moe_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/common/warp_reduce.cuh"
#include "cuda/gemm/gemv_core.cuh"
#include "cuda/gemm/swiglu_element.cuh"
#include "cuda/moe/moe_gemv.cuh"

namespace flashseek::cuda::simt_experts {
namespace {

using namespace flashseek::cuda::gemv;  // the SIMT core (gemv_core.cuh)

constexpr int kWarps = 4;
// Rows per warp: the up-projection's warp holds 2 rows of w1 and the same 2 of w3 (4 rows through accumulate,
// the register budget of 3+ CTAs per SM and twice the CTAs of 4 + 4 rows, which at one token left the shared
// expert's 2,048 rows on one CTA per SM), the down-projection's 4 rows of w2.
template <bool UP>
constexpr int rows_per_warp() { return UP ? 2 : 4; }
template <bool UP>
constexpr int rows_per_cta() { return kWarps * rows_per_warp<UP>(); }

struct Args {
    const void* const* w_a;  // w1 (up) or w2 (down), per expert
    const void* const* s_a;
    const void* const* w_b;  // w3 (up only)
    const void* const* s_b;
    int scale_kind;
    int64_t N, K;            // rows per expert, row length (multiple of 128)
    const uint16_t* x;       // prepared activation (up: the token; down: h rows by slot)
    const float* xs;
    int64_t x_ld, xs_ld;
    const int32_t* active;   // null: dense mode (expert 0, row 0, weight 1)
    const int32_t* n_active;
    const int32_t* count;
    const int32_t* offset;
    const int32_t* slot_token;
    const float* slot_weight;
    int chunk_cols;
    float limit;
    int round_glu;           // up, release numerics: w1 / w3 outputs rounded to bf16 before SwiGLU
    uint16_t* h;             // up: bf16 [slots, h_ld], natural order
    int64_t h_ld;
    float* y;                // down: fp32 [slots, N]
};

template <WeightKind WK, bool UP>
__global__ void __launch_bounds__(kWarps * 32, UP ? 3 : 4) expert_kernel(const Args a) {
    pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
    pdl_trigger();
    constexpr int CPL = cols_per_lane<WK>();
    constexpr int LS = lane_stride<WK>();
    constexpr int kRowsPerWarp = rows_per_warp<UP>();
    constexpr int R = UP ? 2 * kRowsPerWarp : kRowsPerWarp;
    extern __shared__ __align__(16) float xsm[];
    int e = 0, n_slots = 1;
    int64_t first_slot = 0;
    if (a.active) {
        // Both loads in flight together (active[] has E >= gridDim.y entries; a slot past n_active reads a stale
        // entry and leaves).
        const int n_active = *a.n_active, expert = a.active[blockIdx.y];
        if (int(blockIdx.y) >= n_active) return;
        e = expert;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t row0 = int64_t(blockIdx.x) * rows_per_cta<UP>() + kRowsPerWarp * warp;
    const bool warp_active = row0 < a.N;
    const int64_t row_bytes = WK == WeightKind::FP4_BLOCK32 ? a.K / 2 : a.K;
    const int64_t scale_ld = WK == WeightKind::FP4_BLOCK32 ? a.K / 32 : (a.K + 127) / 128;
    const int scale_bytes = a.scale_kind == int(ScaleKind::F32) ? 4 : 1;
    const void* scale = a.s_a[e];
    const uint8_t* wrow[R];
    int64_t sidx[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const bool second = UP && i >= kRowsPerWarp;
        const int64_t row = min(row0 + (i % kRowsPerWarp), a.N - 1);
        wrow[i] = static_cast<const uint8_t*>(second ? a.w_b[e] : a.w_a[e]) + row * row_bytes;
        const int64_t base = second ? (static_cast<const uint8_t*>(a.s_b[e]) - static_cast<const uint8_t*>(scale)) /
                                          scale_bytes
                                    : 0;
        sidx[i] = base + (WK == WeightKind::FP8_BLOCK128 ? (row / 128) * scale_ld : row * scale_ld);
    }
    // The expert's first weights are requested as soon as the expert is known, before the slot's token and its
    // activation (two more round trips) are read.
    WeightRegs<WK, R> w;
    if (warp_active)
        load_weights<WK, R>(w, wrow, sidx, scale, a.scale_kind, 0, 0, int(min(int64_t(a.chunk_cols), a.K)), lane);
    if (a.active) {
        first_slot = a.offset[e];
        n_slots = a.count[e];  // one token: one slot (a routing that picked an expert twice streams it twice)
    }
    const int t_stride = (a.chunk_cols / CPL) * LS;
    for (int64_t slot = first_slot; slot < first_slot + n_slots; ++slot) {
        const int64_t x_row = !a.active ? 0 : (UP ? int64_t(a.slot_token[slot]) : slot);
        const float weight = UP && a.active ? a.slot_weight[slot] : 1.f;
        float acc[R][1];
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i][0] = 0.f;
        auto row_of = [&](int) -> int64_t { return x_row; };
        for (int64_t k0 = 0; k0 < a.K; k0 += a.chunk_cols) {
            const int len = int(min(int64_t(a.chunk_cols), a.K - k0));
            __syncthreads();
            stage_x<WK, 1>(xsm, t_stride, a.x, a.x_ld, a.xs, a.xs_ld, k0, len, row_of);
            __syncthreads();
            if (warp_active)
                accumulate<WK, R, 1>(acc, w, slot == first_slot && k0 == 0, wrow, sidx, scale, a.scale_kind, xsm,
                                     t_stride, k0, len, lane);
        }
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i][0] = warp_sum(acc[i][0]);
        if (lane != 0 || !warp_active) continue;
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const int64_t row = row0 + r;
            if (row >= a.N) break;
            if constexpr (UP) {
                a.h[slot * a.h_ld + row] =
                    swiglu_bf16(acc[r][0], acc[kRowsPerWarp + r][0], weight, a.limit, a.round_glu);
            } else {
                a.y[slot * a.N + row] = acc[r][0];
            }
        }
    }
}

template <bool UP>
void launch(const ExpertCall& c, Args a, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    a.scale_kind = int(t.scale_kind);
    a.x = c.x.values;
    a.xs = c.x.scales;
    a.x_ld = c.x.k_pad;
    a.xs_ld = c.x.k_pad / 128;
    set_grouping(a, c.grouping);
    a.chunk_cols = chunk_columns(t.kind, 1, a.K);
    const size_t smem = smem_bytes(t.kind, 1, a.chunk_cols);
    const int64_t slots = c.grouping ? std::min<int64_t>(c.grouping->E, c.M * c.top_k) : 1;
    const dim3 grid(unsigned((a.N + rows_per_cta<UP>() - 1) / rows_per_cta<UP>()), unsigned(slots));
    auto* k = t.kind == WeightKind::FP4_BLOCK32 ? expert_kernel<WeightKind::FP4_BLOCK32, UP>
                                                : expert_kernel<WeightKind::FP8_BLOCK128, UP>;
    allow_dynamic_smem(k, smem);
    launch_pdl(UP ? "simt_experts expert_kernel<up>" : "simt_experts expert_kernel<down>", k, grid,
               dim3(kWarps * 32), smem, stream, a);
}

}  // namespace

bool supports(const ExpertCall& c) {
    const ExpertTable& t = c.t;
    if (c.M != 1 || c.x.raw || t.hidden % 128 != 0 || t.inter % 128 != 0) return false;
    if (t.kind != WeightKind::FP4_BLOCK32 && t.kind != WeightKind::FP8_BLOCK128) return false;
    return aligned16(c.x.values) && c.x.k_pad % 8 == 0;
}

// Measured at one token (Nsight Compute, H200, V4-Flash shapes, docs/perf-log/2026-12-01_decode-latency.md): the
// FP8 shared expert up 13.3-14.6 vs 21.2-22.7 us and down 9.2-9.3 vs 13.8-14.4 us for gemv_experts, the FP4 routed
// down 26.7-27.6 vs 30.6-31.8 us; the FP4 routed up-projection loses (51-52 vs 42-43.4 us; with 4 + 4 rows per warp
// 60.5 us), and end to end the rule below beats both simt_experts everywhere and nowhere (C=1 TPOT 4.20-4.22 vs
// 4.44-4.47 and 4.34 ms).
bool preferred(const ExpertCall& c, const KernelPolicy& policy) {
    return c.M <= policy.gemv_max_tokens && (c.t.kind == WeightKind::FP8_BLOCK128 || !c.up);
}

void up(const ExpertCall& c, const KernelPolicy&, float swiglu_limit, PreparedActivation& h, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    Args a{};
    set_projection(a, t, true);
    a.limit = swiglu_limit;
    a.round_glu = c.h_numerics == ActNumerics::FP8_BLOCK128;
    a.h = h.values;
    a.h_ld = h.k_pad;
    launch<true>(c, a, stream);
    gemv_experts::quantize_h(h, t, c.grouping, c.h_numerics, stream);
}

void down(const ExpertCall& c, const KernelPolicy&, float* y, cudaStream_t stream) {
    const ExpertTable& t = c.t;
    Args a{};
    set_projection(a, t, false);
    a.y = y;
    launch<false>(c, a, stream);
}

}  // namespace flashseek::cuda::simt_experts
