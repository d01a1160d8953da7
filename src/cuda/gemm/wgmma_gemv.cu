// Decode GEMV for FP8 block-scaled weights (e4m3 + 128x128 scales) at 2-16 tokens on sm_90a with warpgroup
// tensor cores (wgmma), release numerics.
// Why: bulk_gemv.cu streams these weights but multiplies with mma.sync e4m3, which Hopper lowers to f16 HMMA plus
// unpacks of every operand register; at 8-16 tokens the 33.6 MB attention projections ran at 25-36% of the copy
// bandwidth. wgmma e4m3 is native, and FP8 weights need no conversion: the bytes loaded from shared memory are
// the A registers as stored.
// Design:
//   - Persistent CTAs of one warpgroup (128 threads, three per SM). Item = (64 weight rows, K range); a stage =
//     those 64 rows x 256 bytes (two 128-column blocks; 256-byte row pieces stream at the copy bandwidth, 128-byte
//     ones ~10% below: scripts/probes/stream_probe.cu), 3-stage ring refilled across items. Every lane copies
//     16-byte pieces with cp.async (16 lanes per row piece), completing on the stage's mbarrier (count = threads):
//     one cp.async.bulk per row was issued by ptxas one lane at a time (~8 instructions per row; the per-lane form
//     measured C=16 -0.05 ms end to end, docs/perf-log).
//     The first two stages are issued before griddepcontrol.wait (weights do not depend on earlier kernels).
//   - Inside a 128-column block any k order is valid (one weight scale, one activation scale per token): thread
//     (g, t) loads bytes [32t, 32t + 32) of rows g and g + 8 (two 16-byte loads each), step s of the block uses
//     bytes 32t + 8s .. + 7 as a0/a2 (rows g) and a1/a3 (rows g + 8). The activation's B tile (K-major, 16 token
//     columns, common/wgmma.cuh) is written by the threads in that order from the prepared activation (e4m3 codes as
//     f16 -> bytes, exact), one stage ahead, with its per-128 scales.
//   - Per block: four wgmma m64nNk32 accumulate in the tensor core, then per column fp32 (weight scale x activation
//     scale) in one FMA; blocks are issued back to back and waited in order.
//   - Split-K over items (~2 items per CTA slot of the GPU) with fp32 partials in the GEMM workspace; the last CTA of
//     a row tile (atomic counter) sums them in split order: deterministic.
// Numerics: exact e4m3 products, the tensor core's fp32 sums per 128 columns (not exact fp32 additions: ~5e-5
// relative), power-of-two or fp32 scales; equal to the other GEMVs up to that and summation order.
#include "cuda/gemm/wgmma_gemv.cuh"
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/gemm/gemv_mma.cuh"
#include "cuda/gemm/stream_gemv.cuh"

