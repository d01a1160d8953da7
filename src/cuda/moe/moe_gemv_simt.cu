// SIMT decode GEMV kernels for the experts at M = 1 (the previous small-M expert path, kept as a measured
// alternative to the tensor-core kernels of moe_gemv.cu: on the H200 it ran the routed FP4 MoE of one token at 29%
// of the copy bandwidth, docs/perf.md). Selected with FLASHSEEK_MOE_SIMT=1 (see moe_gemv_simt::enabled).
//   - up: CTA = 4 warps x 4 rows = 16 rows of w1 and the same 16 rows of w3 of one active expert (grid =
//     (inter / 16, max experts)); the expert's gathered token is staged once per chunk (fp32, scaled) and both
//     matrices streamed with the core of gemm/gemv_core.cuh. SwiGLU with clamp, the routing weight and the bf16
//     rounding follow moe.cu's fused kernel exactly; the bf16 result goes to h in natural order, and a second small
//     kernel turns each (row, 128-block) of h in place into the prepared layout of w2 (act_quant per 128).
//   - down: CTA = 16 rows of w2 of one expert (grid = (hidden / 16, max experts)), rows of h by slot, fp32 out.
// Grids are sized for the worst case (min(E, M*top_k) experts) so a step can be captured in a CUDA graph.
#include "cuda/moe/moe_gemv_simt.cuh"

#include <cstdlib>

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/gemm/gemv_core.cuh"

