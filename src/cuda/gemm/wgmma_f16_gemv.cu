// wgmma_f16_gemv, a decode variant of the linear catalogue (linear_catalogue.h): FP8 block-scaled weights times an
// f16-prepared activation (prepare_activation's MMA_F16 layout; exact numerics, i.e. wo_a, whose activation stays
// bf16 as in the reference's bf16 einsum) on sm_90a warpgroup tensor cores, 2-256 tokens.
// Why: wgmma_gemv and the FP8 GEMMs take e4m3 activations only (release numerics), so wo_a's decode passes ran on the
// f16 mma.sync GEMV up to 16 tokens (50 us per call at 16 = 16% of the copy rate) and on tile_gemm above (68 / 113 /
// 218 / 343 us at 32 / 64 / 128 / 256 rows: 32-token passes each widening every weight again), where 33.6 MB
// need 8 us at the copy rate. Widening wo_a to bf16 once per pass for the bf16 GEMM costs 31 us + 180 us.
// Design (wgmma_gemv's, with f16 operands):
//   - Persistent CTAs of one warpgroup, two per SM. Item = (64 weight rows, K range, token tile of N = 16 / 32);
//     the token tiles of one weight tile are neighbouring items, so they run at the same time on neighbouring CTAs
//     and all but the first read the weights from L2. A stage = those 64 rows x 256 bytes (two 128-column blocks)
//     plus the token tile's activation for the same 256 columns, both copied by every lane with 16-byte cp.async
//     completing on the stage's mbarrier; a ring of 3 stages refilled across items. The weights of the
//     first stages are requested before griddepcontrol.wait (checkpoint weights: no kernel of the stream writes
//     them), the activation after it.
//   - The B tile (K-major, the core-matrix layout of common/wgmma.cuh with 2-byte elements) is the prepared
//     activation in memory order: k16 step j of a 128-block holds prepared positions 16j .. 16j + 15, so a 16-byte
//     piece (8 positions) is one core-matrix row and needs no registers. The prepared FP8 layout stores every 4
//     columns as c0 c2 c1 c3, so logical k pair (2t, 2t + 1) of step j is columns (16j + 2t, 16j + 2t + 2) for even
//     t and (16j + 2t - 1, 16j + 2t + 1) for odd t; lane (g, t) therefore widens the 4-byte weight word at columns
//     16j + 4 * (t / 2) (pair (2t, 2t+1)) and 16j + 8 + 4 * (t / 2) (pair (2t + 8, 2t + 9)) of rows g and g + 8 and
//     keeps the bytes (0, 2) for even t, (1, 3) for odd t: one byte_perm and the hardware's exact e4m3x2 -> f16x2
//     conversion per pair.
//   - Per 128-block: eight m64nNk16 wgmmas accumulate in the tensor core, then per column one fp32 FMA with
//     (weight scale x the token's block scale); the second block's widening overlaps the first's wgmmas.
//   - Few instructions per stage (the kernel issues on ~36% of cycles with two warps per scheduler, Nsight Compute):
//     each thread's source pointers are worked out once per item, a stage adds its column offset; the wgmma
//     descriptors of a block are one base plus constants.
//   - Split-K over items (~2 items per CTA slot) with fp32 partials in the GEMM workspace; the last CTA of a
//     (row tile, token tile) sums them in split order: deterministic.
// Numerics: exact products (f16 x f16), the tensor core's fp32 sums per 128 columns, power-of-two (or fp32) scales,
// fp32 sums across blocks: the f16 GEMVs' arithmetic up to summation order.
#include "cuda/gemm/linear_catalogue.h"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/gemm/mma_core.cuh"
#include "cuda/gemm/stream_gemv.cuh"

