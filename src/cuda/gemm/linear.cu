// Linear layers: activation preparation (bf16/fp32 -> permuted f16 + per-128 power-of-two scales, or bf16) and
// tile_gemm, the catalogue's any-M variant (linear_catalogue.h): a weight-streaming f16 mma.sync GEMM for FP8 / FP4 /
// BF16 checkpoint weights. The per-step fragment math lives in mma_core.cuh. One CTA = 4 warps = 64 weight rows; grid = (row blocks, K splits, token passes).
// Split-K partials go to a workspace and the last CTA of each (row block, token pass) sums them in split order,
// so results are deterministic and no second launch is needed.
#include "cuda/gemm/linear.cuh"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/gemm/linear_catalogue.h"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/gemm/split_sum.cuh"
#include "cuda/gemm/tile_pipe.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerCta = 16 * kWarps;

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// ---- activation preparation ---------------------------------------------------------------------------------

// One warp per (token, 128-column block); lane holds columns 4*lane .. 4*lane+3.
__global__ void prepare_kernel(const void* __restrict__ x, int x_is_f32, int64_t M, int64_t K, int64_t ld_x,
                               WeightKind layout, ActNumerics numerics, int64_t m_pad, int64_t k_pad,
                               uint16_t* __restrict__ values, float* __restrict__ scales, int launch_next_early) {
    // PDL: x may come from the kernel before; the previous consumer of `values` must be done
    pdl_wait_and_trigger(launch_next_early != 0);
    const int lane = threadIdx.x & 31;
    const int64_t blk = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    const int64_t m = blockIdx.y;
    const int64_t n_blk = k_pad / 128;
    if (blk >= n_blk || m >= m_pad) return;
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t k = blk * 128 + 4 * lane + i;
        float f = 0.f;
        if (m < M && k < K) {
            if (x_is_f32)
                f = reinterpret_cast<const float*>(x)[m * ld_x + k];
            else
                f = bf16_bits_to_f32(reinterpret_cast<const uint16_t*>(x)[m * ld_x + k]);
        }
        v[i] = f;
    }
    uint16_t* out = values + m * k_pad + blk * 128;
    if (layout == WeightKind::BF16) {
#pragma unroll
        for (int i = 0; i < 4; ++i) out[4 * lane + i] = f32_to_bf16_bits(v[i]);
        if (lane == 0) scales[m * n_blk + blk] = 1.f;
        return;
    }
    store_prepared_block(v, lane, layout, int(numerics), out, &scales[m * n_blk + blk]);
}

// ---- the GEMM -----------------------------------------------------------------------------------------------

struct GemmArgs {
    const uint8_t* w;
    const void* scale;
    int scale_kind;
    int64_t N, K;            // rows (all groups), columns per row
    int64_t w_row_bytes;
    int64_t scale_ld;        // FP8: ceil(K/128) per 128-row block; FP4: ceil(K/32) per row
    const uint16_t* x;
    const float* xs;
    int64_t x_ld, xs_ld;     // prepared k_pad and k_pad/128
    int64_t M, m_pad;
    int64_t rows_per_group;  // grouped: x columns offset (row / rows_per_group) * x_group_cols
    int64_t x_group_cols;
    int n_steps, steps_per_split, k_splits;
    void* y;
    int y_f32;
    int64_t ld_y;
    float* partials;
    uint32_t* counters;
};

