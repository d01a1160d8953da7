// Compute-bound dense GEMM on sm_90a (prefill and large batches): FP8 block-scaled (DeepSeek's 1x128 activation
// x 128x128 weight scales) and BF16, D[m, n] = A[m, k] . W[n, k]^T, written for this project after DeepGEMM's
// sm90 "1d2d" FP8 kernel design (read, not copied).
// Why our own kernel and not CUTLASS's sm90 blockwise-scaled GEMM: CUTLASS is not a dependency of the project and
// one of its warp-specialized instantiations costs minutes of nvcc time per architecture on CI's 2 cores; its
// scale layouts and epilogues would still need adapting (E8M0 weight scales, our act_quant layout, the fused
// SwiGLU / routing-weight epilogue of the expert GEMM that shares this design); and every output element here is
// computed in a fixed order that does not depend on M or the tile shape, which keeps a token's result
// independent of how its prompt is chunked (batch invariance, issue 15 item 6).
// Design:
//   - Warp specialization, 384 threads: warpgroup 0 is the producer (one thread issues TMA loads; the warpgroup
//     gives its registers back with setmaxnreg), warpgroups 1 and 2 are the math warpgroups (232 registers each).
//   - CTA tile BM x 128: BM = 256 for large problems (each math warpgroup two 64-row waves x 128 columns, wgmma
//     m64n128, one accumulator set reused by the waves, as DeepGEMM's "wave" blocks: a quarter less L2 -> shared
//     traffic per FLOP than 128 x 128), BM = 128 (one wave each) when 256-row tiles would not fill the SMs, BM = 64
//     for small problems (each warpgroup 64 rows x 64 columns: m64n64), so that twice as many tiles fill the GPU.
//     setmaxnreg lets the math code use 232 registers (ptxas allocates the branch after setmaxnreg.inc with that
//     limit; the launch reports the 168 of 384 threads).
//   - K in stages of 128 bytes (128 e4m3 = one scale block, or 64 bf16): A tile, B tile and (FP8) the A scales of
//     the stage's rows, one TMA box each, 128-byte swizzle, 4 / 6 / 8 stages (BM = 256 / 128 / 64) in a ring with
//     full / empty mbarriers (the producer waits for a free stage, the math warps arrive once their wgmmas on it
//     completed).
//   - FP8 promotion (DeepGEMM style): per stage four wgmma k32 accumulate the block's partial in the tensor core
//     (its FP8 sums are not fp32-exact over many k steps), then in fp32 final += partial * (sa[row] * sw), in
//     K order. BF16: the wgmmas accumulate the whole K in the tensor core (fp32), one stage kept in flight.
//   - Persistent CTAs (one per SM, 200 KB of shared memory each): tile i of the grouped order
//     (dense_gemm_problem.cuh tile_coords) on CTA i mod grid; the producer runs ahead into the next tile while
//     the math warpgroups store the previous one. The first tile's weight stages are requested before the PDL
//     wait (weights are never written by an earlier kernel), its activation and scales after it.
//   - FP8 weight scales (one per 128 x 128 block) are held 32 stages per warp, lane i the scale of stage i, the
//     next 32 loaded behind them, and broadcast with a shuffle: one L2 round trip per tile. Loaded one stage ahead,
//     every stage of a decode-sized tile (a few microseconds of streaming) waited for its scale.
//   - Split-K (decode, Problem::k_splits, 64-row tiles): tile = (output tile, K range of whole 128-blocks); each
//     range's fp32 results go to the workspace's partials and the output tile's last CTA to arrive (an atomic
//     counter) sums them in range order and stores the output: deterministic, and a row's sum does not depend on
//     the other rows. The linear catalogue's fp8_gemm_splitk uses it where 128-column tiles fill at most half the
//     SMs (wo_b at 2-16 rows).
//   - Epilogue, bf16 output with 16-byte rows (ldd and n multiples of 8, d 16-byte aligned), TILE_STORE (the
//     default, Problem::tma_store): the whole output tile is staged in shared memory (each math warp's 16-row pieces
//     written with stmatrix at the 128-byte swizzle's positions) and lane 0 of each warp stores its pieces by TMA,
//     one per stage of the next tile (PendingPieces), so no math warp waits for a store; the staging costs a
//     pipeline stage. The values are converted with cvt.rn.bf16x2 (bf16_pair): in integer arithmetic the conversion
//     was ~1,000 instructions per thread and tile, a fifth of wq_b's time (stall sampling, run 136 of
//     docs/perf-log/2026-12-03_tma-store-epilogue.md). Without TILE_STORE each math warp writes
//     its 16 rows x 64 columns at a time into its own shared block with stmatrix (the accumulator fragment is the
//     matrix layout stmatrix takes), reads them back as 16-byte row pieces and stores four full 128-byte row
//     segments per warp instruction. Straight from registers (two adjacent columns per 4-byte store, a warp's
//     store touching 8 rows x 16 bytes) the epilogue took 45% of the math warps' time at K = 1,024 (wq_b) and 17%
//     at larger K (clock64 split of a 4,096-token prefill, docs/perf-log/2026-12-02_interleaved-experts.md). Other
//     outputs (fp32, unaligned) still store from registers. Or the act_quant rows of the bf16 output (q_codes:
//     wo_a into wo_b's input): with 128 columns per math warpgroup a thread's 32 values of a row lie in one scale
//     block, so the block amax is a quad reduction; the codes go through the same staging block. Rows >= m and columns >= n are skipped; TMA fills
//     out-of-bounds A / B / scale elements with zeros, so partial tiles in M, N and K need no other care.
// Builds for every architecture; the bodies exist only in the sm_90a build (FS_WGMMA_AVAILABLE), elsewhere the
// kernels compile to a trap and dense_gemm.cu never launches them.
#include <cuda.h>

