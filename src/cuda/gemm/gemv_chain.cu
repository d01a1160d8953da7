// The persistent two-GEMV chain (gemv_chain.cuh). Design, from the weight-stream probe's measurements
// (scripts/probes/weight_stream_probe.cu, docs/perf-log/2026-12-03_weight-stream-probe.md):
//   - One CTA per SM, 8 compute warps and one loader warp. The loader's lane 0 streams the CTA's tiles — A's, then
//     B's, without waiting for A's results — through 8 shared-memory stages with bulk copies: a tile is 16 KB of
//     whole rows (16,384 / K rows, contiguous in memory: one copy) plus the scale row of their 128-row block. Bulk
//     copies by one lane per SM streamed at 92-95% of the copy rate in the probe; per-thread loads reach ~50%.
//   - Warp per tile: item i of the CTA's list goes to compute warp i % 8 through stage i % 8 (stages = warps, so
//     each warp waits on its own stage's phase; a ring shallower than its consumers passed a wait on an old
//     phase in the probe). A tile's rows are computed with gemv_core's dot16 per 16-column piece — the lane's
//     columns lane·16 + 512 j folded in order within each K split and chunk, warp_sum, split partials summed in
//     split order from zero — so every row equals simt_gemv's bit for bit (tile_rows).
//   - Activations are staged once per CTA into shared memory (gemv_core's layout), never read per lane from global
//     memory: every warp of the grid reading the same lines was 6-17 us in the probe. A: the columns of the groups
//     the CTA's contiguous tile range covers (at most two groups of wo_a's 1,024 rows on 132 SMs).
//   - A's epilogue: lane 0 stores the tile's rows as bf16 (simt_gemv's output). After its A tiles a CTA arrives
//     once at a grid-wide counter and one thread polls it (one arrival and one poller per CTA: 1,056 pollers on one
//     word took 66 us in the probe); then every CTA prepares A's whole output for B itself while staging it
//     (prepare_block.cuh's rule: the bits prepare_activation writes) and computes its B tiles, which the loader
//     has been streaming meanwhile. (A first version counted each tile per 128-row block and had the warp that
//     completed a block prepare it in global memory: a fence and an atomic per tile on the warps' critical path and
//     a second wait; 41.5 us per layer against 46 for the two launches, slower than them inside graphs.)
//   - Co-residency: at most one CTA per SM (the launch bounds and the shared memory, checked against the opt-in
//     limit, allow one) and a cooperative launch, which fails rather than leave a CTA waiting for one that
//     cannot be resident. PDL: the loader streams weights before
//     griddepcontrol.wait (weights are constant); the compute warps wait before reading x; the dependents are
//     released only after the handover, when every CTA is resident.
// Measured (H200, docs/perf-log/2026-12-04_gemv-chain.md): V4's wo_a + wo_b in 35.5 us against 39.8 us for the two
// simt_gemv launches and the preparation (graph replays, 1.12x; 34.7 us before the launch became cooperative), but
// the one-sequence step is 0.14-0.16 ms slower with it, so the backend runs it only where forced. The SIMT arithmetic runs at about the copy rate with 8 compute warps
// per SM, so the handover's stalls (stragglers of the static tile ranges, the barrier, B's staging: 5-6 us with
// every ring full) add to the total instead of hiding.
// sm_90+ (bulk copies, mbarrier transaction counts); elsewhere the kernel is empty and the host refuses.
#include "cuda/gemm/gemv_chain.cuh"

#include <algorithm>

#include "cuda/common/alignment.h"
#include "cuda/common/arch.cuh"
#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/common/warp_reduce.cuh"
#include "cuda/gemm/gemv_core.cuh"
#include "cuda/gemm/prepare_block.cuh"
#include "cuda/norm/rms_row.cuh"

