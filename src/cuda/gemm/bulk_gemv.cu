// Decode GEMV for FP8 block-scaled weights (e4m3 + 128x128 scales) at 1-16 tokens on sm_90+, release numerics:
// weights streamed into shared memory by bulk asynchronous copies, products by mma.sync e4m3 (lowered to f16 HMMA
// with e4m3 unpacks on sm_90, native on sm_89 / sm_120).
// Why: the SIMT GEMV (M = 1) and the f16 tensor-core GEMV (2-16 tokens) reach 20-45% of the copy bandwidth on the
// decode shapes (33.6 MB wq_b / wo_b: per-thread loads keep too few bytes in flight, and widening e4m3 to f16 costs
// instructions). Here the bytes need no conversion at all: e4m3 weights are the A operand of mma.sync m16n8k32
// e4m3 as stored, the prepared activation (e4m3 codes as f16) becomes B with one cvt per two values.
// Design:
//   - Persistent CTAs (two per SM, 8 warps each, 128 registers per thread); every warp owns a ring of 3 stages of
//     16 weight rows x 256 bytes (padded to 288: conflict-free 8-byte fragment reads), filled by 16-byte cp.async
//     of every lane (16 lanes per row piece) completing on one mbarrier. Work items = (16-row tile, K split), dealt
//     round robin; the warp refills its ring 2 stages ahead across item boundaries.
//   - Weights do not depend on earlier kernels: each warp issues its first two stages before griddepcontrol.wait, so
//     with programmatic dependent launch the weight stream starts while the previous kernel is finishing.
//   - Inside a 128-column block any k order is valid (one weight scale, one activation scale): lane t's A registers
//     are bytes [8t, 8t+8) of the k-block (one 8-byte shared load per row), B the same activation columns.
//   - K is split over items until there are ~2 items per warp of the GPU; fp32 partials go to the GEMM workspace
//     and the last warp of a tile (atomic counter) sums them in split order: deterministic, one launch.
// Numerics: exact e4m3 products, fp32 sums per 32 columns (tensor core) and per 128 (FADD), power-of-two scales;
// the result equals the f16 GEMV's up to summation order.
// Measured (H200, docs/perf.md): 33.6 MB at 8 tokens 22 us vs 24-28 for the f16 GEMV, at 1 token 19.3 vs 17.6 for the
// SIMT GEMV: preferred for 2-16 tokens on >= 16 MB only. Variant bulk_gemv of the linear catalogue.
#include "cuda/gemm/bulk_gemv.cuh"
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/gemv_mma.cuh"
#include "cuda/gemm/stream_gemv.cuh"