#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/dense_gemm_problem.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/split_sum.cuh"
#include "cuda/gemm/tensor_map.h"
#include "cuda/gemm/tma.cuh"
#include "cuda/gemm/wgmma_ss.cuh"

namespace flashseek::cuda::dense_gemm {
namespace {

constexpr int kThreads = 384;  // producer warpgroup + two math warpgroups

// The epilogue's per-warp staging block: 16 rows x 64 bf16, rows padded to 144 bytes (an 8 x 8 stmatrix's rows
// then fall on distinct bank quads).
constexpr int kEpiloguePitch = 144;
constexpr int kEpilogueWarpBytes = 16 * kEpiloguePitch;

// Shared memory, in this order: the stages' A tiles, their B tiles, the epilogue's staging (TILE_STORE: the whole
// BM x 128 bf16 output tile, two 64-column halves of BM rows x 128 bytes with the 128-byte swizzle, 1024-byte
// aligned; else the per-warp blocks), the stages' A scales, the full / empty barriers. The output tile costs stages:
// 3 instead of 4 at BM = 256, 5 instead of 6 at BM = 128 (FP8).
template <bool FP8, int BM, bool TILE_STORE>
struct Sm90Config {
    static constexpr int kATile = BM * kStageKBytes;
    static constexpr int kBTile = kBlockN * kStageKBytes;
    static constexpr int kScaleBytes = FP8 ? BM * 4 : 0;
    static constexpr int kStages = !TILE_STORE ? (BM == 256 ? 4 : BM == 128 ? 6 : 8)
                                               : (BM == 256 ? 3 : BM == 128 ? (FP8 ? 5 : 6) : 8);
    static constexpr size_t kEpilogueOffset = size_t(kStages) * (kATile + kBTile);
    static constexpr size_t kEpilogueBytes = TILE_STORE ? size_t(BM) * 2 * kBlockN : size_t(8) * kEpilogueWarpBytes;
    static constexpr size_t kScaleOffset = kEpilogueOffset + kEpilogueBytes;
    static constexpr size_t kBarrierOffset = kScaleOffset + size_t(kStages) * kScaleBytes;
    static constexpr size_t kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;  // + alignment
    static_assert(kATile % 1024 == 0 && kBTile % 1024 == 0, "swizzle atoms need 1024-byte aligned tiles");
    static_assert(kEpilogueBytes % 128 == 0, "TMA boxes of the scales need 128-byte aligned destinations");
    static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");
};

struct Sm90Params {
    CUtensorMap map_a, map_b, map_sa;
    CUtensorMap map_d;  // TILE_STORE: the bf16 output [m, groups * n] in boxes of 16 rows x 64 columns
    const void* w_scales;
    int64_t w_scales_ld;  // ceil(k / 128)
    void* d;
    int64_t ldd;
    int m, n, k, k_blocks, m_blocks, n_blocks, tiles;  // n, k, k_blocks per group
    int groups;
    int w_scales_f32, d_f32, d_vector;
    int d_rows16;  // bf16 output, ldd and n multiples of 8, d 16-byte aligned: the staged epilogue
    uint8_t* q_codes;  // or the act_quant rows of the bf16 output (dense_gemm_problem.cuh; block_m 128 / 256)
    int64_t q_codes_ld;
    float* q_scales;
    int64_t q_scales_ld;
    // Split-K (decode): tiles = base_tiles x k_splits, split = tile / base_tiles sums its range of 128-K blocks into
    // fp32 partials [k_splits][m][groups * n]; the base tile's last CTA (counters) sums them in split order.
    int k_splits, base_tiles;
    float* partials;
    uint32_t* counters;
    int weights_early;  // the first tile's weight stages requested before the PDL wait (checkpoint weights only)
};

#if FS_WGMMA_AVAILABLE
constexpr int kMathWarps = 8;
constexpr int kProducerRegisters = 40;
constexpr int kMathRegisters = 232;

// Per-configuration constants of the kernel body.
template <bool FP8, int BM, bool TILE_STORE>
struct Sm90Body {
    using C = Sm90Config<FP8, BM, TILE_STORE>;
    static constexpr int kBM = BM;
    // Split-K runs with 64-row tiles and the math warps' stores only (host-planned); other configurations compile
    // without its epilogue (with it, the 256-row FP8 kernel spilled 500 bytes and prefill lost 16%, run 201).
    static constexpr bool kSplitK = BM == 64 && !TILE_STORE;
    static constexpr int kWarpgroupN = BM == 64 ? 64 : 128;  // columns per math warpgroup
    static constexpr int kAcc = kWarpgroupN / 2;              // fp32 results per thread and wave
    static constexpr int kWaves = BM == 256 ? 2 : 1;          // 64-row slices per math warpgroup
    // Rows of wave v of math warpgroup mw inside the tile, and its columns.
    static constexpr int row_offset(int v, int mw) { return BM == 64 ? 0 : 128 * v + 64 * mw; }
    static constexpr int col_offset(int mw) { return BM == 64 ? 64 * mw : 0; }
    static constexpr uint32_t kStageTx = C::kATile + C::kBTile + C::kScaleBytes;
    // TILE_STORE: a math warp's pieces of the output tile, 16 rows x 64 columns each, piece i = (wave i / halves(),
    // 64-column half i % halves() of the warpgroup's columns).
    static constexpr int halves() { return kWarpgroupN / 64; }
    static constexpr int pieces() { return kWaves * halves(); }
    static constexpr int piece_half(int i, int mw) { return col_offset(mw) / 64 + i % halves(); }
    static constexpr int piece_row(int i, int mw, int warp) { return row_offset(i / halves(), mw) + 16 * warp; }
    // Offset of a piece in the staged output tile (two 64-column halves of BM rows x 128 bytes).
    static constexpr size_t piece_offset(int half, int row) { return size_t(half) * BM * 128 + size_t(row) * 128; }
};

// TILE_STORE: the TMA stores of the previous tile's pieces that wait in shared memory (lane 0 of each math warp),
// issued one at a time across the next tile's stages so that a CTA's writes stay even over the tile. Issued in one
// burst after the epilogue instead they measured the same (runs 130-131 of
// docs/perf-log/2026-12-03_tma-store-epilogue.md): the stores do not hold the next stages' loads up.
struct PendingPieces {
    int col0 = 0, row0 = 0;  // the tile's first output column (group included) and row
    int next = 1 << 30;      // the next piece to store; >= pieces(): none pending
};

template <typename B>
__device__ __forceinline__ void store_piece(const Sm90Params& p, const unsigned char* epilogue, PendingPieces& pp,
                                            int mw, int warp) {
    const int half = B::piece_half(pp.next, mw), row = B::piece_row(pp.next, mw, warp);
    tma::store_2d(&p.map_d, epilogue + B::piece_offset(half, row), pp.col0 + 64 * half, pp.row0 + row);
    tma::commit_group();
    ++pp.next;
}

// The pieces due by stage kb of k_blocks (piece i at the first stage kb >= i * k_blocks / pieces()).
template <typename B>
__device__ __forceinline__ void store_due_pieces(const Sm90Params& p, const unsigned char* epilogue,
                                                 PendingPieces& pp, int kb, int mw, int warp) {
    while (pp.next < B::pieces() && pp.next * p.k_blocks <= kb * B::pieces()) store_piece<B>(p, epilogue, pp, mw, warp);
}

template <typename B>
__device__ __forceinline__ void store_all_pieces(const Sm90Params& p, const unsigned char* epilogue, PendingPieces& pp,
                                                 int mw, int warp) {
    while (pp.next < B::pieces()) store_piece<B>(p, epilogue, pp, mw, warp);
}

using bulk::mbar_expect_tx;
using bulk::mbar_init_count;
using bulk::mbar_init_fence;
using bulk::mbar_wait;
using bulk::smem_u32;

__device__ __forceinline__ float weight_scale(const Sm90Params& p, int row, int kb) {
    const int64_t i = int64_t(row) * p.w_scales_ld + kb;
    if (p.w_scales_f32) return __ldg(static_cast<const float*>(p.w_scales) + i);
    return e8m0_to_f32(__ldg(static_cast<const uint8_t*>(p.w_scales) + i));
}

// Two adjacent outputs (row, col) and (row, col + 1) of group g's columns; n is even, so both exist when col < n.
__device__ __forceinline__ void store_output(const Sm90Params& p, int row, int g, int col, float x, float y) {
    if (row < p.m && col < p.n)
        store_pair(p.d, p.d_f32, p.d_vector, int64_t(row) * p.ldd + int64_t(g) * p.n + col, x, y);
}

// Four 8 x 8 b16 matrices from the registers of a warp (matrix j: row address from lanes 8j .. 8j + 7, thread
// (g, t) holding its row g, elements 2t and 2t + 1 in register j).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

// Group, M block, N block and K split of tile `tile`.
__device__ __forceinline__ void tile_of(const Sm90Params& p, int tile, int& g, int& mb, int& nb, int& split) {
    split = tile / p.base_tiles;
    tile -= split * p.base_tiles;
    const int per_group = p.m_blocks * p.n_blocks;
    g = tile / per_group;
    tile_coords(tile - g * per_group, p.m_blocks, p.n_blocks, mb, nb);
}

// The 128-K blocks [kb0, kb1) that split `split` sums (all of K without split-K; the host plans no empty split).
__device__ __forceinline__ void split_blocks(const Sm90Params& p, int split, int& kb0, int& kb1) {
    const int per = (p.k_blocks + p.k_splits - 1) / p.k_splits;
    kb0 = min(p.k_blocks, split * per);
    kb1 = min(p.k_blocks, kb0 + per);
}

__device__ __forceinline__ void math_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

// Split-K epilogue (64-row tiles stored by the math warps: B::kSplitK, host-checked). The split's fp32 results go
// to its partials; the last of the base tile's k_splits CTAs to arrive (one atomic per CTA, after every math
// thread's stores are fenced) sums all partials in split order, so the sum does not depend on which CTA came last,
// and stores the output. `flag` is a __shared__ word.
template <typename B>
__device__ __forceinline__ void split_k_epilogue(const Sm90Params& p, const float (&fin)[B::kWaves][B::kAcc],
                                                 int base_tile, int g, int mb, int nb, int split, int mw, int rw,
                                                 int t, uint32_t& flag) {
    const int64_t ldp = int64_t(p.groups) * p.n;
    const int col = nb * kBlockN + B::col_offset(mw) + 2 * t;  // inside group g; value pair i at col + 8 i
    // Value pair (v, h, i) of this thread: row mb BM + row_offset(v) + rw + 8 h, columns col + 8 i, + 1.
    auto row_of = [&](int v, int h) { return mb * B::kBM + B::row_offset(v, mw) + rw + 8 * h; };
    auto partial = [&](int sp, int row, int c) {
        return p.partials + (int64_t(sp) * p.m + row) * ldp + int64_t(g) * p.n + c;
    };
#pragma unroll
    for (int v = 0; v < B::kWaves; ++v)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row_of(v, h);
            if (row >= p.m) continue;
#pragma unroll
            for (int i = 0; i < B::kAcc / 4; ++i)
                if (col + 8 * i < p.n)
                    *reinterpret_cast<float2*>(partial(split, row, col + 8 * i)) =
                        make_float2(fin[v][4 * i + 2 * h], fin[v][4 * i + 2 * h + 1]);
        }
    // The math warpgroups elect (the producer warp does not take part: their named barrier).
    if (!split_arrives_last(&p.counters[base_tile], p.k_splits, flag, threadIdx.x == 128, [] { math_sync(); })) return;
    // Every split's partial from memory (this CTA's own as well: the values it stored), at addresses clamped into
    // the partials so that the loads carry no branch and four splits' loads are in flight together (behind
    // branches, each load waited for its add: ~1 us per split and row pair, run 198). Split-K tiles are 64 rows
    // (one wave); warps whose rows all lie past m skip.
    float sum[B::kWaves][B::kAcc];
#pragma unroll
    for (int v = 0; v < B::kWaves; ++v)
#pragma unroll
        for (int i = 0; i < B::kAcc; ++i) sum[v][i] = 0.f;
    if constexpr (B::kSplitK) {
        if (mb * B::kBM + B::row_offset(0, mw) + rw - rw % 16 < p.m) {
#pragma unroll 4
            for (int sp = 0; sp < p.k_splits; ++sp) {
                float2 x[2][B::kAcc / 4];
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int i = 0; i < B::kAcc / 4; ++i)
                        x[h][i] = __ldcg(reinterpret_cast<const float2*>(
                            partial(sp, min(row_of(0, h), p.m - 1), min(col + 8 * i, p.n - 2))));
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int i = 0; i < B::kAcc / 4; ++i) {
                        sum[0][4 * i + 2 * h] += x[h][i].x;
                        sum[0][4 * i + 2 * h + 1] += x[h][i].y;
                    }
            }
        }
    }