namespace flashseek::cuda::wgmma_f16_gemv {
namespace {

constexpr int kThreads = 128;
constexpr int kRows = 64;
constexpr int kStageCols = 256;                   // two 128-column blocks per stage
constexpr int kRowStride = kStageCols + 16;       // padded: a quarter warp's A-word loads hit distinct banks
constexpr int kWeightBytes = kRows * kRowStride;  // 17,408
constexpr int kPreferredMaxTokens = 256;          // decode passes (KernelPolicy: buckets up to 256 rows)
// B tile of a stage: 16 k16 steps x N tokens x 16 k x 2 bytes; then the activation scales [2 blocks][N].
template <int N>
constexpr int act_bytes() { return 16 * 32 * N; }
template <int N>
constexpr int stage_bytes() { return kWeightBytes + act_bytes<N>() + 2 * N * 4; }
// Shared memory of S stages and the CTAs per SM it leaves room for (one warpgroup each, at most two: 167 / 168
// registers per thread at 16 / 32 tokens).
template <int N, int S>
constexpr size_t smem_bytes() { return size_t(S) * stage_bytes<N>() + size_t(S) * 8; }
template <int N, int S>
constexpr int ctas_per_sm() { return 2 * smem_bytes<N, S>() <= 227 * 1024 ? 2 : 1; }
static_assert(kWeightBytes % 128 == 0 && stage_bytes<16>() % 128 == 0 && stage_bytes<32>() % 128 == 0,
              "stage alignment");
static_assert(ctas_per_sm<16, 3>() == 2 && ctas_per_sm<32, 3>() == 2, "two CTAs per SM");

using stream_gemv::Args;

#if FS_WGMMA_AVAILABLE
using namespace bulk;

// Where item `item` lies: token tile fastest, then row tile, then K split.
struct Item {
    int tile, ntile, split;
};
__device__ __forceinline__ Item item_of(int item, int tiles, int ntiles) {
    Item it;
    it.ntile = item % ntiles;
    it.tile = (item / ntiles) % tiles;
    it.split = item / (ntiles * tiles);
    return it;
}

// The copy side of one thread: the CTA's (item, stage) sequence, walked S - 1 stages ahead of the consumer, with
// the thread's source pointers worked out once per item (a stage only adds its column offset: no division per
// stage). Thread (warp, lane) copies weight rows 8i + 2 * warp + lane / 16 (16 bytes at (lane % 16) * 16) and
// activation pieces (token warp + 4i, piece lane); threads below 2N one activation scale (block tid / N, token
// tid % N).
template <int N>
struct Cursor {
    int item, stage, end;
    int valid;           // tokens of the item's tile that exist (the rest are zero-filled)
    const uint8_t* w;    // the thread's first weight piece at stage 0
    const uint16_t* x;   // its first activation piece at stage 0
    const float* xs;     // its activation scale at stage 0