template <WeightKind WK, int NT, bool ALIGNED>
// NT = 1 (decode) is capped at 170 registers so that 3 CTAs (12 warps) stay resident per SM.
__global__ void __launch_bounds__(kWarps * 32, NT == 1 ? 3 : 2) gemm_kernel(const GemmArgs a) {
    // FP8 / FP4 weights are checkpoint weights, which no kernel of the stream writes: the first batch of them is
    // requested before pdl_wait (common/pdl.cuh), overlapping the previous kernel's tail. BF16 weights may be a
    // copy a kernel of the same pass just widened (wo_a in prefill passes): those wait first.
    constexpr bool kWeightsBeforeWait = WK != WeightKind::BF16;
    if constexpr (!kWeightsBeforeWait) {
        pdl_wait();  // PDL: first statement (common/pdl.cuh contract)
        pdl_trigger();
    }
    constexpr int U = mma::batch_steps<WK, 1>();
    constexpr int CH = mma::chunk_steps<NT>();
    constexpr int XLD = CH * 128 + 8;  // +16 B per row: conflict-free fragment reads
    __shared__ __align__(16) uint16_t xsm[NT * 8 * XLD];
    __shared__ float xss[NT * 8 * CH];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int64_t row0 = int64_t(blockIdx.x) * kRowsPerCta + 16 * warp;
    const int split = blockIdx.y;
    const int64_t n0 = int64_t(blockIdx.z) * (NT * 8);
    const int s_begin = split * a.steps_per_split;
    const int s_end = min(a.n_steps, s_begin + a.steps_per_split);
    const bool warp_active = row0 < a.N;

    float acc[1][NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[0][j][0] = acc[0][j][1] = acc[0][j][2] = acc[0][j][3] = 0.f;

    const int64_t r_lo = min(row0 + g, a.N - 1), r_hi = min(row0 + g + 8, a.N - 1);
    mma::MatRows m[1];
    m[0].w_lo = a.w + r_lo * a.w_row_bytes;
    m[0].w_hi = a.w + r_hi * a.w_row_bytes;
    m[0].scale = a.scale;
    if (WK == WeightKind::FP8_BLOCK128) {
        m[0].scale_lo = m[0].scale_hi = (min(row0, a.N - 1) / 128) * a.scale_ld;
    } else {
        m[0].scale_lo = r_lo * a.scale_ld;
        m[0].scale_hi = r_hi * a.scale_ld;
    }
    mma::PipeParams pp{a.K, a.scale_ld, a.scale_kind,
                       a.scale_kind == int(ScaleKind::E8M0) && ALIGNED && (a.scale_ld % 4 == 0) &&
                           (reinterpret_cast<uintptr_t>(a.scale) & 3) == 0};
    // Grouped linear: the CTA's 64 rows lie in one group (rows_per_group % 64 == 0, checked on the host), whose
    // input slice starts at column group * x_group_cols.
    const int64_t cta_col0 = (int64_t(blockIdx.x) * kRowsPerCta / a.rows_per_group) * a.x_group_cols;
    int n_tiles = 0;
#pragma unroll
    for (int j = 0; j < NT; ++j) n_tiles += (n0 + 8 * j < a.m_pad) ? 1 : 0;
    auto row_of = [&](int r) -> int64_t { return n0 + r < a.m_pad ? n0 + r : -1; };

    mma::Batch<WK, 1, U> bA, bB;
    if (warp_active) mma::load_batch<WK, 1, U, ALIGNED>(bA, m, s_begin, s_end, pp, t);
    if constexpr (kWeightsBeforeWait) {
        pdl_wait();  // before the first read of the activation and before any write
        pdl_trigger();
    }
    int chunk_s0 = s_begin;
    for (int s0 = s_begin; s0 < s_end; s0 += 2 * U) {
        if ((s0 - s_begin) % CH == 0) {
            __syncthreads();
            mma::stage_x<NT, CH>(xsm, XLD, xss, a.x, a.x_ld, a.xs, a.xs_ld, cta_col0, s0, s_end, row_of);
            chunk_s0 = s0;
            __syncthreads();
        }
        if (warp_active) {
            mma::load_batch<WK, 1, U, ALIGNED>(bB, m, s0 + U, s_end, pp, t);
            mma::compute_batch<WK, 1, U, NT, CH>(bA, m, s0, s_end, pp, xsm, XLD, xss, chunk_s0, n_tiles, acc, g, t);
        }
        if (s0 + U < s_end) {
            if ((s0 + U - s_begin) % CH == 0) {
                __syncthreads();
                mma::stage_x<NT, CH>(xsm, XLD, xss, a.x, a.x_ld, a.xs, a.xs_ld, cta_col0, s0 + U, s_end, row_of);
                chunk_s0 = s0 + U;
                __syncthreads();
            }
            if (warp_active) {
                mma::load_batch<WK, 1, U, ALIGNED>(bA, m, s0 + 2 * U, s_end, pp, t);
                mma::compute_batch<WK, 1, U, NT, CH>(bB, m, s0 + U, s_end, pp, xsm, XLD, xss, chunk_s0, n_tiles, acc,
                                                     g, t);
            }
        }
    }

    auto store = [&](int64_t row, int64_t tok, float v) {
        if (row >= a.N || tok >= a.M) return;
        if (a.y_f32)
            reinterpret_cast<float*>(a.y)[tok * a.ld_y + row] = v;
        else
            reinterpret_cast<uint16_t*>(a.y)[tok * a.ld_y + row] = f32_to_bf16_bits(v);
    };
    if (a.k_splits == 1) {
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int64_t tc = n0 + 8 * j + 2 * t;
            store(row0 + g, tc, acc[0][j][0]);
            store(row0 + g, tc + 1, acc[0][j][1]);
            store(row0 + g + 8, tc, acc[0][j][2]);
            store(row0 + g + 8, tc + 1, acc[0][j][3]);
        }
        return;
    }
    // Split-K: partials[split][token][row] for the tokens of this pass (tokens < m_pad exist).
    auto put = [&](int64_t row, int64_t tok, float v) {
        if (row >= a.N || tok >= a.m_pad) return;
        a.partials[(int64_t(split) * a.m_pad + tok) * a.N + row] = v;
    };
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        const int64_t tc = n0 + 8 * j + 2 * t;
        put(row0 + g, tc, acc[0][j][0]);
        put(row0 + g, tc + 1, acc[0][j][1]);
        put(row0 + g + 8, tc, acc[0][j][2]);
        put(row0 + g + 8, tc + 1, acc[0][j][3]);
    }
    __shared__ uint32_t is_last;
    const int counter = blockIdx.z * gridDim.x + blockIdx.x;
    if (!split_arrives_last(&a.counters[counter], a.k_splits, is_last, threadIdx.x == 0)) return;
    const int64_t rbase = int64_t(blockIdx.x) * kRowsPerCta;
    for (int i = threadIdx.x; i < kRowsPerCta * NT * 8; i += blockDim.x) {
        const int64_t row = rbase + (i % kRowsPerCta), tok = n0 + i / kRowsPerCta;
        if (row >= a.N || tok >= a.M) continue;
        store(row, tok, sum_splits(&a.partials[tok * a.N + row], int64_t(a.m_pad) * a.N, a.k_splits));
    }
    if (threadIdx.x == 0) a.counters[counter] = 0;
}