namespace flashseek::cuda::moe_gemv_simt {
namespace {

using namespace flashseek::cuda::gemv;

constexpr int kWarps = 4, kRows = 4, kCtaRows = kWarps * kRows;

struct Args {
    const void* const* w_a;  // w1 (up) or w2 (down)
    const void* const* s_a;
    const void* const* w_b;  // w3 (up only)
    const void* const* s_b;
    int scale_kind;
    int64_t N, K;            // rows per expert, row length (multiples of 128)
    const uint16_t* x;
    const float* xs;
    int64_t x_ld, xs_ld;
    const int32_t* active;   // null: dense mode (expert 0, dense_m tokens, weight 1)
    const int32_t* n_active;
    const int32_t* count;
    const int32_t* offset;
    const int32_t* slot_token;
    const float* slot_weight;
    int64_t dense_m;
    int chunk_cols;
    float limit;
    int round_glu;           // up, release numerics: w1/w3 outputs rounded to bf16 before SwiGLU (GEMM outputs are bf16)
    uint16_t* h;             // up: bf16 [rows, h_ld], natural order (quantized in place afterwards)
    int64_t h_ld;
    float* y;                // down: fp32 [rows, N]
};

template <WeightKind WK>
__device__ __forceinline__ void row_pointers(const void* w, int64_t row0, int64_t K, int64_t N,
                                             const uint8_t* (&wrow)[kRows], int64_t (&sidx)[kRows]) {
    const int64_t row_bytes = WK == WeightKind::FP4_BLOCK32 ? K / 2 : K;
    const int64_t scale_ld = WK == WeightKind::FP4_BLOCK32 ? K / 32 : K / 128;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        const int64_t row = min(row0 + r, N - 1);
        wrow[r] = reinterpret_cast<const uint8_t*>(w) + row * row_bytes;
        sidx[r] = WK == WeightKind::FP8_BLOCK128 ? (row / 128) * scale_ld : row * scale_ld;
    }
}

template <WeightKind WK, int T, bool UP>
__global__ void __launch_bounds__(kWarps * 32, T <= 2 ? 4 : 2) expert_gemv_kernel(const Args a) {
    constexpr int CPL = cols_per_lane<WK>(), LS = lane_stride<WK>();
    extern __shared__ __align__(16) float xsm[];
    int e = 0, count = int(a.dense_m), offset = 0;
    if (a.active) {
        if (int(blockIdx.y) >= *a.n_active) return;
        e = a.active[blockIdx.y];
        count = a.count[e];
        offset = a.offset[e];
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int64_t row0 = int64_t(blockIdx.x) * kCtaRows + kRows * warp;
    const int t_stride = (a.chunk_cols / CPL) * LS;
    const uint8_t* wa[kRows];
    const uint8_t* wb[kRows];
    int64_t sa[kRows], sb[kRows];
    row_pointers<WK>(a.w_a[e], row0, a.K, a.N, wa, sa);
    if constexpr (UP) row_pointers<WK>(a.w_b[e], row0, a.K, a.N, wb, sb);
    const void* scale_a = a.s_a[e];
    const void* scale_b = UP ? a.s_b[e] : nullptr;

    for (int c0 = 0; c0 < count; c0 += T) {
        // Activation row of token slot t of this chunk: the token (up, gathered) or the slot (down); -1 = none.
        auto row_of = [&](int t) -> int64_t {
            const int c = c0 + t;
            if (c >= count) return -1;
            if (!a.active) return c;
            return UP ? int64_t(a.slot_token[offset + c]) : int64_t(offset + c);
        };
        float acc_a[kRows][T], acc_b[kRows][T];
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int t = 0; t < T; ++t) acc_a[r][t] = acc_b[r][t] = 0.f;
        for (int64_t k0 = 0; k0 < a.K; k0 += a.chunk_cols) {
            const int len = int(min(int64_t(a.chunk_cols), a.K - k0));
            __syncthreads();
            stage_x<WK, T>(xsm, t_stride, a.x, a.x_ld, a.xs, a.xs_ld, k0, len, row_of);
            __syncthreads();
            accumulate<WK, kRows, T>(acc_a, wa, sa, scale_a, a.scale_kind, xsm, t_stride, k0, len, lane);
            if constexpr (UP) accumulate<WK, kRows, T>(acc_b, wb, sb, scale_b, a.scale_kind, xsm, t_stride, k0, len, lane);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
            for (int t = 0; t < T; ++t) {
                acc_a[r][t] = warp_sum(acc_a[r][t]);
                if constexpr (UP) acc_b[r][t] = warp_sum(acc_b[r][t]);
            }
        if (lane == 0) {
#pragma unroll
            for (int t = 0; t < T; ++t) {
                const int c = c0 + t;
                if (c >= count) continue;
                const int64_t out_row = a.active ? int64_t(offset + c) : int64_t(c);
                if constexpr (UP) {
                    const float wgt = a.active ? a.slot_weight[offset + c] : 1.f;
#pragma unroll
                    for (int r = 0; r < kRows; ++r) {
                        if (row0 + r >= a.N) continue;
                        const float g0 = a.round_glu ? round_bf16(acc_a[r][t]) : acc_a[r][t];
                        const float u0 = a.round_glu ? round_bf16(acc_b[r][t]) : acc_b[r][t];
                        const float gate = fminf(g0, a.limit);
                        const float up = fminf(fmaxf(u0, -a.limit), a.limit);
                        const float silu = gate / (1.f + expf(-gate));
                        a.h[out_row * a.h_ld + row0 + r] = f32_to_bf16_bits(silu * up * wgt);
                    }
                } else {
#pragma unroll
                    for (int r = 0; r < kRows; ++r)
                        if (row0 + r < a.N) a.y[out_row * a.N + row0 + r] = acc_a[r][t];
                }
            }
        }
    }
}

// Warp per (row, 128-block) of h: natural-order bf16 -> prepared layout (act_quant per 128 in FP8 numerics),
// in place. Rows past the grouped slots (routed) or M (dense) are left alone.
__global__ void quantize_h_kernel(uint16_t* __restrict__ h, float* __restrict__ hs, int64_t rows, int64_t h_kpad,
                                  int64_t inter, const int32_t* __restrict__ offset_end, WeightKind layout,
                                  int numerics) {
    const int lane = threadIdx.x & 31;
    const int64_t n_blk = h_kpad / 128;
    const int64_t idx = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (idx >= rows * n_blk) return;
    const int64_t r = idx / n_blk, blk = idx % n_blk;
    if (offset_end && r >= *offset_end) return;
    uint16_t* row = h + r * h_kpad + blk * 128;
    float v[4], amax = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t col = blk * 128 + 4 * lane + i;
        v[i] = col < inter ? bf16_bits_to_f32(row[4 * lane + i]) : 0.f;
        amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = warp_max(amax);  // also orders every lane's reads before any lane's writes
    float sc = 1.f;
    if (numerics == int(ActNumerics::FP8_BLOCK128))
        sc = exp2i(max(-126, min(127, ceil_log2(fmaxf(amax, 1e-4f) / 448.f))));
    else if (amax > 0.f)
        sc = exp2i(max(-126, min(127, ceil_log2(amax) - 14)));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float q = v[i] / sc;
        if (numerics == int(ActNumerics::FP8_BLOCK128)) q = round_e4m3(fminf(fmaxf(q, -448.f), 448.f));
        row[mma::prepared_pos(layout, 4 * lane + i)] = __half_as_ushort(__float2half_rn(q));
    }
    if (lane == 0) hs[r * n_blk + blk] = sc;
}

using Kernel = void (*)(Args);
template <bool UP>
Kernel pick(WeightKind kind, int T) {
    if (kind == WeightKind::FP4_BLOCK32) {
        if (T == 1) return expert_gemv_kernel<WeightKind::FP4_BLOCK32, 1, UP>;
        if (T == 2) return expert_gemv_kernel<WeightKind::FP4_BLOCK32, 2, UP>;
        if (T <= 4) return expert_gemv_kernel<WeightKind::FP4_BLOCK32, 4, UP>;
        return expert_gemv_kernel<WeightKind::FP4_BLOCK32, 8, UP>;
    }
    if (T == 1) return expert_gemv_kernel<WeightKind::FP8_BLOCK128, 1, UP>;
    if (T == 2) return expert_gemv_kernel<WeightKind::FP8_BLOCK128, 2, UP>;
    if (T <= 4) return expert_gemv_kernel<WeightKind::FP8_BLOCK128, 4, UP>;
    return expert_gemv_kernel<WeightKind::FP8_BLOCK128, 8, UP>;
}

Args base_args(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping* g, int64_t M) {
    Args a{};
    a.scale_kind = int(t.scale_kind);
    a.x = x.values;
    a.xs = x.scales;
    a.x_ld = x.k_pad;
    a.xs_ld = x.k_pad / 128;
    if (g) {
        a.active = g->active;
        a.n_active = g->n_active;
        a.count = g->expert_count;
        a.offset = g->expert_offset;
        a.slot_token = g->slot_token;
        a.slot_weight = g->slot_weight;
    }
    a.dense_m = M;
    return a;
}

void launch(Kernel k, const Args& a, WeightKind kind, int T, const MoeGrouping* g, int64_t M, int top_k,
            const char* what, cudaStream_t stream) {
    const int64_t experts = g ? std::min<int64_t>(g->E, M * top_k) : 1;
    dim3 grid(unsigned((a.N + kCtaRows - 1) / kCtaRows), unsigned(experts));
    k<<<grid, kWarps * 32, smem_bytes(kind, T, a.chunk_cols), stream>>>(a);
    CUDA_CHECK_LAUNCH(what);
}

}  // namespace