    __device__ __forceinline__ void start(const Args& a, int tiles, int ntiles, int tid) {
        const Item it = item_of(item, tiles, ntiles);
        const stream_gemv::StageRange r = stream_gemv::split_stages(a, int(a.K / kStageCols), it.split);
        stage = r.begin;
        end = r.end;
        const int warp = tid / 32, lane = tid & 31;
        w = a.w + int64_t(it.tile * kRows + 2 * warp + lane / 16) * a.K + (lane % 16) * 16;
        const int64_t col0 = int64_t(it.tile * kRows / a.rows_per_group) * a.x_group_cols;
        const int tok0 = it.ntile * N;
        valid = min(N, a.M - tok0);
        x = a.x + int64_t(tok0 + warp) * a.x_ld + col0 + 8 * lane;
        xs = a.xs + int64_t(tok0 + tid % N) * a.xs_ld + col0 / 128 + (tid / N) % 2;
    }
    // Moves to the next item with a stage left; false when the CTA has none.
    __device__ __forceinline__ bool advance(const Args& a, int n_items, int tiles, int ntiles, int tid) {
        while (item < n_items && stage >= end) {
            item += int(gridDim.x);
            if (item < n_items) start(a, tiles, ntiles, tid);
        }
        return item < n_items;
    }
    __device__ __forceinline__ void copy_weights(unsigned char* slot, const Args& a, int tid) const {
        const int warp = tid / 32, lane = tid & 31;
        unsigned char* dst = slot + (2 * warp + lane / 16) * kRowStride + (lane % 16) * 16;
        const uint8_t* src = w + int64_t(stage) * kStageCols;
#pragma unroll
        for (int i = 0; i < 8; ++i) cp_async_16(dst + 8 * i * kRowStride, src + int64_t(8 * i) * a.K);
    }
    // Token n's 16-byte piece c (prepared positions 8c .. 8c + 7 of the stage's 256 columns) is k-half c % 2 of
    // k16 step c / 2 of the B tile; then the scales [block][token].
    __device__ __forceinline__ void copy_activation(unsigned char* slot, const Args& a, int tid) const {
        const int warp = tid / 32, lane = tid & 31;
        unsigned char* tile_b = slot + kWeightBytes;
        const int64_t off = int64_t(stage) * kStageCols;
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const int n = warp + 4 * i;
            const bool ok = n < valid;
            const uint16_t* src = ok ? x + int64_t(4 * i) * a.x_ld + off : a.x;
            cp_async_cg16_zfill(tile_b + (lane / 2) * 32 * N + (n / 8) * wgmma::kSbo + (lane % 2) * wgmma::kLbo +
                                    (n % 8) * 16,
                                src, ok ? 16 : 0);
        }
        if (tid < 2 * N) {
            const bool ok = tid % N < valid;
            cp_async_ca_zfill<4>(reinterpret_cast<float*>(tile_b + act_bytes<N>()) + tid, ok ? xs + 2 * stage : a.xs,
                                 ok ? 4 : 0);
        }
    }
};

// One 128-column block: A from the stage's weights (rows 16w + g, + 8), eight accumulating wgmmas into d; desc: the
// descriptor of the block's first k16 step (the next ones 32N bytes apart: 2N in the address field).
template <int N>
__device__ __forceinline__ void issue_block(float (&d)[N / 2], uint32_t (&a)[8][4], const unsigned char* sw,
                                            uint64_t desc, int b, int warp, int g, int t) {
    const unsigned char* r_lo = sw + (16 * warp + g) * kRowStride + 128 * b + 4 * (t >> 1);
    const unsigned char* r_hi = r_lo + 8 * kRowStride;
    const uint32_t sel = (t & 1) ? 0x31u : 0x20u;  // lane t's pair of a weight word: bytes (0, 2) or (1, 3)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        a[j][0] = mma::widen_pair(*reinterpret_cast<const uint32_t*>(r_lo + 16 * j), sel);
        a[j][1] = mma::widen_pair(*reinterpret_cast<const uint32_t*>(r_hi + 16 * j), sel);
        a[j][2] = mma::widen_pair(*reinterpret_cast<const uint32_t*>(r_lo + 16 * j + 8), sel);
        a[j][3] = mma::widen_pair(*reinterpret_cast<const uint32_t*>(r_hi + 16 * j + 8), sel);
    }
    wgmma::fence();
#pragma unroll
    for (int j = 0; j < 8; ++j) wgmma::mma_f16<N>(d, a[j], wgmma::advance(desc, uint32_t(j * 32 * N)), j > 0);
    wgmma::commit();
}

#endif