using GemmKernel = void (*)(GemmArgs);

template <WeightKind WK, bool ALIGNED>
GemmKernel pick_nt(int nt) {
    if (nt == 1) return gemm_kernel<WK, 1, ALIGNED>;
    if (nt == 2) return gemm_kernel<WK, 2, ALIGNED>;
    return gemm_kernel<WK, 4, ALIGNED>;
}
template <WeightKind WK>
GemmKernel pick_aligned(int nt, bool aligned) {
    return aligned ? pick_nt<WK, true>(nt) : pick_nt<WK, false>(nt);
}
GemmKernel pick_kernel(WeightKind wk, int nt, bool aligned) {
    switch (wk) {
        case WeightKind::FP8_BLOCK128: return pick_aligned<WeightKind::FP8_BLOCK128>(nt, aligned);
        case WeightKind::FP4_BLOCK32: return pick_aligned<WeightKind::FP4_BLOCK32>(nt, aligned);
        default: return pick_aligned<WeightKind::BF16>(nt, aligned);
    }
}

}  // namespace

// ---- variant tile_gemm (linear_catalogue.h) -------------------------------------------------------------------

namespace tile_gemm {

// Groups that do not start on a 128-column block or split a 64-row CTA are generic_linear's (tiny configs only).
bool supports(const LinearCall& c) {
    if (c.x.raw) return false;
    return c.groups == 1 || (c.w.in % 128 == 0 && (c.w.out / c.groups) % kRowsPerCta == 0);
}

bool preferred(const LinearCall&, const KernelPolicy&) { return true; }

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    LinearPlan p;
    p.variant = "tile_gemm";
    p.tokens_per_pass = x.m <= 8 ? 8 : (x.m <= 16 ? 16 : 32);
    const int64_t unit = w.kind == WeightKind::FP4_BLOCK32 ? 32 : 16;  // weight bytes must stay 16-aligned per row
    p.aligned = w.in % 128 == 0 && aligned16(w.weight) && aligned16(x.values) &&
                (w.kind != WeightKind::FP4_BLOCK32 || w.in % unit == 0);
    const int n_steps = int((w.in + 127) / 128);
    const int64_t row_blocks = (w.out + kRowsPerCta - 1) / kRowsPerCta;
    const int64_t passes = (x.m_pad + p.tokens_per_pass - 1) / p.tokens_per_pass;
    const int64_t base = row_blocks * passes;
    // Split K until the grid has ~4 CTAs per SM. Measured on the H200 (docs/perf.md): more, shorter CTAs beat
    // fewer, longer ones at decode sizes (wq_b at M=1: 39% of copy bandwidth with 2 splits of 4 steps, 34%
    // unsplit; wo_b 45% with 8 splits, 33% with 7 splits of >= 4 steps).
    const int64_t target = 4 * int64_t(current_arch().sm_count);
    int splits = 1;
    const GemmWorkspace* ws = c.ws;
    if (ws && ws->partials && base < target && c.groups >= 1) {
        splits = int(std::min<int64_t>((target + base - 1) / base, n_steps));
        const size_t per_split = size_t(x.m_pad) * size_t(w.out) * 4;
        splits = int(std::min<int64_t>(splits, int64_t(ws->partial_bytes / per_split)));
        if (base > ws->n_counters) splits = 1;
        splits = std::max(splits, 1);
        const int per = (n_steps + splits - 1) / splits;
        splits = (n_steps + per - 1) / per;
    }
    p.k_splits = splits;
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out,
         cudaStream_t stream) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    const int groups = c.groups;
    GemmArgs a{};
    a.w = reinterpret_cast<const uint8_t*>(w.weight);
    a.scale = w.scale;
    a.scale_kind = int(w.scale_kind);
    a.N = w.out;
    a.K = w.in;
    a.w_row_bytes = w.kind == WeightKind::FP8_BLOCK128 ? w.in : (w.kind == WeightKind::FP4_BLOCK32 ? w.in / 2 : w.in * 2);
    a.scale_ld = w.kind == WeightKind::FP8_BLOCK128 ? (w.in + 127) / 128 : (w.in + 31) / 32;
    a.x = x.values;
    a.xs = x.scales;
    a.x_ld = x.k_pad;
    a.xs_ld = x.k_pad / 128;
    a.M = x.m;
    a.m_pad = x.m_pad;
    a.rows_per_group = groups > 1 ? w.out / groups : w.out;
    a.x_group_cols = groups > 1 ? w.in : 0;
    a.n_steps = int((w.in + 127) / 128);
    a.k_splits = plan.k_splits;
    a.steps_per_split = (a.n_steps + plan.k_splits - 1) / plan.k_splits;
    a.y = out.y;
    a.y_f32 = out.kind == OutKind::F32;
    a.ld_y = out.ld;
    a.partials = c.ws ? c.ws->partials : nullptr;
    a.counters = c.ws ? c.ws->counters : nullptr;
    const int nt = plan.tokens_per_pass / 8;
    dim3 grid(unsigned((w.out + kRowsPerCta - 1) / kRowsPerCta), unsigned(plan.k_splits),
              unsigned((x.m_pad + plan.tokens_per_pass - 1) / plan.tokens_per_pass));
    FS_REQUIRE(grid.z <= 65535, "linear: too many tokens (", x.m, ") for one launch");
    // PDL (measured C=16 -0.2 ms: the BF16 router and compressor projections no longer wait for a full drain).
    launch_pdl("gemm_kernel", pick_kernel(w.kind, nt, plan.aligned), grid, dim3(kWarps * 32), 0, stream, a);
}

}  // namespace tile_gemm