bool enabled() {
    static const bool on = [] {
        const char* e = std::getenv("FLASHSEEK_MOE_SIMT");
        return e && std::atoi(e) == 1;
    }();
    return on;
}

bool eligible(const ExpertTable& t, int64_t M, const PreparedActivation& x) {
    return enabled() && M == 1 && !x.raw && small_m_gemv_max_tokens() >= 1 && t.hidden % 128 == 0 &&
           t.inter % 128 == 0 && (reinterpret_cast<uintptr_t>(x.values) & 15) == 0;
}

void expert_up(const PreparedActivation& x, const ExpertTable& t, const MoeGrouping* grouping, int64_t M, int top_k,
               float swiglu_limit, ActNumerics h_numerics, PreparedActivation& h, cudaStream_t stream) {
    const int T = token_tile(M);
    Args a = base_args(x, t, grouping, M);
    a.w_a = t.w1;
    a.s_a = t.w1_scale;
    a.w_b = t.w3;
    a.s_b = t.w3_scale;
    a.N = t.inter;
    a.K = t.hidden;
    a.chunk_cols = chunk_columns(t.kind, T, t.hidden);
    a.limit = swiglu_limit;
    a.round_glu = h_numerics == ActNumerics::FP8_BLOCK128;
    a.h = h.values;
    a.h_ld = h.k_pad;
    launch(pick<true>(t.kind, T), a, t.kind, T, grouping, M, top_k, "simt expert_gemv_kernel<up>", stream);
    const int64_t warps = h.m * (h.k_pad / 128);
    quantize_h_kernel<<<unsigned((warps + 7) / 8), 256, 0, stream>>>(
        h.values, h.scales, h.m, h.k_pad, t.inter, grouping ? grouping->expert_offset + grouping->E : nullptr, t.kind,
        int(h_numerics));
    CUDA_CHECK_LAUNCH("simt quantize_h_kernel");
}

void expert_down(const PreparedActivation& h, const ExpertTable& t, const MoeGrouping* grouping, int64_t M, int top_k,
                 float* y, cudaStream_t stream) {
    const int T = token_tile(M);
    Args a = base_args(h, t, grouping, M);
    a.w_a = t.w2;
    a.s_a = t.w2_scale;
    a.N = t.hidden;
    a.K = t.inter;
    a.chunk_cols = chunk_columns(t.kind, T, t.inter);
    a.y = y;
    launch(pick<false>(t.kind, T), a, t.kind, T, grouping, M, top_k, "simt expert_gemv_kernel<down>", stream);
}

}  // namespace flashseek::cuda::moe_gemv_simt