template <int N, int S>
__global__ void __launch_bounds__(kThreads, (ctas_per_sm<N, S>())) wgmma_f16_gemv_kernel(const Args a) {
#if FS_WGMMA_AVAILABLE
    constexpr int SB = stage_bytes<N>();
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ uint32_t last_flag;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
    pdl_trigger();  // the next PDL kernel waits for our completion before touching our outputs
    uint64_t* const bars = reinterpret_cast<uint64_t*>(smem + size_t(S) * SB);
    if (tid < S) mbar_init_count(&bars[tid], kThreads);  // one cp.async arrival per thread
    mbar_init_fence();
    __syncthreads();

    const int tiles = int(a.N / kRows);
    const int ntiles = (a.M + N - 1) / N;
    const int n_items = tiles * ntiles * a.splits;

    Cursor<N> cur;
    cur.item = int(blockIdx.x);
    cur.stage = cur.end = 0;
    if (cur.item < n_items) cur.start(a, tiles, ntiles, tid);
    // Prologue: the weights of the first S - 1 stages before the wait (checkpoint weights), their activations after
    // it, walking the same sequence again; every prologue slot counts as a fill (with a stage or empty).
    const Cursor<N> first = cur;
    for (int i = 0; i < S - 1 && cur.advance(a, n_items, tiles, ntiles, tid); ++i) {
        cur.copy_weights(smem + size_t(i) * SB, a, tid);
        ++cur.stage;
    }
    const Cursor<N> after = cur;
    pdl_wait();
    cur = first;
    for (int i = 0; i < S - 1; ++i) {
        if (cur.advance(a, n_items, tiles, ntiles, tid)) {
            cur.copy_activation(smem + size_t(i) * SB, a, tid);
            ++cur.stage;
        }
        cp_async_mbar_arrive(&bars[i]);
    }
    cur = after;
    int q_fill = S - 1;
    auto fill = [&]() {
        const int st = q_fill % S;
        if (cur.advance(a, n_items, tiles, ntiles, tid)) {
            cur.copy_weights(smem + size_t(st) * SB, a, tid);
            cur.copy_activation(smem + size_t(st) * SB, a, tid);
            ++cur.stage;
        }
        cp_async_mbar_arrive(&bars[st]);
        ++q_fill;
    };

    int q = 0;
    for (int item = int(blockIdx.x); item < n_items; item += int(gridDim.x)) {
        const Item it = item_of(item, tiles, ntiles);
        const stream_gemv::StageRange r = stream_gemv::split_stages(a, int(a.K / kStageCols), it.split);
        const int row0 = it.tile * kRows;
        const int64_t s_row = int64_t(row0 / 128) * a.scale_ld;
        float acc[N / 2];
#pragma unroll
        for (int j = 0; j < N / 2; ++j) acc[j] = 0.f;
        for (int s = r.begin; s < r.end; ++s, ++q) {
            const int st = q % S;
            const unsigned char* stage = smem + size_t(st) * SB;
            const unsigned char* tile_b = stage + kWeightBytes;
            const float* xs = reinterpret_cast<const float*>(tile_b + act_bytes<N>());
            __syncthreads();  // every thread is done with the slot refilled below (stage q - 1: its wgmmas waited)
            fill();
            const float ws0 = stream_gemv::weight_scale(a, s_row + 2 * s);
            const float ws1 = stream_gemv::weight_scale(a, s_row + 2 * s + 1);
            mbar_wait(&bars[st], uint32_t((q / S) & 1));
            fence_proxy_async();  // the cp.async writes of B before the wgmmas' (async proxy) reads
            const uint64_t desc = wgmma::b_descriptor(smem_u32(tile_b));
            float d0[N / 2], d1[N / 2];  // overwritten by each block's first wgmma (accumulate off)
#pragma unroll
            for (int j = 0; j < N / 2; ++j) d0[j] = d1[j] = 0.f;
            uint32_t a0[8][4], a1[8][4];
            issue_block<N>(d0, a0, stage, desc, 0, warp, g, t);
            // widened while block 0 runs
            issue_block<N>(d1, a1, stage, wgmma::advance(desc, uint32_t(256 * N)), 1, warp, g, t);
            wgmma::wait<1>();
            wgmma::promote(d0, a0, acc, ws0, xs, t);
            wgmma::wait<0>();
            wgmma::promote(d1, a1, acc, ws1, xs + N, t);
        }
        stream_gemv::store_d_tile(a, acc, row0, it.ntile * N, it.split, warp, g, t);
        // Split-K: the last CTA of this (row tile, token tile) sums the partials in split order.
        const int counter = it.tile * ntiles + it.ntile;
        if (a.splits == 1 || !stream_gemv::last_split(a, counter, last_flag, tid)) continue;
        stream_gemv::sum_partials<kRows, kThreads, N>(a, row0, tid, it.ntile * N);
        if (tid == 0) a.counters[counter] = 0;
    }
    cp_async_wait_all();  // no copy of a stage nobody consumed may land after the CTA exits
#else
    __trap();
#endif
}