namespace flashseek::cuda::wgmma_gemv {
namespace {

constexpr int kThreads = 128;
constexpr int kCtasPerSm = 3;
constexpr int kStages = 3;
constexpr int kRows = 64;
constexpr int kRowBytes = 256;                   // columns per row per stage: two 128-blocks
constexpr int kStride = kRowBytes + 16;          // padded: the 16-byte fragment loads of a quarter warp hit 32 banks
constexpr int kWeightBytes = kRows * kStride;
constexpr int kTileBytes = (kRowBytes / 32) * wgmma::kStepBytes;  // B tile of a stage
constexpr int kStageBytes = kWeightBytes + kTileBytes + 2 * 16 * 4;  // + activation scales [2 blocks][16]
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + kStages * 8;
static_assert(kWeightBytes % 128 == 0 && kStageBytes % 128 == 0, "tile and stage alignment");
constexpr int64_t kMinWeightBytes = int64_t(4) << 20;  // smaller matrices: the f16 GEMV (see preferred())

using stream_gemv::Args;

#if FS_WGMMA_AVAILABLE
using namespace bulk;

// This thread's share of a stage's activation: token n = tid / 8, 32 columns [128b + 32t, + 32) of the stage.
struct ActPart {
    uint4 v[4];
    float s;
};

__device__ __forceinline__ void load_act(ActPart& p, const Args& a, int n, int b, int t, int64_t col0) {
    if (n >= a.M) return;
    const uint4* src = reinterpret_cast<const uint4*>(a.x + int64_t(n) * a.x_ld + col0 + 128 * b + 32 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) p.v[i] = __ldg(src + i);
    if (t == 0) p.s = __ldg(a.xs + int64_t(n) * a.xs_ld + (col0 + 128 * b) / 128);
}

// Writes the part into the stage's B tile: columns 32t + 8s + r of block b are step 4b + s, logical k 4t + r
// (r < 4) or 16 + 4t + r - 4; prepared values are stored x0 x2 x1 x3 per group of four.
__device__ __forceinline__ void store_act(const ActPart& p, unsigned char* tile, float* scales, int n, int b, int t,
                                          int M) {
    const bool valid = n < M;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        uint32_t lo = 0, hi = 0;
        if (valid) {
            const uint4 v = p.v[s];
            lo = __byte_perm(f16x2_to_e4m3x2(v.x) | (f16x2_to_e4m3x2(v.y) << 16), 0u, 0x3120);
            hi = __byte_perm(f16x2_to_e4m3x2(v.z) | (f16x2_to_e4m3x2(v.w) << 16), 0u, 0x3120);
        }
        unsigned char* step = tile + (4 * b + s) * wgmma::kStepBytes;
        *reinterpret_cast<uint32_t*>(step + wgmma::b_offset(4 * t, n)) = lo;
        *reinterpret_cast<uint32_t*>(step + wgmma::b_offset(16 + 4 * t, n)) = hi;
    }
    if (t == 0) scales[b * 16 + n] = valid ? p.s : 0.f;
}

// One 128-column block: A from the stage (rows 16w + g, + 8), four accumulating wgmmas.
template <int N>
__device__ __forceinline__ void issue_block(float (&d)[N / 2], uint32_t (&a)[4][4], const unsigned char* sw,
                                            uint64_t tile_desc, int b, int warp, int g, int t) {
    const unsigned char* r_lo = sw + (16 * warp + g) * kStride + 128 * b + 32 * t;
    const unsigned char* r_hi = r_lo + 8 * kStride;
    const uint4 l0 = *reinterpret_cast<const uint4*>(r_lo), l1 = *reinterpret_cast<const uint4*>(r_lo + 16);
    const uint4 h0 = *reinterpret_cast<const uint4*>(r_hi), h1 = *reinterpret_cast<const uint4*>(r_hi + 16);
    a[0][0] = l0.x, a[0][1] = h0.x, a[0][2] = l0.y, a[0][3] = h0.y;
    a[1][0] = l0.z, a[1][1] = h0.z, a[1][2] = l0.w, a[1][3] = h0.w;
    a[2][0] = l1.x, a[2][1] = h1.x, a[2][2] = l1.y, a[2][3] = h1.y;
    a[3][0] = l1.z, a[3][1] = h1.z, a[3][2] = l1.w, a[3][3] = h1.w;
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) {
        const uint64_t desc = wgmma::advance(tile_desc, uint32_t(4 * b + s) * wgmma::kStepBytes);
        if constexpr (N == 16) {
            if (s == 0)
                wgmma::mma_n16(d, a[s], desc);
            else
                wgmma::mma_n16_acc(d, a[s], desc);
        } else {
            if (s == 0)
                wgmma::mma_n8(d, a[s], desc);
            else
                wgmma::mma_n8_acc(d, a[s], desc);
        }
    }
    wgmma::commit();
}

#endif