namespace flashseek::cuda {
namespace {

constexpr int kComputeWarps = 8;
constexpr int kStages = kComputeWarps;  // warp w consumes stage w only
constexpr int kThreads = 32 * (kComputeWarps + 1);
constexpr int kTileBytes = 16384;
constexpr int kMaxScaleBytes = 256;  // a 128-row block's scale row: K / 128 entries (E8M0 bytes or fp32)
constexpr int kStageBytes = kTileBytes + kMaxScaleBytes;

// One GEMV of the chain as the kernel reads it.
struct ChainOp {
    const uint8_t* w;
    const uint8_t* scale;
    int scale_f32;          // ScaleKind::F32, else E8M0 bytes
    int64_t n, k;           // rows, columns (= bytes per row)
    int scale_row_bytes;    // one 128-row block's scale row
    int rows_per_tile;      // kTileBytes / k
    int tiles;
    int64_t k_per_split;    // simt_gemv's split width (a multiple of 128)
    int chunk_cols;         // simt_gemv's staged columns per pass within a split
    int splits;
};

struct ChainArgs {
    ChainOp a, b;
    const uint16_t* x;      // A's prepared input, row 0
    const float* xs;
    int64_t rows_per_group, x_group_cols;  // grouped A: rows per group, input columns per group (0: not grouped)
    uint16_t* mid;
    uint16_t* mid_values;
    float* mid_scales;
    const uint16_t* norm_w;  // null: A's output is prepared as it is
    float norm_eps;
    uint16_t* mid_normed;
    int numerics_b;
    void* y;
    int y_f32;
    uint32_t* counters;     // [CTAs arrived at the handover], [CTAs past it]
    int64_t* trace;         // null, or kTracePoints globaltimer stamps per CTA (gemv_chain.cuh)
};

// Staged activation floats for `cols` columns (gemv_core's padded lane chunks).
constexpr int64_t staged_floats(int64_t cols) { return cols / 16 * 20; }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr int kComputeBarrier = 1;  // named barrier of the compute warps (the loader never joins it)
constexpr int kTracePoints = kGemvChainTracePoints;

// The tiles [first, end) of `tiles` dealt to CTA `cta` of `grid`: contiguous ranges.
__device__ __forceinline__ int tile_begin(int tiles, int cta, int grid) { return int(int64_t(tiles) * cta / grid); }

__device__ __forceinline__ void compute_barrier() {
    asm volatile("bar.sync %0, %1;" ::"n"(kComputeBarrier), "n"(kComputeWarps * 32) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Where a tile's scale row travels: the 16-byte aligned window of the scale array that holds the row of its 128-row
// block (bulk copies move whole 16-byte units from 16-byte aligned addresses). A row of 16 bytes or more is its own
// window; a shorter one (E8M0 scales of K <= 1,024: 8 bytes or fewer) shares its window with a neighbour's row,
// which the check keeps inside the array and never across a window boundary.
struct ScaleWindow {
    int64_t start;   // byte offset of the window in the scale array
    uint32_t bytes;  // window size (a multiple of 16)
    int offset;      // the row's first byte within the window
};
__host__ __device__ __forceinline__ ScaleWindow scale_window(int64_t row0, int scale_row_bytes) {
    const int64_t first = (row0 / 128) * scale_row_bytes, end = first + scale_row_bytes;
    const int64_t start = first & ~int64_t(15);
    return {start, uint32_t(((end + 15) & ~int64_t(15)) - start), int(first - start)};
}

// Four bf16 values packed in a uint2 (the lane's 8 bytes of a 128-block), in order.
__device__ __forceinline__ void unpack_bf16x4(const uint2& raw, float (&f)[4]) {
    f[0] = bf16_bits_to_f32(uint16_t(raw.x & 0xffffu));
    f[1] = bf16_bits_to_f32(uint16_t(raw.x >> 16));
    f[2] = bf16_bits_to_f32(uint16_t(raw.y & 0xffffu));
    f[3] = bf16_bits_to_f32(uint16_t(raw.y >> 16));
}

// mma::load_scale's value from the staged scale row (shared memory): the same conversion.
__device__ __forceinline__ float staged_scale(const unsigned char* row, int f32, int64_t idx) {
    return f32 ? reinterpret_cast<const float*>(row)[idx] : e8m0_to_f32(row[idx]);
}

__device__ __forceinline__ int64_t globaltimer() {
    int64_t t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
// Thread 0 of the CTA records point p (GemvChain::trace lists them) when tracing.
__device__ __forceinline__ void trace_point(const ChainArgs& a, int p) {
    if (a.trace && threadIdx.x == 0) a.trace[int64_t(blockIdx.x) * kTracePoints + p] = globaltimer();
}

// The compute warps: A's bf16 output (every CTA's rows, visible after the handover) prepared for B's weight layout
// and numerics — prepare_block.cuh's rule, the bits prepare_activation writes — straight into B's staged
// activation (gemv_core's layout, value x scale as stage_x computes it). Every CTA prepares the whole row for
// itself (64 blocks of 128 at V4's 8,192: a few instructions per value) instead of a second grid-wide handover;
// block b's prepared values and scale also go to global memory from CTA b % grid (what prepare() would leave).
// Warp w takes blocks w, w + 8, ...; all its loads are issued first (one round trip).
// With a norm (a.norm_w), every warp first computes the row's 1 / rms for itself, as rmsnorm's vector path does for
// one row (its lanes' 16-byte chunks lane + 32 v, rms_row's order: the same bits), and each value becomes
// bf16(x · r · w) before the preparation; the publishing CTA also stores the normed bf16 values (mid_normed).
__device__ __forceinline__ void stage_prepared_mid(const ChainArgs& a, float* xst, int warp, int lane) {
    constexpr int kMaxBlocksPerWarp = 8;  // b.k <= 8,192
    constexpr int kMaxNormChunks = 8;     // with a norm, b.k <= 2,048: 8 chunks of 8 values per lane
    constexpr WeightKind FP8 = WeightKind::FP8_BLOCK128;
    const int blocks = int(a.b.k / 128);
    uint2 raw[kMaxBlocksPerWarp], wraw[kMaxBlocksPerWarp];
    uint4 row[kMaxNormChunks];
    const int n8 = int(a.b.k / 8);
    if (a.norm_w) {  // uniform (a kernel argument)
#pragma unroll
        for (int v = 0; v < kMaxNormChunks; ++v)
            if (lane + 32 * v < n8) row[v] = __ldcg(reinterpret_cast<const uint4*>(a.mid) + lane + 32 * v);
    }
#pragma unroll
    for (int j = 0; j < kMaxBlocksPerWarp; ++j) {
        const int b = warp + j * kComputeWarps;
        if (b >= blocks) continue;
        raw[j] = __ldcg(reinterpret_cast<const uint2*>(a.mid + int64_t(b) * 128) + lane);
        if (a.norm_w) wraw[j] = __ldg(reinterpret_cast<const uint2*>(a.norm_w + int64_t(b) * 128) + lane);
    }
    float r = 1.f;
    if (a.norm_w) {
        float ss = 0.f;
#pragma unroll
        for (int v = 0; v < kMaxNormChunks; ++v)
            if (lane + 32 * v < n8) ss = rms_row::add_chunk_squares(row[v], ss);
        r = rms_row::inverse_rms(ss, int(a.b.k), a.norm_eps);
    }
    float v[kMaxBlocksPerWarp][4], amax[kMaxBlocksPerWarp];
#pragma unroll
    for (int j = 0; j < kMaxBlocksPerWarp; ++j) {  // the blocks' reductions interleaved (independent shuffles)
        amax[j] = 0.f;
        if (warp + j * kComputeWarps >= blocks) continue;
        unpack_bf16x4(raw[j], v[j]);
        if (a.norm_w) {
            float w[4];
            unpack_bf16x4(wraw[j], w);
            uint32_t bits[4];  // the normed values as bf16, as rmsnorm stores them
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                bits[i] = f32_to_bf16_bits(rms_row::normed(v[j][i], r, true, w[i]));
                v[j][i] = bf16_bits_to_f32(uint16_t(bits[i]));
            }
            const int b = warp + j * kComputeWarps;
            if (b % int(gridDim.x) == int(blockIdx.x))
                reinterpret_cast<uint2*>(a.mid_normed + int64_t(b) * 128)[lane] =
                    make_uint2(bits[0] | bits[1] << 16, bits[2] | bits[3] << 16);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) amax[j] = fmaxf(amax[j], fabsf(v[j][i]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int j = 0; j < kMaxBlocksPerWarp; ++j) amax[j] = fmaxf(amax[j], __shfl_xor_sync(0xffffffffu, amax[j], o));
#pragma unroll
    for (int j = 0; j < kMaxBlocksPerWarp; ++j) {
        const int b = warp + j * kComputeWarps;
        if (b >= blocks) break;
        const float sc = prepared_block_scale(amax[j], a.numerics_b), inv = 1.f / sc;
        const bool publish = b % int(gridDim.x) == int(blockIdx.x);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int pos = mma::prepared_pos(FP8, 4 * lane + i), col = b * 128 + pos;
            const uint16_t bits = prepared_value_bits(v[j][i], inv, a.numerics_b);
            xst[(col / 16) * gemv::lane_stride<FP8>() + col % 16] = __half2float(__ushort_as_half(bits)) * sc;
            if (publish) a.mid_values[col] = bits;
        }
        if (publish && lane == 0) a.mid_scales[b] = sc;
    }
}

// One warp: the rows of one staged tile (whole rows, `tile`, with its scale row `srow`) against the staged
// activation `xst` (column 0 of the tile's input), S rows at a time, simt_gemv's arithmetic per row; `store(r, v)`
// receives row r of the tile (every lane holds v). A lane's 16-column pieces j (columns lane·16 + 512 j of a split's
// chunk) are gemv_core's dot16 each, folded into the row's sum with fmaf(piece, scale · 2^8, sum) in increasing j —
// simt_gemv's order (compute_weights) — but PJ pieces' dot products are computed before they are folded: they are
// independent, and with 8 warps per SM (half of simt_gemv's 16) latency hiding must come from within the warp
// (B's phase 14.8 -> 13.7 us, runs 160-161; a tile still takes a warp 3.9-5.0 us: the arithmetic is the limit).
template <int S, int PJ, class Store>
__device__ __forceinline__ void tile_rows(const ChainOp& op, const unsigned char* tile, const unsigned char* srow,
                                          const float* xst, int lane, Store store) {
    constexpr WeightKind FP8 = WeightKind::FP8_BLOCK128;
    constexpr int CPL = gemv::cols_per_lane<FP8>(), WARP_COLS = 32 * CPL, LS = gemv::lane_stride<FP8>();
    for (int rb = 0; rb < op.rows_per_tile; rb += S) {
        const unsigned char* rows = tile + int64_t(rb) * op.k;
        float total[S];
#pragma unroll
        for (int r = 0; r < S; ++r) total[r] = 0.f;
        for (int s = 0; s < op.splits; ++s) {
            const int k_begin = int(int64_t(s) * op.k_per_split), k_end = int(min(op.k, k_begin + op.k_per_split));
            float acc[S];
#pragma unroll
            for (int r = 0; r < S; ++r) acc[r] = 0.f;
            for (int k0 = k_begin; k0 < k_end; k0 += op.chunk_cols) {
                const int len = min(op.chunk_cols, k_end - k0);
                for (int j0 = 0; j0 * WARP_COLS < len; j0 += PJ) {
                    float p[S][PJ], sc[PJ];
#pragma unroll
                    for (int jj = 0; jj < PJ; ++jj) {
                        const int col = (j0 + jj) * WARP_COLS + lane * CPL;
                        if (col >= len) continue;
                        const int kabs = k0 + col;
                        sc[jj] = staged_scale(srow, op.scale_f32, kabs / 128) * 256.f;
                        float xv[16];
                        const float4* src = reinterpret_cast<const float4*>(xst + (kabs / CPL) * LS);
#pragma unroll
                        for (int q = 0; q < 4; ++q) {
                            const float4 f = src[q];
                            xv[4 * q + 0] = f.x;
                            xv[4 * q + 1] = f.y;
                            xv[4 * q + 2] = f.z;
                            xv[4 * q + 3] = f.w;
                        }
#pragma unroll
                        for (int r = 0; r < S; ++r) {
                            const uint4 w = *reinterpret_cast<const uint4*>(rows + int64_t(r) * op.k + kabs);
                            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
                            p[r][jj] = gemv::dot16<FP8>(words, xv);
                        }
                    }
#pragma unroll
                    for (int jj = 0; jj < PJ; ++jj) {
                        if ((j0 + jj) * WARP_COLS + lane * CPL >= len) continue;
#pragma unroll
                        for (int r = 0; r < S; ++r) acc[r] = fmaf(p[r][jj], sc[jj], acc[r]);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < S; ++r) {
                const float part = warp_sum(acc[r]);
                total[r] = op.splits == 1 ? part : total[r] + part;  // simt_gemv: partials summed from zero in order
            }
        }
#pragma unroll
        for (int r = 0; r < S; ++r) store(rb + r, total[r]);
    }
}
#endif

template <int SA, int SB>
__global__ void __launch_bounds__(kThreads, 1) gemv_chain_kernel(const ChainArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + size_t(kStages) * kStageBytes);
    uint64_t* empty = full + kStages;
    float* xst = reinterpret_cast<float*>(empty + kStages);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int grid = gridDim.x, cta = blockIdx.x;
    const int a_first = tile_begin(a.a.tiles, cta, grid), a_end = tile_begin(a.a.tiles, cta + 1, grid);
    const int b_first = tile_begin(a.b.tiles, cta, grid), b_end = tile_begin(a.b.tiles, cta + 1, grid);
    const int n_a = a_end - a_first, n_items = n_a + (b_end - b_first);
    if (threadIdx.x < kStages) {
        mbar::mbar_init_count(&full[threadIdx.x], 1);
        mbar::mbar_init_count(&empty[threadIdx.x], 1);
    }
    bulk::mbar_init_fence();
    __syncthreads();

    if (warp == kComputeWarps) {  // the loader: weights and scales are constant, so no pdl_wait
        if (lane == 0) {
            for (int i = 0; i < n_items; ++i) {
                const int s = i % kStages;
                if (i >= kStages) mbar::mbar_wait(&empty[s], uint32_t((i / kStages - 1) & 1));
                const bool in_a = i < n_a;
                const ChainOp& op = in_a ? a.a : a.b;
                const int64_t row0 = int64_t(in_a ? a_first + i : b_first + (i - n_a)) * op.rows_per_tile;
                unsigned char* dst = smem + size_t(s) * kStageBytes;
                const ScaleWindow sw = scale_window(row0, op.scale_row_bytes);
                bulk::mbar_expect_tx(&full[s], uint32_t(kTileBytes) + sw.bytes);
                bulk::copy_g2s(dst, op.w + row0 * op.k, kTileBytes, &full[s]);
                bulk::copy_g2s(dst + kTileBytes, op.scale + sw.start, sw.bytes, &full[s]);
            }
            if (a.trace) a.trace[int64_t(blockIdx.x) * kTracePoints + 6] = globaltimer();
        }
        return;  // the compute warps wait for every stage they read, so no copy outlives the CTA
    }

    pdl_wait();  // x was written by an earlier kernel; mid, y and the counters may be read by one
    trace_point(a, 0);
    // A's input: the columns of the groups this CTA's rows belong to.
    int64_t g0 = 0;
    if (n_a > 0) {
        const int64_t r_first = int64_t(a_first) * a.a.rows_per_tile, r_last = int64_t(a_end) * a.a.rows_per_tile - 1;
        g0 = a.x_group_cols ? r_first / a.rows_per_group : 0;
        const int64_t g1 = a.x_group_cols ? r_last / a.rows_per_group : 0;
        gemv::stage_x_threads<WeightKind::FP8_BLOCK128, 1, 4>(
            xst, 0, a.x, 0, a.xs, 0, g0 * a.x_group_cols, int((g1 - g0 + 1) * a.a.k), [](int) { return int64_t(0); },
            int(threadIdx.x), kComputeWarps * 32);
    }
    compute_barrier();

    trace_point(a, 1);
    for (int i = warp; i < n_a; i += kComputeWarps) {
        const int s = i % kStages;
        mbar::mbar_wait(&full[s], uint32_t((i / kStages) & 1));
        if (i == 0) trace_point(a, 7);
        const unsigned char* tile = smem + size_t(s) * kStageBytes;
        const int64_t row0 = int64_t(a_first + i) * a.a.rows_per_tile;
        const int64_t g = a.x_group_cols ? row0 / a.rows_per_group : 0;
        const unsigned char* srow = tile + kTileBytes + scale_window(row0, a.a.scale_row_bytes).offset;
        tile_rows<SA, 16 / SA>(a.a, tile, srow, xst + staged_floats((g - g0) * a.a.k), lane, [&](int r, float v) {
            if (lane == 0) a.mid[row0 + r] = f32_to_bf16_bits(v);
        });
        if (i == 0) trace_point(a, 8);
        __syncwarp();
        if (lane == 0) mbar::mbar_arrive(&empty[s]);
    }

    // Handover: one arrival and one poller per CTA (a grid barrier), after which every CTA reads A's whole output.
    compute_barrier();
    trace_point(a, 2);
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(&a.counters[0], 1u);
        while (load_acquire(&a.counters[0]) < uint32_t(grid)) __nanosleep(32);
        __threadfence();
    }
    compute_barrier();
    trace_point(a, 3);
    pdl_trigger();  // every CTA of the grid is resident now: the next kernel may start launching
    stage_prepared_mid(a, xst, warp, lane);
    compute_barrier();
    trace_point(a, 4);

    for (int i = n_a + (warp - n_a % kComputeWarps + kComputeWarps) % kComputeWarps; i < n_items;
         i += kComputeWarps) {
        const int s = i % kStages;
        mbar::mbar_wait(&full[s], uint32_t((i / kStages) & 1));
        const bool first_b = i < n_a + kComputeWarps;
        if (first_b) trace_point(a, 9);
        const unsigned char* tile = smem + size_t(s) * kStageBytes;
        const int64_t row0 = int64_t(b_first + (i - n_a)) * a.b.rows_per_tile;
        const unsigned char* srow = tile + kTileBytes + scale_window(row0, a.b.scale_row_bytes).offset;
        tile_rows<SB, 16 / SB>(a.b, tile, srow, xst, lane, [&](int r, float v) {
            if (lane != 0) return;
            if (a.y_f32)
                reinterpret_cast<float*>(a.y)[row0 + r] = v;
            else
                reinterpret_cast<uint16_t*>(a.y)[row0 + r] = f32_to_bf16_bits(v);
        });
        if (first_b) trace_point(a, 10);
        __syncwarp();
        if (lane == 0) mbar::mbar_arrive(&empty[s]);
    }
    if (threadIdx.x == 0 && atomicAdd(&a.counters[1], 1u) == uint32_t(grid - 1)) {
        a.counters[0] = 0;  // every CTA is past the handover's poll: leave the counters zeroed
        a.counters[1] = 0;
    }
    if (a.trace) {  // uniform: a kernel argument
        compute_barrier();
        trace_point(a, 5);
    }
#endif
}

using ChainKernel = void (*)(ChainArgs);
ChainKernel pick_kernel(int rows_a, int rows_b) {
    const bool a4 = rows_a % 4 == 0, b4 = rows_b % 4 == 0;
    if (a4) return b4 ? gemv_chain_kernel<4, 4> : gemv_chain_kernel<4, 2>;
    return b4 ? gemv_chain_kernel<2, 4> : gemv_chain_kernel<2, 2>;
}

int64_t scale_row_bytes(const DeviceLinear& w) { return (w.in / 128) * (w.scale_kind == ScaleKind::F32 ? 4 : 1); }

// The op as the kernel reads it; `splits` from simt_gemv's plan, the split width and chunk as simt_gemv derives them.
ChainOp chain_op(const DeviceLinear& w, int splits) {
    ChainOp op{};
    op.w = static_cast<const uint8_t*>(w.weight);
    op.scale = static_cast<const uint8_t*>(w.scale);
    op.scale_f32 = w.scale_kind == ScaleKind::F32;
    op.n = w.out;
    op.k = w.in;
    op.scale_row_bytes = int(scale_row_bytes(w));
    op.rows_per_tile = int(kTileBytes / w.in);
    op.tiles = int(w.out / op.rows_per_tile);
    const int64_t n_steps = w.in / 128;
    op.k_per_split = ((n_steps + splits - 1) / splits) * 128;
    op.chunk_cols = gemv::chunk_columns(WeightKind::FP8_BLOCK128, 1, op.k_per_split);
    op.splits = splits;
    return op;
}

// A's rows are dealt in contiguous ranges: the most groups one CTA's range can span.
int64_t max_groups_spanned(const ChainOp& a, int64_t rows_per_group, int grid) {
    const int64_t rows = (int64_t(a.tiles) + grid - 1) / grid * a.rows_per_tile;
    return std::min<int64_t>((rows + rows_per_group - 1) / rows_per_group + 1, a.n / rows_per_group);
}

// One CTA per SM (launch bounds and the shared memory allow one, and grid <= SMs keeps every CTA resident at once)
// but the free_sms left to other grids, never more CTAs than either op has tiles.
int chain_grid(const GemvChain& c) {
    const int sms = std::max(1, current_arch().sm_count - std::max(0, c.free_sms));
    return std::min({sms, chain_op(c.a, 1).tiles, chain_op(c.b, 1).tiles});
}

size_t chain_smem(const GemvChain& c, int grid) {
    const ChainOp a = chain_op(c.a, 1);
    const int64_t rows_per_group = c.a.out / c.groups;
    const int64_t a_cols = c.groups > 1 ? max_groups_spanned(a, rows_per_group, grid) * c.a.in : c.a.in;
    return size_t(kStages) * kStageBytes + size_t(2 * kStages) * 8 +
           size_t(staged_floats(std::max<int64_t>(a_cols, c.b.in))) * 4;
}

std::string check_weight(const DeviceLinear& w, const char* name) {
    const std::string n(name);
    if (w.kind != WeightKind::FP8_BLOCK128) return n + ": only FP8_BLOCK128 weights";
    if (w.scale_kind != ScaleKind::E8M0 && w.scale_kind != ScaleKind::F32) return n + ": scale kind must be E8M0 or F32";
    if (w.in < 256 || w.in > 8192 || kTileBytes % w.in != 0)
        return n + ": columns must divide 16,384 and lie in 256..8,192 (whole rows per 16 KB tile, >= 2 rows)";
    if (w.out % 128 != 0) return n + ": rows must be a multiple of 128";
    const int64_t sb = scale_row_bytes(w);
    if (sb > kMaxScaleBytes || (sb % 16 != 0 && 16 % sb != 0) || (w.out / 128) * sb % 16 != 0)
        return n + ": a 128-row block's scale row must divide 16 bytes or be a multiple of 16 (at most 256), and the "
                   "scale array a multiple of 16 bytes";
    if (!aligned16(w.weight) || !aligned16(w.scale)) return n + ": weight and scale must be 16-byte aligned";
    return {};
}

}  // namespace

std::string gemv_chain_refusal(const GemvChain& c) {
    if (current_arch().cc < 90) return "device: the chain needs sm_90+ (bulk copies)";
    if (!c.x) return "x: missing";
    const PreparedActivation& x = *c.x;
    if (x.m != 1 || x.raw || x.format != ActFormat::MMA_F16 || x.layout != WeightKind::FP8_BLOCK128)
        return "x: one prepared row in the MMA_F16 format for FP8 weights";
    if (!aligned16(x.values)) return "x: values must be 16-byte aligned";
    if (std::string e = check_weight(c.a, "a"); !e.empty()) return e;
    if (std::string e = check_weight(c.b, "b"); !e.empty()) return e;
    if (c.groups < 1 || c.a.out % c.groups != 0) return "groups: must divide a's rows";
    const int64_t rows_per_group = c.a.out / c.groups;
    if (rows_per_group % (kTileBytes / c.a.in) != 0) return "groups: a group's rows must be whole tiles";
    if (x.k != c.a.in * c.groups) return "x: width must be groups x a's columns";
    if (c.b.in != c.a.out) return "b: columns must equal a's rows";
    if (c.splits_a < 1 || c.splits_b < 1 || c.splits_a > c.a.in / 128 || c.splits_b > c.b.in / 128)
        return "splits: 1 .. columns / 128";
    if (!c.mid || !c.mid_values || !c.mid_scales || !aligned16(c.mid) || !aligned16(c.mid_values))
        return "mid: bf16 output and prepared storage needed (16-byte aligned)";
    if (c.norm_weight) {
        if (c.groups != 1 || c.b.in > 2048) return "norm_weight: a norm needs groups 1 and at most 2,048 rows of a";
        if (!aligned16(c.norm_weight)) return "norm_weight: must be 16-byte aligned";
        if (!c.mid_normed || !aligned16(c.mid_normed) || c.mid_normed == c.mid)
            return "mid_normed: the normed output needs its own 16-byte aligned storage";
    }
    if (!c.y) return "y: missing";
    if (!c.counters || c.n_counters < gemv_chain_counters(c)) return "counters: fewer than gemv_chain_counters()";
    const int grid = chain_grid(c);
    if (chain_smem(c, grid) > size_t(current_arch().max_smem_per_block_optin))
        return "shared memory: the staged inputs do not fit";
    return {};
}

int gemv_chain_grid(const GemvChain& c) { return chain_grid(c); }

void gemv_chain(const GemvChain& c, cudaStream_t stream) {
    const std::string why = gemv_chain_refusal(c);
    FS_REQUIRE(why.empty(), "gemv_chain: ", why);
    ChainArgs a{};
    a.a = chain_op(c.a, c.splits_a);
    a.b = chain_op(c.b, c.splits_b);
    a.x = c.x->values;
    a.xs = c.x->scales;
    a.rows_per_group = c.a.out / c.groups;
    a.x_group_cols = c.groups > 1 ? c.a.in : 0;
    a.mid = c.mid;
    a.mid_values = c.mid_values;
    a.mid_scales = c.mid_scales;
    a.norm_w = c.norm_weight;
    a.norm_eps = c.norm_eps;
    a.mid_normed = c.mid_normed;
    a.numerics_b = int(c.numerics_b);
    a.y = c.y;
    a.y_f32 = c.y_kind == OutKind::F32;
    a.counters = c.counters;
    a.trace = c.trace;
    const ChainKernel k = pick_kernel(a.a.rows_per_tile, a.b.rows_per_tile);
    const int grid = chain_grid(c);
    const size_t smem = chain_smem(c, grid);
    allow_dynamic_smem(k, smem);
    // Cooperative: the CTAs wait for each other at the handover, so a device offering fewer SMs than it has (MPS,
    // other work resident) must fail the launch instead of hanging.
    launch_attrs("gemv_chain_kernel", true, k, dim3(unsigned(grid)), dim3(kThreads), smem, stream, a);
}

}  // namespace flashseek::cuda