size_t prepared_values_bytes(int64_t m, int64_t k) { return size_t(round_up(m, 8) * round_up(k, 128)) * 2; }
size_t prepared_scales_bytes(int64_t m, int64_t k) { return size_t(round_up(m, 8) * (round_up(k, 128) / 128)) * 4; }

void prepare_activation(const void* x, bool x_is_f32, int64_t M, int64_t K, int64_t ld_x, WeightKind layout,
                        ActNumerics numerics, PreparedActivation& out, cudaStream_t stream, bool launch_next_early) {
    FS_REQUIRE(x != nullptr, "prepare_activation: input pointer is null");
    FS_REQUIRE(M > 0 && K > 0, "prepare_activation: shape [", M, ", ", K, "] must be positive");
    FS_REQUIRE(ld_x >= K, "prepare_activation: row stride ", ld_x, " < K = ", K);
    FS_REQUIRE(out.values && out.scales, "prepare_activation: output storage is null");
    FS_REQUIRE(!(layout == WeightKind::BF16 && numerics != ActNumerics::EXACT),
               "prepare_activation: BF16 weights take EXACT activations (no FP8 act_quant)");
    describe_prepared(out, layout, numerics, M, K);
    const int64_t n_blk = out.k_pad / 128;
    FS_REQUIRE(out.m_pad <= 65535, "prepare_activation: too many tokens (", M, ")");
    dim3 grid(unsigned((n_blk + 3) / 4), unsigned(out.m_pad));
    // PDL (when on): lets the weight prefetch of a following bulk GEMV (issued before its wait) overlap this kernel.
    launch_pdl("prepare_kernel", prepare_kernel, grid, dim3(128), 0, stream, x, x_is_f32 ? 1 : 0, M, K, ld_x, layout,
               numerics, out.m_pad, out.k_pad, out.values, out.scales, launch_next_early ? 1 : 0);
}