namespace flashseek::cuda::bulk_gemv {
namespace {

constexpr int kWarps = 8;
constexpr int kCtasPerSm = 2;
constexpr int kStages = 3;
constexpr int kRows = 16;
constexpr int kRowBytes = 256;  // weight bytes (= columns) per row per stage
constexpr int kStride = kRowBytes + 32;
constexpr int kStageBytes = kRows * kStride;
constexpr size_t kSmemBytes = bulk::ring_smem_bytes(kWarps, kStages, kStageBytes);
constexpr int64_t kMinTokens = 2;
constexpr int64_t kMinWeightBytes = int64_t(16) << 20;

using stream_gemv::Args;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using namespace bulk;

// One stage (256 columns = two 128-blocks) for token tile J: acc[J] += W_stage x_stage. xr: activation row of B
// column g; xs_lo/hi: scale rows of C columns 2t, 2t + 1; col0: first activation column of the stage.
template <int J>
__device__ __forceinline__ void stage_tile(float (&acc)[2][4], const unsigned char* sw, const uint16_t* xr,
                                           const float* xs_lo, const float* xs_hi, int64_t col0, float ws0, float ws1,
                                           uint64_t* bar, uint32_t parity, bool wait, int g, int t) {
#pragma unroll 1
    for (int b = 0; b < 2; ++b) {
        uint4 braw[4];
#pragma unroll
        for (int kq = 0; kq < 4; ++kq)
            braw[kq] = __ldg(reinterpret_cast<const uint4*>(xr + col0 + 128 * b + 32 * kq + 8 * t));
        const float as_lo = __ldg(xs_lo + (col0 + 128 * b) / 128), as_hi = __ldg(xs_hi + (col0 + 128 * b) / 128);
        if (b == 0 && wait) mbar_wait(bar, parity);
        float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int kq = 0; kq < 4; ++kq) {
            const int kb = 4 * b + kq;
            uint32_t b0, b1;
            prepared_fp8x8_to_e4m3(braw[kq], b0, b1);
            const uint2 lo = *reinterpret_cast<const uint2*>(sw + g * kStride + kb * 32 + 8 * t);
            const uint2 hi = *reinterpret_cast<const uint2*>(sw + (g + 8) * kStride + kb * 32 + 8 * t);
            const uint32_t af[4] = {lo.x, hi.x, lo.y, hi.y};
            float d[4];
            mma_e4m3(d, af, b0, b1);
#pragma unroll
            for (int r = 0; r < 4; ++r) part[r] += d[r];
        }
        const float ws = b == 0 ? ws0 : ws1;
        acc[J][0] = fmaf(part[0], ws * as_lo, acc[J][0]);
        acc[J][1] = fmaf(part[1], ws * as_hi, acc[J][1]);
        acc[J][2] = fmaf(part[2], ws * as_lo, acc[J][2]);
        acc[J][3] = fmaf(part[3], ws * as_hi, acc[J][3]);
    }
}
#endif

template <int NT>
__global__ void __launch_bounds__(kWarps * 32, kCtasPerSm) bulk_gemv_kernel(const Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    pdl_trigger();  // let the next PDL kernel be scheduled (its own contract: nothing before its wait depends on us)
    const WarpRing wr = warp_ring<kWarps, kStages, kStageBytes>(smem, warp, lane);
    unsigned char* const ring = wr.slots;
    uint64_t* const bars = wr.bars;

    const int tiles = int(a.N / kRows);
    const int n_items = tiles * a.splits;
    const int total_stages = int(a.K / kRowBytes);
    const int gw = blockIdx.x * kWarps + warp, nw = gridDim.x * kWarps;
    // item -> (tile = item % tiles, split = item / tiles): neighbouring warps share a K range (activation in L1).
    auto stage_range = [&](int item, int& s_begin, int& s_end) {
        const stream_gemv::StageRange r = stream_gemv::split_stages(a, total_stages, item / tiles);
        s_begin = r.begin;
        s_end = r.end;
    };
    // Fill cursor: lane l copies 16 bytes of rows 2i + l / 16 (i = 0..7), 16 lanes per 256-byte row piece.
    int f_item = gw, f_stage = 0, f_end = 0, q_fill = 0;
    if (f_item < n_items) stage_range(f_item, f_stage, f_end);
    auto fill = [&]() {  // next stage of this warp's sequence into ring slot q_fill % kStages
        while (f_item < n_items && f_stage >= f_end) {
            f_item += nw;
            if (f_item < n_items) stage_range(f_item, f_stage, f_end);
        }
        if (f_item >= n_items) return;
        const int st = q_fill % kStages;
        const int64_t row = int64_t(f_item % tiles) * kRows + lane / 16;
        unsigned char* dst = ring + st * kStageBytes + (lane / 16) * kStride + (lane % 16) * 16;
        const uint8_t* src = a.w + row * a.K + int64_t(f_stage) * kRowBytes + (lane % 16) * 16;
#pragma unroll
        for (int i = 0; i < kRows / 2; ++i) cp_async_16(dst + 2 * i * kStride, src + int64_t(2 * i) * a.K);
        cp_async_mbar_arrive(&bars[st]);
        ++f_stage;
        ++q_fill;
    };
    fill();  // weights only: before the wait on the previous kernel
    fill();
    pdl_wait();

    int q = 0;
    for (int item = gw; item < n_items; item += nw) {
        int s_begin, s_end;
        stage_range(item, s_begin, s_end);
        const int tile = item % tiles, split = item / tiles;
        const int64_t row0 = int64_t(tile) * kRows;
        const int64_t x_col0 = (row0 / a.rows_per_group) * a.x_group_cols;
        const int64_t s_row = (row0 / 128) * a.scale_ld;
        const uint16_t* xr[2];
        const float* xs_lo[2];
        const float* xs_hi[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            xr[j] = a.x + int64_t(min(8 * j + g, a.M - 1)) * a.x_ld;
            xs_lo[j] = a.xs + int64_t(min(8 * j + 2 * t, a.M - 1)) * a.xs_ld;
            xs_hi[j] = a.xs + int64_t(min(8 * j + 2 * t + 1, a.M - 1)) * a.xs_ld;
        }
        float acc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        for (int s = s_begin; s < s_end; ++s, ++q) {
            __syncwarp();  // every lane is done reading the slot refilled now (consumed at q - 1)
            fence_proxy_async();
            fill();
            const int st = q % kStages;
            const unsigned char* sw = ring + st * kStageBytes;
            const int64_t col0 = x_col0 + int64_t(s) * kRowBytes;
            const float ws0 = stream_gemv::weight_scale(a, s_row + int64_t(s) * 2);
            const float ws1 = stream_gemv::weight_scale(a, s_row + int64_t(s) * 2 + 1);
            const uint32_t parity = uint32_t((q / kStages) & 1);
            stage_tile<0>(acc, sw, xr[0], xs_lo[0], xs_hi[0], col0, ws0, ws1, &bars[st], parity, true, g, t);
            if (NT > 1) stage_tile<1>(acc, sw, xr[1], xs_lo[1], xs_hi[1], col0, ws0, ws1, &bars[st], parity, false, g, t);
        }
        // Epilogue: C fragment (rows g, g + 8; tokens 2t, 2t + 1 of tile j).
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int tok = 8 * j + 2 * t + (r & 1);
                const int64_t row = row0 + g + ((r & 2) ? 8 : 0);
                if (tok >= a.M) continue;
                stream_gemv::store_or_partial(a, row, tok, split, acc[j][r]);
            }
        if (a.splits == 1) continue;
        // Split-K: the last warp of this tile sums the partials in split order.
        __threadfence();
        __syncwarp();
        uint32_t last = 0;
        if (lane == 0) last = atomicAdd(&a.counters[tile], 1u) == uint32_t(a.splits - 1);
        last = __shfl_sync(0xffffffffu, last, 0);
        if (!last) continue;
        __threadfence();
        stream_gemv::sum_partials<kRows, 32>(a, row0, lane);
        if (lane == 0) a.counters[tile] = 0;
    }
#else
    __trap();
#endif
}