// The kernel for a token count: its token tile, stages, CTAs per SM and shared memory.
struct Config {
    int n, stages, ctas_per_sm;
    size_t smem;
    void (*kernel)(Args);
};
template <int N, int S>
Config config() {
    return Config{N, S, ctas_per_sm<N, S>(), smem_bytes<N, S>(), wgmma_f16_gemv_kernel<N, S>};
}
// 16-token tiles up to 16 tokens, 32-token tiles above (measured on the H200 for wo_a, in-step events, us per call at
// 64 / 128 / 256 tokens: 32-token tiles 78 / 131 / 193, 64-token tiles with one CTA per SM 92-94 / 142-143 / 192-194;
// a fourth stage changed nothing at 2-16 tokens and lost at 32: run 172 of docs/perf-log/2026-12-04_wo-a-f16-wgmma.md).
Config config_for(int64_t M) { return M <= 16 ? config<16, 3>() : config<32, 3>(); }
int cta_slots(const Config& k) { return int(current_arch().sm_count) * k.ctas_per_sm; }

}  // namespace

bool supports(const LinearCall& c) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    if (!wgmma_usable()) return false;
    if (w.kind != WeightKind::FP8_BLOCK128 || x.raw || x.layout != WeightKind::FP8_BLOCK128) return false;
    if (x.m < 1 || x.m > (int64_t(1) << 24)) return false;
    if (w.in % kStageCols != 0 || w.out % kRows != 0 || !aligned16(w.weight) || !aligned16(x.values)) return false;
    if (w.scale_kind != ScaleKind::E8M0 && w.scale_kind != ScaleKind::F32) return false;
    if (c.groups > 1 && (w.out % c.groups != 0 || (w.out / c.groups) % kRows != 0)) return false;
    return x.k_pad % 8 == 0 && w.out * int64_t(w.in) < (int64_t(1) << 31);
}

// Exact numerics (f16 activations: wo_a in every decode pass, every FP8 linear under --numerics exact) from
// KernelPolicy::wgmma_gemv_min_tokens to 256 tokens; one token keeps simt_gemv (and gemv_chain), release numerics
// the e4m3 kernels.
bool preferred(const LinearCall& c, const KernelPolicy& policy) {
    return c.x.numerics == ActNumerics::EXACT && c.x.m >= policy.wgmma_gemv_min_tokens &&
           c.x.m <= kPreferredMaxTokens;
}

LinearPlan plan(const LinearCall& c, const KernelPolicy&) {
    // ~2 items per CTA slot of the GPU (the last wave of items then costs at most a third), >= 1 stage per split.
    const Config k = config_for(c.x.m);
    const int64_t ntiles = (c.x.m + k.n - 1) / k.n;
    LinearPlan p;
    p.variant = "wgmma_f16_gemv";
    p.tokens_per_pass = k.n;
    p.k_splits = stream_gemv::plan_splits((c.w.out / kRows) * ntiles, c.w.in / kStageCols, cta_slots(k), 2, 1, c.x.m,
                                          c.w.out, c.ws);
    return p;
}

void run(const LinearCall& c, const LinearPlan& plan, const KernelPolicy&, const LinearOut& out,
         cudaStream_t stream) {
    const PreparedActivation& x = c.x;
    const DeviceLinear& w = c.w;
    const int splits = plan.k_splits;
    const Args a = stream_gemv::make_args(x, w, c.groups, out.y, out.kind, out.ld, c.ws, splits, kStageCols);
    const Config k = config_for(x.m);
    FS_REQUIRE(k.n == plan.tokens_per_pass, "wgmma_f16_gemv: plan for ", plan.tokens_per_pass, "-token tiles, run at ",
               k.n);
    const int64_t items = (w.out / kRows) * ((x.m + k.n - 1) / k.n) * splits;
    FS_REQUIRE(items < (int64_t(1) << 31), "wgmma_f16_gemv: too many work items (", items, ")");
    const int64_t ctas = std::min<int64_t>(cta_slots(k), items);
    allow_dynamic_smem(k.kernel, k.smem);
    launch_pdl("wgmma_f16_gemv_kernel", k.kernel, dim3(unsigned(ctas)), dim3(kThreads), k.smem, stream, a);
}

}  // namespace flashseek::cuda::wgmma_f16_gemv