#pragma unroll
    for (int v = 0; v < B::kWaves; ++v)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int i = 0; i < B::kAcc / 4; ++i)
                store_output(p, row_of(v, h), g, col + 8 * i, sum[v][4 * i + 2 * h], sum[v][4 * i + 2 * h + 1]);
    if (threadIdx.x == 128) p.counters[base_tile] = 0;  // every split has arrived: ready for the next call
}

template <bool FP8, int N>
__device__ __forceinline__ void mma_stage(float (&d)[N / 2], uint32_t a_addr, uint32_t b_addr, bool accumulate_first) {
    // Four k-steps of 32 bytes inside the 128-byte swizzled rows: the start address moves by 32 bytes.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint64_t da = tma::sw128_descriptor(a_addr + 32 * k), db = tma::sw128_descriptor(b_addr + 32 * k);
        const uint32_t acc = (k > 0 || accumulate_first) ? 1u : 0u;
        if constexpr (FP8) {
            if constexpr (N == 128) wgmma::mma_e4m3_n128(d, da, db, acc);
            else wgmma::mma_e4m3_n64(d, da, db, acc);
        } else {
            if constexpr (N == 128) wgmma::mma_bf16_n128(d, da, db, acc);
            else wgmma::mma_bf16_n64(d, da, db, acc);
        }
    }
}
#endif

