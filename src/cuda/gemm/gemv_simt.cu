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
//   - The activation may also arrive as one raw bf16 row (raw_activation), prepared while staging with
//     prepare_activation's arithmetic (prepare_block.cuh: the same bits as the launch it replaces), and for
//     normed_gemv (normed_gemv.cuh) normed first: a half warp holds one 128-block (its scale's amax), every warp
//     computes the row's 1 / rms in rmsnorm's order. At one sequence those launches each stood on the decode
//     step's critical path between two GEMVs (q_norm before wq_b, the preparations before wo_a and wo_b).
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
#include "cuda/gemm/normed_gemv.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/gemm/split_sum.cuh"
#include "cuda/norm/rms_row.cuh"

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
    // A raw bf16 row (one token) prepared while staging instead of x: a raw_activation, or normed_gemv's input
    // (normed_gemv.cuh), normed first where `norm`.
    struct RawRow {
        const uint16_t* x;       // raw bf16 row (its group's columns from the CTA's first column, as a.x)
        bool norm;               // RMSNorm first (normed_gemv), else the row as it is (raw_activation)
        const uint16_t* weight;  // bf16 [K] or null
        float eps;
        int numerics;
        uint16_t* normed;        // bf16 [K] or null: written by the CTAs of row block 0
        uint16_t* prep_values;   // prepared copy [prep_m_pad, K] or null (rows past 0: zeros), its scales beside
        float* prep_scales;
        int prep_m_pad;
    } row;
};

// The raw row's staging. 1 / rms of the row (normed_gemv), computed by the calling warp alone in rmsnorm's
// vector-path order (rms_row.cuh: lane l sums its 16-byte chunks l + 32 v in v order, then the warp's butterfly), so
// every warp of every CTA gets the bits rmsnorm gets. K <= 2,048: at most 8 chunks per lane.
__device__ __forceinline__ float row_inverse_rms(const uint16_t* x, int K, float eps, int lane) {
    const int n8 = K / 8;
    uint4 raw[8];
#pragma unroll
    for (int v = 0; v < 8; ++v)
        if (lane + 32 * v < n8) raw[v] = reinterpret_cast<const uint4*>(x)[lane + 32 * v];
    float ss = 0.f;
#pragma unroll
    for (int v = 0; v < 8; ++v)
        if (lane + 32 * v < n8) ss = rms_row::add_chunk_squares(raw[v], ss);
    return rms_row::inverse_rms(ss, K, eps);
}

// Columns [col0, col0 + len) of the raw row, normed where n.norm, into xsm as stage_x stages a prepared activation
// (the stored order, times the block scale). Thread tid takes the 8-column pieces tid + blockDim j, so a half warp
// holds one 128-block (col0 and len multiples of 128, blockDim a multiple of 32): rmsnorm's values (x r w, rounded
// to bf16; without the norm r = 1 and no weight, so x itself), then prepare_block's scale and values.
// write_out: also the normed row and its prepared copy (row 0).
template <WeightKind WK>
__device__ __forceinline__ void stage_row(float* xsm, const Args::RawRow& n, int64_t col0, int len, float r,
                                          bool write_out) {
    constexpr int CPL = cols_per_lane<WK>(), LS = lane_stride<WK>();
    const int lane = threadIdx.x & 31;
    const bool with_weight = n.norm && n.weight != nullptr;
    for (int i = threadIdx.x; i < len / 8; i += blockDim.x) {
        const int64_t col = col0 + 8 * int64_t(i);
        uint4 xr = *reinterpret_cast<const uint4*>(n.x + col);
        const uint4 wr = with_weight ? *reinterpret_cast<const uint4*>(n.weight + col) : make_uint4(0u, 0u, 0u, 0u);
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&xr);
        const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(&wr);
        float y[8];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(h[j]);
            const float2 wf = with_weight ? __bfloat1622float2(w[j]) : make_float2(1.f, 1.f);
            h[j] = __floats2bfloat162_rn(rms_row::normed(f.x, r, with_weight, wf.x),
                                         rms_row::normed(f.y, r, with_weight, wf.y));
            const float2 b = __bfloat1622float2(h[j]);
            y[2 * j] = b.x;
            y[2 * j + 1] = b.y;
        }
        uint16_t q[8];
        const float sc = prepared_block_x8_bits<WK>(y, lane, n.numerics, q);
        float xv[8];