GemmWorkspace create_gemm_workspace(size_t partial_bytes, int n_counters) {
    GemmWorkspace ws;
    CUDA_CHECK(cudaMalloc(&ws.partials, partial_bytes));
    CUDA_CHECK(cudaMalloc(&ws.counters, size_t(n_counters) * 4));
    CUDA_CHECK(cudaMemset(ws.counters, 0, size_t(n_counters) * 4));
    ws.partial_bytes = partial_bytes;
    ws.n_counters = n_counters;
    return ws;
}

void destroy_gemm_workspace(GemmWorkspace& ws) {
    if (ws.partials) cudaFree(ws.partials);
    if (ws.counters) cudaFree(ws.counters);
    ws = GemmWorkspace{};
}

PreparedActivation raw_activation(const void* x_bf16, int64_t M, int64_t K, int64_t ld, WeightKind layout,
                                  ActNumerics numerics) {
    FS_REQUIRE(x_bf16 != nullptr && M > 0 && K > 0 && ld >= K, "raw_activation: bad input [", M, ", ", K, "] ld ", ld);
    FS_REQUIRE(layout != WeightKind::BF16, "raw_activation: only for FP8/FP4 weights");
    PreparedActivation p;
    p.layout = layout;
    p.m = M;
    p.k = K;
    p.m_pad = round_up(M, 8);
    p.k_pad = round_up(K, 128);
    p.values = static_cast<uint16_t*>(const_cast<void*>(x_bf16));
    p.scales = nullptr;
    p.raw = true;
    p.numerics = numerics;
    p.raw_ld = ld;
    return p;
}

}  // namespace flashseek::cuda