template <bool FP8, int BM, bool TILE_STORE>
__global__ void __launch_bounds__(kThreads, 1) sm90_gemm_kernel(const __grid_constant__ Sm90Params p) {
#if FS_WGMMA_AVAILABLE
    using C = Sm90Config<FP8, BM, TILE_STORE>;
    using B = Sm90Body<FP8, BM, TILE_STORE>;
    extern __shared__ unsigned char smem_raw[];
    __shared__ uint32_t split_flag;  // split-K: whether this CTA sums the tile's partials
    // The swizzle is a function of the absolute shared address: tiles start on 1024-byte boundaries.
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* const a_tiles = smem;
    unsigned char* const b_tiles = smem + size_t(C::kStages) * C::kATile;
    float* const a_scales = reinterpret_cast<float*>(smem + C::kScaleOffset);
    uint64_t* const full = reinterpret_cast<uint64_t*>(smem + C::kBarrierOffset);
    uint64_t* const empty = full + C::kStages;
    unsigned char* const epilogue = smem + C::kEpilogueOffset;

    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        tma::prefetch_map(&p.map_a);
        tma::prefetch_map(&p.map_b);
        if constexpr (FP8) tma::prefetch_map(&p.map_sa);
        if constexpr (TILE_STORE) tma::prefetch_map(&p.map_d);
#pragma unroll 1
        for (int s = 0; s < C::kStages; ++s) {
            mbar_init_count(&full[s], 1);                // the producer's arrive.expect_tx
            mbar_init_count(&empty[s], kMathWarps);      // lane 0 of every math warp
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        tma::release_registers<kProducerRegisters>();
        if (threadIdx.x == 0) {
            auto load_b = [&](int s, int g, int nb, int kb) {
                const int k0 = kb * (FP8 ? kStageKBytes : kStageKBytes / 2);  // in elements, inside the group
                tma::load_2d(b_tiles + size_t(s) * C::kBTile, &p.map_b, k0, g * p.n + nb * kBlockN, &full[s]);
            };
            // The first tile's first stages of weights are requested before the PDL wait (no earlier kernel writes
            // weights): their DRAM latency overlaps the previous kernel's tail and the launch. Each stage's full
            // barrier expects its whole transfer already; its A tile and scales follow after the wait.
            // Not where an earlier kernel of the stream wrote them (p.weights_early == 0: wo_a widened per pass).
            int prefetched = 0;
            if (p.weights_early && int(blockIdx.x) < p.tiles) {
                int g, mb, nb, split, kb0, kb1;
                tile_of(p, blockIdx.x, g, mb, nb, split);
                split_blocks(p, split, kb0, kb1);
                for (int kb = kb0; kb < kb1 && prefetched < C::kStages; ++kb, ++prefetched) {
                    mbar_expect_tx(&full[prefetched], B::kStageTx);
                    load_b(prefetched, g, nb, kb);
                }
            }
            pdl_wait();  // PDL: before the first read of A (written by an earlier kernel)
            pdl_trigger();
            int s = 0;
            uint32_t phase = 0;
            for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
                int g, mb, nb, split, kb0, kb1;
                tile_of(p, tile, g, mb, nb, split);
                split_blocks(p, split, kb0, kb1);
                for (int kb = kb0; kb < kb1; ++kb) {
                    mbar_wait(&empty[s], phase ^ 1);  // a fresh barrier counts as released once
                    if (prefetched > 0) {
                        --prefetched;  // stages 0, 1, .. of the first tile, in this order
                    } else {
                        mbar_expect_tx(&full[s], B::kStageTx);
                        load_b(s, g, nb, kb);
                    }
                    const int k0 = kb * (FP8 ? kStageKBytes : kStageKBytes / 2);
                    tma::load_2d(a_tiles + size_t(s) * C::kATile, &p.map_a, g * p.k + k0, mb * BM, &full[s]);
                    if constexpr (FP8)
                        tma::load_2d(a_scales + s * BM, &p.map_sa, mb * BM, g * p.k_blocks + kb, &full[s]);
                    if (++s == C::kStages) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
        return;
    }

    tma::claim_registers<kMathRegisters>();
    pdl_wait();  // PDL: before the first store of D (an earlier kernel may still read it)
    pdl_trigger();
    const int mw = wg - 1;  // math warpgroup 0 / 1
    const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int col_off = B::col_offset(mw);
    const int rw = 16 * warp + g;  // this thread's rows rw and rw + 8 of each wave's 64-row slice
    float acc[B::kAcc], fin[B::kWaves][B::kAcc];
#pragma unroll
    for (int i = 0; i < B::kAcc; ++i) acc[i] = 0.f;  // (a wgmma with accumulate = 0 ignores it; defined anyway)
    PendingPieces pending;  // TILE_STORE, lane 0
    int s = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
        int g, mb, nb, split, kb0, kb1;
        tile_of(p, tile, g, mb, nb, split);
        split_blocks(p, split, kb0, kb1);
        const int sw_row = g * p.n / kBlockN + nb;  // the tile's weight-scale row (n % 128 == 0 with groups)
#pragma unroll
        for (int v = 0; v < B::kWaves; ++v)
#pragma unroll
            for (int i = 0; i < B::kAcc; ++i) fin[v][i] = 0.f;
        float sw_lane = 0.f, sw_lane_next = 0.f;  // FP8: the scales of stages kb0 + lane and kb0 + 32 + lane
        if constexpr (FP8) {
            if (kb0 + lane < kb1) sw_lane = weight_scale(p, sw_row, kb0 + lane);
            if (kb0 + 32 + lane < kb1) sw_lane_next = weight_scale(p, sw_row, kb0 + 32 + lane);
        }
        int prev_s = -1;  // BF16: the stage whose wgmmas may still run
        for (int kb = kb0; kb < kb1; ++kb) {
            float sw = 0.f;
            if constexpr (FP8) {
                // The tile's weight scales 32 stages at a time, lane i holding stage i's, the next 32 in flight
                // behind them: one L2 round trip per tile, taken with the first stage's wait. Loaded one stage ahead
                // instead, each stage of a decode-sized tile waited for its scale (~0.8 us per stage, run 199).
                const int j = (kb - kb0) & 31;
                if (j == 0 && kb > kb0) {
                    sw_lane = sw_lane_next;
                    sw_lane_next = kb + 32 + lane < kb1 ? weight_scale(p, sw_row, kb + 32 + lane) : 0.f;
                }
                sw = __shfl_sync(0xffffffffu, sw_lane, j);
            }
            mbar_wait(&full[s], phase);
            const uint32_t a_stage = smem_u32(a_tiles + size_t(s) * C::kATile);
            const uint32_t b_addr = smem_u32(b_tiles + size_t(s) * C::kBTile + col_off * kStageKBytes);
            if constexpr (FP8) {
                // Shared reads of the stage come before the arrival that frees it.
                float sa[B::kWaves][2];
#pragma unroll
                for (int v = 0; v < B::kWaves; ++v) {
                    sa[v][0] = a_scales[s * BM + B::row_offset(v, mw) + rw];
                    sa[v][1] = a_scales[s * BM + B::row_offset(v, mw) + rw + 8];
                }
#pragma unroll
                for (int v = 0; v < B::kWaves; ++v) {  // one wave at a time: acc is reused
#pragma unroll
                    for (int i = 0; i < B::kAcc; ++i) wgmma::fence_operand(acc[i]);
                    wgmma::fence();
                    mma_stage<true, B::kWarpgroupN>(acc, a_stage + B::row_offset(v, mw) * kStageKBytes, b_addr, false);
                    wgmma::commit();
                    if constexpr (TILE_STORE) {
                        if (v == 0 && lane == 0) store_due_pieces<B>(p, epilogue, pending, kb, mw, warp);
                    }
#pragma unroll
                    for (int i = 0; i < B::kAcc; ++i) wgmma::fence_operand(acc[i]);
                    wgmma::wait<0>();
                    if (v == B::kWaves - 1 && lane == 0) tma::mbar_arrive(&empty[s]);
                    const float s0 = sa[v][0] * sw, s1 = sa[v][1] * sw;
#pragma unroll
                    for (int i = 0; i < B::kAcc; i += 4) {
                        fin[v][i + 0] = fmaf(acc[i + 0], s0, fin[v][i + 0]);
                        fin[v][i + 1] = fmaf(acc[i + 1], s0, fin[v][i + 1]);
                        fin[v][i + 2] = fmaf(acc[i + 2], s1, fin[v][i + 2]);
                        fin[v][i + 3] = fmaf(acc[i + 3], s1, fin[v][i + 3]);
                    }
                }
            } else {
#pragma unroll
                for (int v = 0; v < B::kWaves; ++v)
#pragma unroll
                    for (int i = 0; i < B::kAcc; ++i) wgmma::fence_operand(fin[v][i]);
                wgmma::fence();
#pragma unroll
                for (int v = 0; v < B::kWaves; ++v)
                    mma_stage<false, B::kWarpgroupN>(fin[v], a_stage + B::row_offset(v, mw) * kStageKBytes, b_addr,
                                                     kb > kb0);
                wgmma::commit();
                if constexpr (TILE_STORE) {
                    if (lane == 0) store_due_pieces<B>(p, epilogue, pending, kb, mw, warp);
                }
#pragma unroll
                for (int v = 0; v < B::kWaves; ++v)
#pragma unroll
                    for (int i = 0; i < B::kAcc; ++i) wgmma::fence_operand(fin[v][i]);
                wgmma::wait<1>();  // the previous stage's wgmmas are done: free it
                if (prev_s >= 0 && lane == 0) tma::mbar_arrive(&empty[prev_s]);
                prev_s = s;
            }
            if (++s == C::kStages) {
                s = 0;
                phase ^= 1;
            }
        }
        if constexpr (!FP8) {
            wgmma::wait<0>();
#pragma unroll
            for (int v = 0; v < B::kWaves; ++v)
#pragma unroll
                for (int i = 0; i < B::kAcc; ++i) wgmma::fence_operand(fin[v][i]);
            if (prev_s >= 0 && lane == 0) tma::mbar_arrive(&empty[prev_s]);
        }
        if (B::kSplitK && p.k_splits > 1) {
            split_k_epilogue<B>(p, fin, tile - split * p.base_tiles, g, mb, nb, split, mw, rw, t, split_flag);
        } else if (p.q_codes) {
            if constexpr (B::kWarpgroupN == 128) {  // host-checked: block_m 128 / 256
                // act_quant rows of the bf16 output: a thread holds 32 of the 128 columns (one scale block) of rows
                // rw and rw + 8; the block amax over the quad, then the codes through the warp's staging block (16
                // rows x 128 bytes) and back as 16-byte row pieces, 8 per row; the quad's first thread stores the
                // row's scale. The values are the bf16 outputs (as prepare_activation_rows reads them).
                const uint32_t buf = smem_u32(epilogue) + uint32_t((threadIdx.x / 32 - 4) * kEpilogueWarpBytes);
                const int64_t blk = (int64_t(g) * p.n + int64_t(nb) * kBlockN) / 128;  // g: the tile's group
                const int lr = lane >> 2;  // the thread's row inside the warp's 16 (rw - 16 warp)
#pragma unroll
                for (int v = 0; v < B::kWaves; ++v) {
                    const int row0 = mb * BM + B::row_offset(v, mw) + 16 * warp;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {  // rows g and g + 8 of the warp's 16
                        float amax = 0.f;
#pragma unroll
                        for (int i = 0; i < B::kAcc / 4; ++i) {
                            round_bf16_pair(fin[v][4 * i + 2 * h], fin[v][4 * i + 2 * h + 1]);
                            amax = fmaxf(amax, fmaxf(fabsf(fin[v][4 * i + 2 * h]), fabsf(fin[v][4 * i + 2 * h + 1])));
                        }
                        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                        const float sc = fp8_block_scale(amax), inv = 1.f / sc;
                        const uint32_t row_addr = buf + uint32_t((lr + 8 * h) * kEpiloguePitch + 2 * t);
#pragma unroll
                        for (int i = 0; i < B::kAcc / 4; ++i) {
                            const uint32_t c0 = fp8_code(fin[v][4 * i + 2 * h], inv);
                            const uint32_t c1 = fp8_code(fin[v][4 * i + 2 * h + 1], inv);
                            asm volatile("st.shared.u16 [%0], %1;" ::"r"(row_addr + 8 * i), "h"(uint16_t(c0 | c1 << 8)));
                        }
                        const int row = row0 + lr + 8 * h;
                        if (t == 0 && row < p.m) p.q_scales[blk * p.q_scales_ld + row] = sc;
                    }
                    __syncwarp();
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const int piece = lane + 32 * k, r = piece >> 3, c = 16 * (piece & 7);
                        uint4 val;
                        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                                     : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                                     : "r"(buf + uint32_t(r * kEpiloguePitch + c)));
                        if (row0 + r < p.m)
                            *reinterpret_cast<uint4*>(p.q_codes + int64_t(row0 + r) * p.q_codes_ld + blk * 128 + c) =
                                val;
                    }
                    __syncwarp();  // read back before the next wave overwrites the block
                }
            }
        } else if constexpr (TILE_STORE) {
            // The warp's pieces (16 rows x 64 columns per wave and half) into the staged output tile with stmatrix
            // at the 128-byte swizzle's positions (chunk c of row r at c ^ (r % 8), which also keeps an 8 x 8
            // matrix's rows on distinct bank quads), fenced for the async proxy; lane 0 stores them by TMA during
            // the next tile's stages (PendingPieces). The previous tile's stores must have read them first.
            if (lane == 0) {
                // Any pieces the tile's stages did not reach (k_blocks < pieces), then their reads complete.
                store_all_pieces<B>(p, epilogue, pending, mw, warp);
                tma::wait_group_read<0>();
            }
            __syncwarp();
            const int q = lane >> 3, r = (lane & 7) + 8 * (q & 1);
#pragma unroll
            for (int i = 0; i < B::pieces(); ++i) {
                const int v = i / B::halves(), h = i % B::halves();
                const uint32_t row_addr =
                    smem_u32(epilogue + B::piece_offset(B::piece_half(i, mw), B::piece_row(i, mw, warp))) +
                    uint32_t(r * 128);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float* f = &fin[v][4 * (8 * h + 2 * j)];
                    const uint32_t chunk = uint32_t(((q >> 1) + 2 * j) ^ (lane & 7));
                    stmatrix_x4(row_addr + 16 * chunk, bf16_pair(f[0], f[1]), bf16_pair(f[2], f[3]),
                                bf16_pair(f[4], f[5]), bf16_pair(f[6], f[7]));
                }
            }
            bulk::fence_proxy_async();  // this thread's shared writes, before the async proxy reads them
            __syncwarp();
            pending.col0 = g * p.n + nb * kBlockN;
            pending.row0 = mb * BM;
            pending.next = 0;
        } else if (p.d_rows16) {
            // Per wave and 64-column half: four stmatrix.x4 (column blocks 2j and 2j + 1, rows 0-7 and 8-15), then
            // lane L stores row pieces L, L + 32, L + 64, L + 96 (row piece / 8, 8 columns each).
            const uint32_t buf = smem_u32(epilogue) + uint32_t((threadIdx.x / 32 - 4) * kEpilogueWarpBytes);
            const int q = lane >> 3;
            const uint32_t st_addr = buf + uint32_t(((lane & 7) + 8 * (q & 1)) * kEpiloguePitch + 16 * (q >> 1));
            uint16_t* const d = static_cast<uint16_t*>(p.d) + int64_t(g) * p.n;
#pragma unroll
            for (int v = 0; v < B::kWaves; ++v) {
                const int row0 = mb * BM + B::row_offset(v, mw) + 16 * warp;
#pragma unroll
                for (int h = 0; h < B::kWarpgroupN / 64; ++h) {
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const float* f = &fin[v][4 * (8 * h + 2 * j)];
                        stmatrix_x4(st_addr + 32 * j, bf16_pair(f[0], f[1]), bf16_pair(f[2], f[3]),
                                    bf16_pair(f[4], f[5]), bf16_pair(f[6], f[7]));
                    }
                    __syncwarp();
                    const int col0 = nb * kBlockN + col_off + 64 * h;
#pragma unroll
                    for (int k = 0; k < 4; ++k) {
                        const int piece = lane + 32 * k, r = piece >> 3, c = col0 + 8 * (piece & 7);
                        uint4 val;
                        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                                     : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                                     : "r"(buf + uint32_t(r * kEpiloguePitch + 16 * (piece & 7))));
                        if (row0 + r < p.m && c < p.n)
                            *reinterpret_cast<uint4*>(d + int64_t(row0 + r) * p.ldd + c) = val;
                    }
                    __syncwarp();  // read back before the next half overwrites the block
                }
            }
        } else {
            const int col = nb * kBlockN + col_off + 2 * t;
#pragma unroll
            for (int v = 0; v < B::kWaves; ++v) {
                const int row = mb * BM + B::row_offset(v, mw) + rw;
#pragma unroll
                for (int i = 0; i < B::kAcc / 4; ++i) {
                    store_output(p, row, g, col + 8 * i, fin[v][4 * i + 0], fin[v][4 * i + 1]);
                    store_output(p, row + 8, g, col + 8 * i, fin[v][4 * i + 2], fin[v][4 * i + 3]);
                }
            }
        }
    }
    if constexpr (TILE_STORE) {
        if (lane == 0) {
            store_all_pieces<B>(p, epilogue, pending, mw, warp);  // the last tile's
            tma::wait_group<0>();  // the CTA's shared memory lives until its stores are done
        }
    }
    (void)acc;