template <int N>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) wgmma_gemv_kernel(const Args a) {
#if FS_WGMMA_AVAILABLE
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ uint32_t last_flag;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
    pdl_trigger();  // the next PDL kernel waits for our completion before touching our outputs
    uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * kStageBytes);
    if (tid < kStages) mbar_init_count(&bars[tid], kThreads);  // one cp.async arrival per thread
    mbar_init_fence();
    __syncthreads();

    const int tiles = int(a.N / kRows);
    const int n_items = tiles * a.splits;
    const int total_stages = int(a.K / kRowBytes);
    // Items in this CTA's order and their stage ranges: item -> (tile = item % tiles, split = item / tiles).
    auto range = [&](int item, int& s0, int& s1) {
        const stream_gemv::StageRange r = stream_gemv::split_stages(a, total_stages, item / tiles);
        s0 = r.begin;
        s1 = r.end;
    };
    // Producer cursor (weights only; warp w copies rows 8i + 2w + lane / 16, 16 bytes per lane).
    int f_item = int(blockIdx.x), f_stage = 0, f_end = 0, q_fill = 0;
    if (f_item < n_items) range(f_item, f_stage, f_end);
    const uint8_t* f_row = nullptr;
    auto fill = [&]() {
        while (f_item < n_items && f_stage >= f_end) {
            f_item += int(gridDim.x);
            if (f_item < n_items) range(f_item, f_stage, f_end);
            f_row = nullptr;
        }
        if (f_item >= n_items) return;
        const int st = q_fill % kStages;
        if (f_row == nullptr)
            f_row = a.w + int64_t((f_item % tiles) * kRows + 2 * warp + lane / 16) * a.K + (lane % 16) * 16;
        unsigned char* dst = smem + size_t(st) * kStageBytes + (2 * warp + lane / 16) * kStride + (lane % 16) * 16;
        const uint8_t* src = f_row + int64_t(f_stage) * kRowBytes;
#pragma unroll
        for (int i = 0; i < 8; ++i) cp_async_16(dst + 8 * i * kStride, src + int64_t(8 * i) * a.K);
        cp_async_mbar_arrive(&bars[st]);
        ++f_stage;
        ++q_fill;
    };
    fill();  // weights do not depend on the previous kernel: start streaming before the wait
    fill();
    pdl_wait();

    // Activation cursor, one stage ahead of the consumer: the same (item, stage) sequence.
    const int an = tid / 8, ab = (tid / 4) & 1, at = tid & 3;
    int a_item = int(blockIdx.x), a_stage = 0, a_end = 0;
    if (a_item < n_items) range(a_item, a_stage, a_end);
    auto next_act = [&](ActPart& p) -> bool {
        while (a_item < n_items && a_stage >= a_end) {
            a_item += int(gridDim.x);
            if (a_item < n_items) range(a_item, a_stage, a_end);
        }
        if (a_item >= n_items) return false;
        const int row0 = (a_item % tiles) * kRows;
        load_act(p, a, an, ab, at, int64_t(row0 / a.rows_per_group) * a.x_group_cols + int64_t(a_stage) * kRowBytes);
        ++a_stage;
        return true;
    };
    ActPart act;
    next_act(act);

    int q = 0;
    for (int item = int(blockIdx.x); item < n_items; item += int(gridDim.x)) {
        int s0, s1;
        range(item, s0, s1);
        const int tile = item % tiles, split = item / tiles;
        const int row0 = tile * kRows;
        const int64_t s_row = int64_t(row0 / 128) * a.scale_ld;
        float acc[N / 2];
#pragma unroll
        for (int j = 0; j < N / 2; ++j) acc[j] = 0.f;
        for (int s = s0; s < s1; ++s, ++q) {
            const int st = q % kStages;
            unsigned char* stage = smem + size_t(st) * kStageBytes;
            unsigned char* tile_b = stage + kWeightBytes;
            float* ss = reinterpret_cast<float*>(tile_b + kTileBytes);
            __syncthreads();  // every thread is done with the slot refilled below (stage q - 1) and with q's B slot
            fence_proxy_async();
            fill();
            store_act(act, tile_b, ss, an, ab, at, a.M);
            fence_proxy_async();  // B is read by wgmma (async proxy)
            next_act(act);        // loads for the next stage, in flight during this one
            const float ws0 = stream_gemv::weight_scale(a, s_row + 2 * s);
            const float ws1 = stream_gemv::weight_scale(a, s_row + 2 * s + 1);
            __syncthreads();  // B tile and scales of this stage written
            mbar_wait(&bars[st], uint32_t((q / kStages) & 1));
            const uint64_t tile_desc = wgmma::b_descriptor(smem_u32(tile_b));  // once per stage
            float d0[N / 2], d1[N / 2];
            uint32_t a0[4][4], a1[4][4];
            issue_block<N>(d0, a0, stage, tile_desc, 0, warp, g, t);
            issue_block<N>(d1, a1, stage, tile_desc, 1, warp, g, t);
            wgmma::wait<1>();
            wgmma::promote(d0, a0, acc, ws0, ss, t);
            wgmma::wait<0>();
            wgmma::promote(d1, a1, acc, ws1, ss + 16, t);
        }
        stream_gemv::store_d_tile(a, acc, row0, 0, split, warp, g, t);
        // Split-K: the last CTA of this row tile sums the partials in split order.
        if (a.splits == 1 || !stream_gemv::last_split(a, tile, last_flag, tid)) continue;
        stream_gemv::sum_partials<kRows, kThreads>(a, row0, tid);
        if (tid == 0) a.counters[tile] = 0;
    }