#pragma unroll
        for (int p = 0; p < 8; ++p) xv[p] = __half2float(__ushort_as_half(q[p])) * sc;
        float4* dst = reinterpret_cast<float4*>(xsm + (8 * i / CPL) * LS + (8 * i % CPL));
        dst[0] = make_float4(xv[0], xv[1], xv[2], xv[3]);
        dst[1] = make_float4(xv[4], xv[5], xv[6], xv[7]);
        if (!write_out) continue;
        if (n.normed) *reinterpret_cast<uint4*>(n.normed + col) = xr;
        if (n.prep_values) {
            *reinterpret_cast<uint4*>(n.prep_values + col) = pack_prepared_x8(q);
            if ((lane & 15) == 0) n.prep_scales[col / 128] = sc;
        }
    }
}

// The prepared copy's padding rows 1 .. prep_m_pad - 1, as rmsnorm writes them (store_prepared_zero_x8), by one
// CTA: piece i is piece i % 16 of the padding's 128-block i / 16 (rows of K % 128 == 0 columns are contiguous blocks).
__device__ __forceinline__ void zero_prepared_padding(const Args::RawRow& n, int K) {
    const int pieces = (n.prep_m_pad - 1) * (K / 8);
    for (int i = threadIdx.x; i < pieces; i += blockDim.x)
        store_prepared_zero_x8(i, n.numerics, n.prep_values + K + 128 * int64_t(i / 16),
                               n.prep_scales + K / 128 + i / 16);
}

// ROW (T = 1): the activation staged from the raw row a.row (stage_row; normed_gemv or a raw_activation) instead
// of the prepared a.x.
template <WeightKind WK, int T, bool ROW = false>
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
    float norm_r = 1.f;
    if constexpr (ROW) {
        static_assert(T == 1, "a raw row: one token");
        if (a.row.norm) norm_r = row_inverse_rms(a.row.x, int(a.K), a.row.eps, lane);
        if (blockIdx.x == 0 && split == 0 && a.row.prep_values) zero_prepared_padding(a.row, int(a.K));
    }
    for (int64_t k0 = k_begin; k0 < k_end; k0 += a.chunk_cols) {
        const int len = int(min(int64_t(a.chunk_cols), k_end - k0));
        __syncthreads();
        if constexpr (ROW)
            stage_row<WK>(xsm, a.row, cta_col0 + k0, len, norm_r, blockIdx.x == 0);
        else
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

// ~4 CTAs (16 warps) per SM keep enough loads in flight; every split keeps >= 4 steps (512 columns) so that a warp
// streams at least one full iteration per row.
int plan_splits(const DeviceLinear& w, int64_t M, const GemmWorkspace* ws) {
    return mma_gemv::split_k(row_blocks(w), w.in / 128, M, w.out, 4, 4, ws);
}

// Everything of a launch but the activation (a.x, a.xs, ...; or a.row).
Args weight_args(const DeviceLinear& w, int groups, int T, int splits, const LinearOut& out, const GemmWorkspace* ws) {
    const int64_t n_steps = w.in / 128;
    Args a{};
    a.w = reinterpret_cast<const uint8_t*>(w.weight);
    a.scale = w.scale;
    a.scale_kind = int(w.scale_kind);
    a.N = w.out;
    a.K = w.in;
    a.w_row_bytes = w.kind == WeightKind::FP8_BLOCK128 ? w.in : w.in / 2;
    a.scale_ld = w.kind == WeightKind::FP8_BLOCK128 ? w.in / 128 : w.in / 32;
    a.rows_per_group = groups > 1 ? w.out / groups : w.out;
    a.x_group_cols = groups > 1 ? w.in : 0;
    a.k_per_split = ((n_steps + splits - 1) / splits) * 128;
    a.chunk_cols = chunk_columns(w.kind, T, a.k_per_split);
    a.k_splits = splits;
    a.y = out.y;
    a.y_f32 = out.kind == OutKind::F32;
    a.ld_y = out.ld;
    a.partials = ws ? ws->partials : nullptr;
    a.counters = ws ? ws->counters : nullptr;
    return a;
}

void launch(Kernel k, const Args& a, const DeviceLinear& w, int T, cudaStream_t stream) {
    const size_t smem = smem_bytes(w.kind, T, a.chunk_cols);
    dim3 grid(unsigned(row_blocks(w)), unsigned(a.k_splits));
    launch_pdl("gemv_simt_kernel", k, grid, dim3(kWarps * 32), smem, stream, a);
}

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (w.kind != WeightKind::FP8_BLOCK128 && w.kind != WeightKind::FP4_BLOCK32) return false;
    if (x.m != 1) return false;
    if (w.in % 128 != 0 || !aligned16(w.weight) || !aligned16(x.values) || x.k_pad % 8 != 0) return false;
    if (c.groups > 1 && (w.out / c.groups) % kRowsPerCta != 0) return false;
    return true;
}