#else
    __trap();
#endif
}

// bf16 output whose rows are 16-byte pieces: ldd and n multiples of 8, d 16-byte aligned (the staged epilogues).
bool rows16_output(const Problem& q) {
    return !q.d_f32 && q.ldd % 8 == 0 && q.n % 8 == 0 && reinterpret_cast<uintptr_t>(q.d) % 16 == 0;
}

template <bool FP8, int BM, bool TILE_STORE>
void launch_config(const Problem& q, int ctas, cudaStream_t stream) {
    using C = Sm90Config<FP8, BM, TILE_STORE>;
    Sm90Params p{};
    const uint64_t k_elems = uint64_t(q.k), groups = uint64_t(q.groups);
    const auto elem = FP8 ? tma::Element::U8 : tma::Element::BF16;
    const uint32_t box_k = FP8 ? kStageKBytes : kStageKBytes / 2;
    p.map_a = tma::make_2d(q.a, elem, uint64_t(q.m), groups * k_elems, uint64_t(q.lda_bytes), BM, box_k,
                           tma::Swizzle::B128, "dense GEMM activation");
    p.map_b = tma::make_2d(q.w, elem, groups * uint64_t(q.n), k_elems, k_elems * (FP8 ? 1 : 2), kBlockN, box_k,
                           tma::Swizzle::B128, "dense GEMM weight");
    p.k_blocks = int(k_blocks(q));
    if constexpr (FP8)
        p.map_sa = tma::make_2d(q.a_scales, tma::Element::F32, groups * uint64_t(p.k_blocks), uint64_t(q.m),
                                uint64_t(q.a_scales_ld) * 4, 1, BM, tma::Swizzle::NONE, "dense GEMM activation scales");
    p.k = int(q.k);
    p.groups = q.groups;
    p.w_scales = q.w_scales;
    p.w_scales_ld = (q.k + 127) / 128;
    p.w_scales_f32 = q.w_scales_f32;
    p.d = q.d;
    p.ldd = q.ldd;
    p.d_f32 = q.d_f32;
    p.d_vector = q.d_vector;
    p.d_rows16 = rows16_output(q);
    if constexpr (TILE_STORE)
        p.map_d = tma::make_2d(q.d, tma::Element::BF16, uint64_t(q.m), groups * uint64_t(q.n), uint64_t(q.ldd) * 2,
                               16, 64, tma::Swizzle::B128, "dense GEMM output");
    // (dense_gemm.cu checked the rows' layout and planned 128- or 256-row tiles for them; with 64-row tiles the
    // epilogue would store nothing.)
    FS_REQUIRE(!q.q_codes || BM != 64, "dense GEMM (sm_90a): act_quant rows as the output need 128- or 256-row tiles");
    p.q_codes = q.q_codes;
    p.q_codes_ld = q.q_codes_ld;
    p.q_scales = q.q_scales;
    p.q_scales_ld = q.q_scales_ld;
    p.m = int(q.m);
    p.n = int(q.n);
    p.m_blocks = int((q.m + BM - 1) / BM);
    p.n_blocks = int((q.n + kBlockN - 1) / kBlockN);
    p.base_tiles = q.groups * p.m_blocks * p.n_blocks;
    p.k_splits = q.k_splits;
    p.weights_early = q.weights_in_stream ? 0 : 1;
    p.tiles = p.base_tiles * q.k_splits;
    p.partials = q.partials;
    p.counters = q.counters;
    FS_REQUIRE(q.k_splits == 1 || (BM == 64 && !TILE_STORE && !q.q_codes && q.partials && q.counters),
               "dense GEMM (sm_90a): split-K takes 64-row tiles stored by the math warps, with a workspace");
    auto kernel = sm90_gemm_kernel<FP8, BM, TILE_STORE>;
    allow_dynamic_smem(kernel, C::kSmemBytes);
    launch_pdl(FP8 ? "sm90_gemm_kernel<fp8>" : "sm90_gemm_kernel<bf16>", kernel,
               dim3(unsigned(std::min(ctas, p.tiles))), dim3(kThreads), C::kSmemBytes, stream, p);
}

template <bool FP8, bool TILE_STORE>
void launch_tile_height(const Problem& q, int ctas, cudaStream_t stream) {
    if (q.block_m == 64) launch_config<FP8, 64, TILE_STORE>(q, ctas, stream);
    else if (q.block_m == 256) launch_config<FP8, 256, TILE_STORE>(q, ctas, stream);
    else launch_config<FP8, 128, TILE_STORE>(q, ctas, stream);
}

template <bool FP8>
void launch_precision(const Problem& q, int ctas, cudaStream_t stream) {
    if (q.tma_store && !q.q_codes && q.k_splits == 1 && rows16_output(q)) launch_tile_height<FP8, true>(q, ctas, stream);
    else launch_tile_height<FP8, false>(q, ctas, stream);
}

}  // namespace

void launch_sm90(const Problem& q, int ctas, cudaStream_t stream) {
    if (q.fp8) launch_precision<true>(q, ctas, stream);
    else launch_precision<false>(q, ctas, stream);
}

}  // namespace flashseek::cuda::dense_gemm