#else
    __trap();
#endif
}

int cta_slots() { return int(current_arch().sm_count) * kCtasPerSm; }

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (!wgmma_usable()) return false;
    if (w.kind != WeightKind::FP8_BLOCK128 || x.raw || x.numerics != ActNumerics::FP8_BLOCK128 ||
        x.layout != WeightKind::FP8_BLOCK128)
        return false;
    if (x.m < 1 || x.m > kGemvMaxTokens) return false;
    if (w.in % kRowBytes != 0 || w.out % kRows != 0 || !aligned16(w.weight) || !aligned16(x.values)) return false;
    if (w.scale_kind != ScaleKind::E8M0 && w.scale_kind != ScaleKind::F32) return false;
    if (c.groups > 1 && (w.out % c.groups != 0 || (w.out / c.groups) % kRows != 0)) return false;
    return x.k_pad % 8 == 0 && w.out * int64_t(w.in) < (int64_t(1) << 31);
}

// Where it measured faster (H200, docs/perf.md): 2+ tokens (KernelPolicy::wgmma_gemv_min_tokens) on >= 4 MB of
// weights (wkv, 2 MB: the f16 GEMV at 8-16 tokens). One token keeps the SIMT GEMV: per call it won on most shapes,
// but end to end at C=1 the step was slower (5.87 -> 6.29 ms), not understood yet.
bool preferred(const LinearCall& c, const KernelPolicy& policy) {
    return c.x.m >= policy.wgmma_gemv_min_tokens && c.x.m <= policy.gemv_max_tokens &&
           c.w.out * c.w.in >= kMinWeightBytes;
}

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    // ~2 items per CTA slot of the GPU (the last wave of items then costs at most a third), >= 1 stage per split.
    LinearPlan p;
    p.variant = "wgmma_gemv";
    p.tokens_per_pass = int(c.x.m);
    p.k_splits = stream_gemv::plan_splits(c.w.out / kRows, c.w.in / kRowBytes, cta_slots(), 2, 1, c.x.m, c.w.out,
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
    const int64_t ctas = std::min<int64_t>(cta_slots(), items);
    auto kernel = x.m > 8 ? wgmma_gemv_kernel<16> : wgmma_gemv_kernel<8>;
    allow_dynamic_smem(kernel, kSmemBytes);
    launch_pdl("wgmma_gemv_kernel", kernel, dim3(unsigned(ctas)), dim3(kThreads), kSmemBytes, stream, a);
}

}  // namespace flashseek::cuda::wgmma_gemv