bool preferred(const LinearCall&, const KernelPolicy& policy) { return policy.gemv_max_tokens >= 1; }

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    LinearPlan p;
    p.variant = "simt_gemv";
    p.tokens_per_pass = 1;
    p.k_splits = plan_splits(c.w, c.x.m, c.ws);
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out,
         cudaStream_t stream) {
    const PreparedActivation& x = c.x;
    const int T = token_tile(x.m);
    Args a = weight_args(c.w, c.groups, T, plan.k_splits, out, c.ws);
    a.M = x.m;
    if (x.raw) {  // one raw bf16 row, prepared while staging (the same bits as prepare_activation, then this)
        a.row.x = x.values;
        a.row.numerics = int(x.numerics);
        const Kernel k = c.w.kind == WeightKind::FP8_BLOCK128 ? gemv_kernel<WeightKind::FP8_BLOCK128, 1, true>
                                                              : gemv_kernel<WeightKind::FP4_BLOCK32, 1, true>;
        launch(k, a, c.w, 1, stream);
        return;
    }
    a.x = x.values;
    a.xs = x.scales;
    a.x_ld = x.k_pad;
    a.xs_ld = x.k_pad / 128;
    const Kernel k = c.w.kind == WeightKind::FP8_BLOCK128 ? pick_tokens<WeightKind::FP8_BLOCK128>(T)
                                                          : pick_tokens<WeightKind::FP4_BLOCK32>(T);
    launch(k, a, c.w, T, stream);
}

}  // namespace flashseek::cuda::simt_gemv

namespace flashseek::cuda {

const char* normed_gemv_unsupported(const NormedInput& in, const DeviceLinear& w) {
    if (w.kind != WeightKind::FP8_BLOCK128 && w.kind != WeightKind::FP4_BLOCK32) return "weight: FP8 or FP4 only";
    if (w.in % 128 != 0 || w.in > 2048) return "weight: in must be a multiple of 128 and at most 2,048";
    if (!w.weight || !w.scale || !aligned16(w.weight)) return "weight: storage and scales, 16-byte aligned";
    if (!in.x || !aligned16(in.x)) return "x: a 16-byte aligned row";
    if (in.weight && !aligned16(in.weight)) return "weight of the norm: must be 16-byte aligned";
    const auto* lo = reinterpret_cast<const char*>(in.x);
    const auto* hi = lo + size_t(w.in) * 2;
    auto overlaps = [&](const void* p, size_t bytes) {
        const auto* q = static_cast<const char*>(p);
        return p && q < hi && lo < q + bytes;
    };
    if (in.normed_out && (!aligned16(in.normed_out) || overlaps(in.normed_out, size_t(w.in) * 2)))
        return "normed_out: 16-byte aligned, apart from x";
    if (const PreparedActivation* p = in.prepared_out) {
        if (!p->values || !p->scales || !aligned16(p->values) || p->layout != w.kind)
            return "prepared_out: values and scales for the weight's layout, 16-byte aligned";
        if (p->format != ActFormat::MMA_F16 || p->raw) return "prepared_out: the MMA_F16 form only";
        if (overlaps(p->values, size_t(8) * size_t(w.in) * 2) ||
            overlaps(p->scales, size_t(8) * size_t(w.in / 128) * 4))
            return "prepared_out: apart from x";
    }
    return "";
}

void normed_gemv(const NormedInput& in, const DeviceLinear& w, void* y, OutKind y_kind, int64_t ld_y,
                 const GemmWorkspace* ws, cudaStream_t stream) {
    const char* why = normed_gemv_unsupported(in, w);
    FS_REQUIRE(*why == 0, "normed_gemv: ", why);
    FS_REQUIRE(y && ld_y >= w.out, "normed_gemv: output [1, ", w.out, "] needs storage and a row stride >= ", w.out);
    using namespace simt_gemv;
    Args a = weight_args(w, 1, 1, plan_splits(w, 1, ws), LinearOut{y, y_kind, ld_y}, ws);
    a.M = 1;
    a.row.x = reinterpret_cast<const uint16_t*>(in.x);
    a.row.norm = true;
    a.row.weight = reinterpret_cast<const uint16_t*>(in.weight);
    a.row.eps = in.eps;
    a.row.numerics = int(in.numerics);
    a.row.normed = reinterpret_cast<uint16_t*>(in.normed_out);
    if (PreparedActivation* p = in.prepared_out) {
        describe_prepared(*p, w.kind, in.numerics, 1, w.in);
        a.row.prep_values = p->values;
        a.row.prep_scales = p->scales;
        a.row.prep_m_pad = int(p->m_pad);
    }
    const Kernel k = w.kind == WeightKind::FP8_BLOCK128 ? gemv_kernel<WeightKind::FP8_BLOCK128, 1, true>
                                                        : gemv_kernel<WeightKind::FP4_BLOCK32, 1, true>;
    launch(k, a, w, 1, stream);
}

}  // namespace flashseek::cuda