int warps_total() { return int(current_arch().sm_count) * kCtasPerSm * kWarps; }

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (current_arch().cc < 90 || w.kind != WeightKind::FP8_BLOCK128 || x.raw ||
        x.numerics != ActNumerics::FP8_BLOCK128 || x.layout != WeightKind::FP8_BLOCK128)
        return false;
    if (x.m < 1 || x.m > kGemvMaxTokens) return false;
    if (w.in % kRowBytes != 0 || w.out % kRows != 0 || !aligned16(w.weight) || !aligned16(x.values)) return false;
    if (w.scale_kind != ScaleKind::E8M0 && w.scale_kind != ScaleKind::F32) return false;
    if (c.groups > 1 && (w.out % c.groups != 0 || (w.out / c.groups) % kRows != 0)) return false;
    return x.k_pad % 8 == 0;
}

// Where it was measured faster than the f16 / SIMT GEMVs (H200, docs/perf.md): 2-16 tokens on >= 16 MB weights
// (wq_b, wo_a, wo_b at M=8: 22 vs 24-28 us); one token keeps the SIMT GEMV (19.3 vs 17.6 us on wq_b), small
// matrices (wq_a, wkv) the f16 GEMV.
bool preferred(const LinearCall& c, const KernelPolicy& policy) {
    return c.x.m >= kMinTokens && c.x.m <= policy.gemv_max_tokens && c.w.out * c.w.in >= kMinWeightBytes;
}

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    // ~2 items per warp of the GPU, every split >= 2 stages, no split below 4 stages.
    LinearPlan p;
    p.variant = "bulk_gemv";
    p.tokens_per_pass = int(c.x.m);
    p.k_splits = stream_gemv::plan_splits(c.w.out / kRows, c.w.in / kRowBytes, warps_total(), 4, 2, c.x.m, c.w.out,
                                          c.ws);
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out,
         cudaStream_t stream) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    const int splits = plan.k_splits;
    const Args a = stream_gemv::make_args(x, w, c.groups, out.y, out.kind, out.ld, c.ws, splits, kRowBytes);
    const int64_t items = (w.out / kRows) * splits;
    const int64_t ctas = std::min<int64_t>(int64_t(current_arch().sm_count) * kCtasPerSm, (items + kWarps - 1) / kWarps);
    auto kernel = x.m > 8 ? bulk_gemv_kernel<2> : bulk_gemv_kernel<1>;
    allow_dynamic_smem(kernel, kSmemBytes);
    launch_pdl("bulk_gemv_kernel", kernel, dim3(unsigned(ctas)), dim3(kWarps * 32), kSmemBytes, stream, a);
}

}  // namespace flashseek::cuda::bulk_gemv
