// Standalone H200 probe for the persistent decode step's weight stream (docs/decode-step-design.md, stage 0; results
// and the reasons behind each form in docs/perf-log/2026-12-03_weight-stream-probe.md). A one-token FP8 GEMV of
// wq_b's shape (32,768 x 1,024 e4m3, fp32 scales per 128 x 128 block, 33.6 MB) as
//   - regs:   one 16-row tile per 4-warp CTA, 16-byte register loads issued before the activation is staged
//             (simt_gemv's form, the per-kernel step's GEMV);
//   - copy:   one CTA per SM, a loader lane streaming the CTA's 16 KB tiles (tiles blockIdx.x, blockIdx.x + grid,
//             ...) by cp.async.bulk into a ring of shared-memory stages (mbarriers full / empty), compute warps only
//             releasing them: the stream's own ceiling;
//   - ring:   the same with every compute warp taking 16 / CW rows of every tile (row split);
//   - tiles:  the same with fill i consumed whole by compute warp i % CW (warp per tile, the form stage 1 uses);
//   - mma:    the tiles form with tensor-core arithmetic (mma.sync m16n8k16 on weights widened to f16, x in f16),
//             and mma8 (m16n8k32 on the weights' own e4m3 bytes, x quantized to e4m3 per 128 columns);
//   - wide:   the same 33.6 MB as 8,192 x 4,096 (wo_a's rows) and 4,096 x 8,192 (wo_b's), warp per tile
//             ("tiles": 16 KB of whole rows, scales staged or carried in the ring) or warp per column chunk
//             ("chunks": 16 rows x 1,024 columns, partial sums reduced in shared memory, row blocks contiguous per
//             CTA or interleaved over the grid), and the chunks form's loader alone ("copy 1KB");
//   - chain:  two dependent 16.8 MB GEMVs (B's input is A's output: a grid-wide counter between them) as two
//             launches of the register form against one persistent ring kernel (row split, or warp per tile) whose
//             loader streams B's tiles while A finishes and the grid waits;
//   - fp4:    the routed experts' up-projection bytes (24,576 x 4,096 e2m1 with E8M0 group scales, 53 MB) through
//             the ring with SIMT widening (numeric.cuh's e2m1x8_to_f16x2x4_scaled): row per warp, column slices
//             (with the scales read ahead or carried in the ring) and warp per tile (scales in the ring); and warp
//             per tile on mma.sync m16n8k32 e4m3 with the grouped GEMM's scale folding ("fp4 mma").
// Compute warps stage the activations once per CTA with coalesced loads (per-lane loads of shared data from global
// memory put the whole grid on a few L2 lines). Each variant's output is checked against a CPU reference (double
// sums of the exact products: relative L2 error <= 1e-5, else CHECK FAILED and exit status 1). Times: medians over
// 20 event pairs around 8 back-to-back launches (each on the next of 8 copies of the weights, 269 MB, more than
// L2), and around single launches; against cudaMemcpy device to device in the same process (read + write, as
// `flashseek bench` counts it). One traced launch per 8-stage FP8 variant reports, from %globaltimer and clock64,
// the in-kernel span, the first tile's arrival, the per-tile compute / release / wait times and the loader's
// progress.
// Build: nvcc -O3 -std=c++20 --expt-relaxed-constexpr -arch=sm_90a -Isrc -o weight_stream_probe \
//        scripts/probes/weight_stream_probe.cu
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/warp_reduce.cuh"
#include "cuda/gemm/mma_core.cuh"
#include "cuda/moe/fp4_expand.cuh"
#include "probe_check.h"

namespace {

constexpr int kN = 32768, kK = 1024, kTileRows = 16, kTileBytes = kTileRows * kK, kCopies = 8;
constexpr int kScaleCols = kK / 128;
constexpr int kTraceTiles = 32;  // tiles per CTA a traced launch records

using flashseek::cuda::warp_sum;
using flashseek::cuda::mma::ld_stream;

// 16 e4m3 weights (one 16-byte piece) dotted with 16 activations.
__device__ __forceinline__ float dot16(uint4 v, const float* xv) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    float p = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
                __nv_fp8x2_storage_t((words[i] >> (16 * h)) & 0xffffu), __NV_E4M3);
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&r));
            p = fmaf(f.x, xv[4 * i + 2 * h], p);
            p = fmaf(f.y, xv[4 * i + 2 * h + 1], p);
        }
    }
    return p;
}

// ---- regs: 16 rows per CTA, 4 rows per warp, a lane's columns lane * 16 + u * 512 ------------------------------
__global__ void __launch_bounds__(128, 4) regs_kernel(const uint8_t* w, const float* sc, const float* x, float* y) {
    __shared__ __align__(16) float xs[kK];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int row0 = blockIdx.x * kTileRows + 4 * warp;
    uint4 v[2][4];
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int r = 0; r < 4; ++r) v[u][r] = ld_stream(w + size_t(row0 + r) * kK + u * 512 + lane * 16);
    for (int i = threadIdx.x; i < kK; i += blockDim.x) xs[i] = x[i];
    __syncthreads();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int col = u * 512 + lane * 16;
#pragma unroll
        for (int r = 0; r < 4; ++r)
            acc[r] = fmaf(dot16(v[u][r], xs + col), sc[((row0 + r) / 128) * kScaleCols + col / 128], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float s = warp_sum(acc[r]);
        if (lane == 0) y[row0 + r] = s;
    }
}

// ---- the ring: stages x 16 KB in dynamic shared memory, then full[stages] (one expect_tx arrival per fill) and
// empty[stages] (one arrival per compute warp); fill i goes to stage i % stages --------------------------------------
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
struct Ring {
    uint8_t* buf;
    uint64_t* full;
    uint64_t* empty;
    int stages;
    int stride;  // bytes per stage: a 16 KB tile, plus its scales where they travel with it
};

// Thread 0 initializes the barriers; the caller syncs the CTA before first use.
__device__ __forceinline__ Ring make_ring(uint8_t* smem, int stages, int consumers, int stride = kTileBytes) {
    using namespace flashseek::cuda::bulk;
    Ring r{smem, reinterpret_cast<uint64_t*>(smem + size_t(stages) * stride), nullptr, stages, stride};
    r.empty = r.full + stages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; ++s) {
            mbar_init_count(&r.full[s], 1);
            mbar_init_count(&r.empty[s], uint32_t(consumers));
        }
        mbar_init_fence();
    }
    return r;
}
// The loader lane: waits until fill i's stage was released by every compute warp (its previous round), announces
// the `bytes` its copies will bring and returns the stage and its full barrier; the caller issues the copies.
__device__ __forceinline__ uint8_t* ring_claim(const Ring& r, int i, uint32_t bytes, uint64_t*& full) {
    using namespace flashseek::cuda::bulk;
    const int s = i % r.stages, round = i / r.stages;
    if (round > 0) mbar_wait(&r.empty[s], uint32_t((round - 1) & 1));
    full = &r.full[s];
    mbar_expect_tx(full, bytes);
    return r.buf + size_t(s) * r.stride;
}
// Fill i: the 16 KB tile at src.
__device__ __forceinline__ void ring_fill(const Ring& r, int i, const uint8_t* src) {
    uint64_t* full;
    flashseek::cuda::bulk::copy_g2s(ring_claim(r, i, kTileBytes, full), src, kTileBytes, full);
}
// Fill i: the 16 KB tile at src and a second piece behind it (the tile's scales, bytes2 from src2).
__device__ __forceinline__ void ring_fill(const Ring& r, int i, const uint8_t* src, const uint8_t* src2,
                                          uint32_t bytes2) {
    using flashseek::cuda::bulk::copy_g2s;
    uint64_t* full;
    uint8_t* stage = ring_claim(r, i, kTileBytes + bytes2, full);
    copy_g2s(stage, src, kTileBytes, full);
    copy_g2s(stage + kTileBytes, src2, bytes2, full);
}
// The loader lane over the CTA's tiles blockIdx.x, blockIdx.x + grid, ... of n_tiles contiguous 16 KB tiles at w.
// `issued`: where to write clock64 as each of the first kTraceTiles fills is issued (a traced launch), or null.
__device__ __forceinline__ void ring_load_strided(const Ring& r, const uint8_t* w, int n_tiles,
                                                  long long* issued = nullptr) {
    int i = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++i) {
        ring_fill(r, i, w + size_t(t) * kTileBytes);
        if (issued && i < kTraceTiles) issued[i] = clock64();
    }
}
// The same with each tile's scales behind it: scales_of(t) -> their address, bytes2 of them.
template <class ScalesOf>
__device__ __forceinline__ void ring_load_strided_scaled(const Ring& r, const uint8_t* w, int n_tiles,
                                                         ScalesOf scales_of, uint32_t bytes2) {
    int i = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++i)
        ring_fill(r, i, w + size_t(t) * kTileBytes, scales_of(t), bytes2);
}
// A compute warp: waits for fill i, returns its tile.
__device__ __forceinline__ const uint8_t* ring_acquire(const Ring& r, int i) {
    const int s = i % r.stages;
    flashseek::cuda::bulk::mbar_wait(&r.full[s], uint32_t((i / r.stages) & 1));
    return r.buf + size_t(s) * r.stride;
}
// A compute warp: done reading fill i's stage.
__device__ __forceinline__ void ring_release(const Ring& r, int i, int lane) {
    __syncwarp();
    if (lane == 0) {
        flashseek::cuda::bulk::fence_proxy_async();  // the warp's reads before the next bulk copy overwrites them
        flashseek::cuda::mbar::mbar_arrive(&r.empty[i % r.stages]);
    }
}
#endif

// One compute warp's RPW rows (cw * RPW ...) of matrix tile t, held in shared memory at `tile`; y[row] for each.
// A tile's 16 rows lie in one 128-row scale block: the lane's two scales (columns u * 512 + lane * 16) are s[u].
template <int RPW>
__device__ __forceinline__ void tile_rows(const uint8_t* tile, int t, int cw, int lane, const float (&xv)[2][16],
                                          const float (&s)[2], float* y) {
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr) {
        const int lr = cw * RPW + rr, row = t * kTileRows + lr;
        float acc = 0.f;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int col = u * 512 + lane * 16;
            const uint4 v = *reinterpret_cast<const uint4*>(tile + lr * kK + col);
            acc = fmaf(dot16(v, xv[u]), s[u], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) y[row] = acc;
    }
}
// The lane's two scales of tile t (read before the tile's wait: they do not depend on it).
__device__ __forceinline__ void tile_scales(float (&s)[2], const float* sc, int t, int lane) {
#pragma unroll
    for (int u = 0; u < 2; ++u) s[u] = __ldg(sc + (t * kTileRows / 128) * kScaleCols + (u * 512 + lane * 16) / 128);
}

// 16 consecutive floats at p (16-byte aligned) into registers, four float4 reads.
__device__ __forceinline__ void load16(float (&v)[16], const float* p) {
#pragma unroll
    for (int j = 0; j < 16; j += 4) {
        const float4 f = *reinterpret_cast<const float4*>(p + j);
        v[j] = f.x;
        v[j + 1] = f.y;
        v[j + 2] = f.z;
        v[j + 3] = f.w;
    }
}
// The compute warps (threads 32 .. 32 * (CW + 1) - 1) copy n floats of x into shared memory xs with coalesced loads
// (through L2: x may have been written by another CTA of the same kernel) and meet (named barrier 1).
template <int CW>
__device__ __forceinline__ void stage_plain(float* xs, const float* x, int n) {
    for (int c = int(threadIdx.x) - 32; c < n; c += 32 * CW) xs[c] = __ldcg(x + c);
    asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
}

// The compute warps (threads 32 .. 32 * (CW + 1) - 1) stage kK activations into shared memory xs with coalesced
// loads (through L2: x may have been written by another CTA of the same kernel), meet (named barrier 1), and each
// lane takes its 32 (columns lane * 16 + u * 512) into registers. Reading them straight from global memory, 16
// floats 64 bytes apart per lane, put every warp of the grid on the same 32 lines: the first tile waited 6 us
// (4 compute warps) to 17 us (8).
template <int CW>
__device__ __forceinline__ void stage_activations(float (&xv)[2][16], float* xs, const float* x, int lane) {
    stage_plain<CW>(xs, x, kK);
#pragma unroll
    for (int u = 0; u < 2; ++u) load16(xv[u], xs + u * 512 + lane * 16);
}

// ---- ring: one CTA per SM, warp 0 lane 0 loads, CW compute warps of 16 / CW rows each ---------------------------
// The trace of one launch (trace != nullptr): per CTA kTraceSlots values written by warp 1 lane 0 (the first compute
// warp) and the loader lane: [0] clock64 and [1] globaltimer after the ring's init, [2] globaltimer and [3] clock64
// at the end; per tile i < kTraceTiles, clock64 at [4 + 3i] the tile's arrival (acquire returned), [5 + 3i] its
// dot products done, [6 + 3i] its release done; [4 + 3 kTraceTiles + i] clock64 when the loader issued fill i.
constexpr int kTraceSlots = 4 + 4 * kTraceTiles;
__device__ __forceinline__ long long global_ns() {
    long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void trace_start(long long* tr) {
    tr[0] = clock64();
    tr[1] = global_ns();
}
__device__ __forceinline__ void trace_end(long long* tr) {
    tr[2] = global_ns();
    tr[3] = clock64();
}

template <bool COMPUTE, int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    ring_kernel(const uint8_t* w, const float* sc, const float* x, float* y, int stages, long long* trace) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, CW);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kN / kTileRows;
    long long* tr = trace ? trace + size_t(blockIdx.x) * kTraceSlots : nullptr;
    const bool tracer = tr && warp == 1 && lane == 0;
    if (tracer) trace_start(tr);
    if (warp == 0) {
        if (lane == 0) ring_load_strided(ring, w, n_tiles, tr ? tr + 4 + 3 * kTraceTiles : nullptr);
        return;
    }
    float xv[2][16];
    if constexpr (COMPUTE) stage_activations<CW>(xv, reinterpret_cast<float*>(ring.empty + stages), x, lane);
    float s[2];
    tile_scales(s, sc, blockIdx.x, lane);
    int i = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++i) {
        const float s_now[2] = {s[0], s[1]};
        if (t + int(gridDim.x) < n_tiles) tile_scales(s, sc, t + gridDim.x, lane);
        const uint8_t* tile = ring_acquire(ring, i);
        if (tracer && i < kTraceTiles) tr[4 + 3 * i] = clock64();
        if constexpr (COMPUTE) tile_rows<kTileRows / CW>(tile, t, warp - 1, lane, xv, s_now, y);
        if (tracer && i < kTraceTiles) tr[5 + 3 * i] = clock64();
        ring_release(ring, i, lane);
        if (tracer && i < kTraceTiles) tr[6 + 3 * i] = clock64();
    }
    if (tracer) trace_end(tr);
#endif
}

// ---- ring by tiles: the same ring, fill i consumed whole by compute warp i % CW (16 rows, RG at a time), released
// by that warp alone (empty count 1): CW tiles in progress at once. In the row split every warp works on the same
// tile, so a tile's latency (a dependent FMA chain and a reduction per row: 0.34-0.40 us) sets the CTA's cadence,
// slower than the stream's ~0.53 us per tile. A warp waits for its next fill only after consuming its previous
// one, so stages must be a multiple of CW: otherwise a stage can be two phases behind its waiter and the parity
// wait passes on the older phase --------------------------------------------------------------------------------
template <int CW, int RG>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    ring_tiles_kernel(const uint8_t* w, const float* sc, const float* x, float* y, int stages, long long* trace) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, 1);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kN / kTileRows;
    long long* tr = trace ? trace + size_t(blockIdx.x) * kTraceSlots : nullptr;
    if (tr && warp == 1 && lane == 0) trace_start(tr);
    if (warp == 0) {
        if (lane == 0) ring_load_strided(ring, w, n_tiles, tr ? tr + 4 + 3 * kTraceTiles : nullptr);
        return;
    }
    float xv[2][16];
    stage_activations<CW>(xv, reinterpret_cast<float*>(ring.empty + stages), x, lane);
    const int cw = warp - 1;
    int i = cw;
    float s[2];
    tile_scales(s, sc, blockIdx.x + i * gridDim.x, lane);
    for (int t = blockIdx.x + i * gridDim.x; t < n_tiles; t += CW * gridDim.x, i += CW) {
        const float s_now[2] = {s[0], s[1]};
        if (t + CW * int(gridDim.x) < n_tiles) tile_scales(s, sc, t + CW * gridDim.x, lane);
        const uint8_t* tile = ring_acquire(ring, i);
        if (tr && lane == 0 && i < kTraceTiles) tr[4 + 3 * i] = clock64();
#pragma unroll 1
        for (int r0 = 0; r0 < kTileRows; r0 += RG) tile_rows<RG>(tile, t, r0 / RG, lane, xv, s_now, y);
        if (tr && lane == 0 && i < kTraceTiles) tr[5 + 3 * i] = clock64();
        ring_release(ring, i, lane);
        if (tr && lane == 0 && i < kTraceTiles) tr[6 + 3 * i] = clock64();
    }
    asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
    if (tr && warp == 1 && lane == 0) trace_end(tr);
#endif
}

// ---- mma: the tiles ring with tensor-core arithmetic (the persistent step's planner asks for <= 0.1 us per 1,024
// weights of tile arithmetic, docs/perf-log/2026-12-06_step-planner.md; the SIMT forms above take ~0.27). Fill i is
// consumed whole by compute warp i % CW with mma.sync m16n8k16 (f16 in, f32 accumulate): the tile's 16 rows are the
// M side, the one token the first of the 8 N columns (the other seven zero), the e4m3 weights widened to f16 in
// registers (one cvt per pair; e4m3 values are exact in f16). Only the sum over k matters, so each lane reads 16
// contiguous bytes of its rows g and g + 8 per 64 columns and its fragments' k positions are permuted to match: k
// step j of the piece takes bytes 4j, 4j + 1 as fragment columns 2 t4, 2 t4 + 1 and bytes 4j + 2, 4j + 3 as 2 t4 + 8,
// 2 t4 + 9; the token's lanes (g = 0) read x in the same order from an f16 copy (the decode activations' MMA_F16
// format). ~80 instructions per lane and 128 columns against ~220 for dot16's form. Scales per 128 columns: the
// fragment restarts per scale block and its token column (c0: row g, c2: row g + 8 in lanes t4 = 0) is scaled and
// summed in fp32.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v & 0xffffu), __NV_E4M3);
    return uint32_t(r.x) | (uint32_t(r.y) << 16);
}
// ---- mma8: the same with the weights' own bytes as the MMA operand: mma.sync m16n8k32 e4m3 x e4m3 (f32
// accumulate), x quantized to e4m3 codes with a power-of-two scale per 128 columns (the act_quant of release
// numerics). No widening: per 128 columns a lane loads 16 bytes of each of its two rows twice and the token lanes 16
// bytes of x, for four MMAs (k32 step j of a 64-column piece takes the piece's words 2j, 2j + 1 as fragment columns
// 4 t4 .. 4 t4 + 3 and 16 + 4 t4 .. 16 + 4 t4 + 3; x's codes in the same order). ~26 instructions per lane and 128
// columns.
__device__ __forceinline__ void mma_e4m3_16832(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// One lane's 64-column piece (16 bytes ra of row g, rb of row g + 8, at column col) into the fragment c; xs: the
// staged activations (f16 for mma, e4m3 codes for mma8), read by the token's lanes (g = 0) in the fragments' order.
template <bool E4M3>
__device__ __forceinline__ void mma_piece(float (&c)[4], uint4 ra, uint4 rb, const uint8_t* xs, int col, int g) {
    const uint32_t wa[4] = {ra.x, ra.y, ra.z, ra.w}, wb[4] = {rb.x, rb.y, rb.z, rb.w};
    if constexpr (E4M3) {
        const uint4 xv = *reinterpret_cast<const uint4*>(xs + col);
        const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int j = 0; j < 2; ++j)
            mma_e4m3_16832(c, wa[2 * j], wb[2 * j], wa[2 * j + 1], wb[2 * j + 1], g == 0 ? xw[2 * j] : 0u,
                           g == 0 ? xw[2 * j + 1] : 0u);
    } else {
        const uint4 xa = *reinterpret_cast<const uint4*>(xs + 2 * col);
        const uint4 xb = *reinterpret_cast<const uint4*>(xs + 2 * col + 16);
        const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};  // x[col + 2q], x[col + 2q + 1]
#pragma unroll
        for (int j = 0; j < 4; ++j)
            flashseek::cuda::mma::mma_f16(c, e4m3x2_to_f16x2(wa[j]), e4m3x2_to_f16x2(wb[j]),
                                          e4m3x2_to_f16x2(wa[j] >> 16), e4m3x2_to_f16x2(wb[j] >> 16),
                                          g == 0 ? xw[2 * j] : 0u, g == 0 ? xw[2 * j + 1] : 0u);
    }
}
// Both forms: x is kK floats (mma) or kK e4m3 codes (mma8, sx its kScaleCols scales; null for mma).
template <int CW, bool E4M3>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    ring_mma_kernel(const uint8_t* w, const float* sc, const void* x, const float* sx, float* y, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, 1);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kN / kTileRows;
    if (warp == 0) {
        if (lane == 0) ring_load_strided(ring, w, n_tiles);
        return;
    }
    uint8_t* xs = reinterpret_cast<uint8_t*>(ring.empty + stages);  // kK codes, or kK floats then kK halves
    if constexpr (E4M3) {
        for (int c = int(threadIdx.x) - 32; c < kK / 16; c += 32 * CW)
            reinterpret_cast<uint4*>(xs)[c] = __ldcg(reinterpret_cast<const uint4*>(x) + c);
    } else {
        float* xf = reinterpret_cast<float*>(xs);
        stage_plain<CW>(xf, static_cast<const float*>(x), kK);
        xs += kK * 4;
        for (int c = int(threadIdx.x) - 32; c < kK; c += 32 * CW) reinterpret_cast<__half*>(xs)[c] = __float2half_rn(xf[c]);
    }
    asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
    float xscale[kScaleCols];
#pragma unroll
    for (int kb = 0; kb < kScaleCols; ++kb) xscale[kb] = E4M3 ? __ldg(sx + kb) : 1.f;
    const int cw = warp - 1, g = lane >> 2, t4 = lane & 3;
    int i = cw;
    for (int t = blockIdx.x + i * gridDim.x; t < n_tiles; t += CW * gridDim.x, i += CW) {
        float s[kScaleCols];
#pragma unroll
        for (int kb = 0; kb < kScaleCols; ++kb)
            s[kb] = __ldg(sc + (t * kTileRows / 128) * kScaleCols + kb) * xscale[kb];
        const uint8_t* tile = ring_acquire(ring, i);
        float yg = 0.f, yg8 = 0.f;
#pragma unroll
        for (int kb = 0; kb < kScaleCols; ++kb) {
            float c[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = kb * 128 + h * 64 + 16 * t4;
                mma_piece<E4M3>(c, *reinterpret_cast<const uint4*>(tile + g * kK + col),
                                *reinterpret_cast<const uint4*>(tile + (g + 8) * kK + col), xs, col, g);
            }
            yg = fmaf(c[0], s[kb], yg);
            yg8 = fmaf(c[2], s[kb], yg8);
        }
        ring_release(ring, i, lane);
        if (t4 == 0) {
            y[t * kTileRows + g] = yg;
            y[t * kTileRows + g + 8] = yg8;
        }
    }
#endif
}

// ---- wide rows: the same 33.6 MB as N x K e4m3 with K = 4,096 (wo_a's rows) or 8,192 (wo_b's), by tiles ---------
// A 16 KB tile is 16,384 / K rows; compute warp i % CW consumes fill i whole, walking the row in chunks of 512
// columns (a lane's 16 in each). A lane cannot hold its K / 32 activations in registers: they are staged once per
// CTA in shared memory in lane-chunk order with 4 floats of padding per 16 (gemv_core.cuh's layout, conflict-free
// float4 reads) and read once per chunk for all the tile's rows; the (N / 128) x (K / 128) fp32 block scales
// (8 KB) are staged too.
// SCALES_IN_RING: instead of staging all (N / 128) x SC scales before the first tile, each fill carries its tile's
// scale row (SC floats, one 128-row block) behind the tile as a second bulk copy.
constexpr int kWideScaleBytes = 256;  // a stage's room for one scale row (K / 128 floats, K <= 8,192)
template <int K, int CW, bool SCALES_IN_RING = false>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    ring_wide_kernel(const uint8_t* w, const float* sc, const float* x, float* y, int stages, long long* trace) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int N = kN * kK / K, TR = kTileBytes / K, SC = K / 128, n_tiles = N / TR;
    static_assert(SC * 4 <= kWideScaleBytes, "a scale row fits its stage");
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, 1, kTileBytes + (SCALES_IN_RING ? kWideScaleBytes : 0));
    float* xs = reinterpret_cast<float*>(ring.empty + stages);  // K / 16 lane-chunks of 20 floats
    float* ss = xs + K / 16 * 20;                                // (N / 128) x SC scales (staged form)
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    if (warp == 0) {
        if (lane == 0) {
            if constexpr (SCALES_IN_RING) {
                ring_load_strided_scaled(
                    ring, w, n_tiles,
                    [&](int t) { return reinterpret_cast<const uint8_t*>(sc + (t * TR / 128) * SC); }, SC * 4);
            } else {
                ring_load_strided(ring, w, n_tiles);
            }
        }
        return;
    }
    long long* tr = trace && warp == 1 && lane == 0 ? trace + size_t(blockIdx.x) * 4 : nullptr;
    if (tr) tr[0] = global_ns();
    for (int c = int(threadIdx.x) - 32; c < K; c += 32 * CW) xs[(c / 16) * 20 + c % 16] = __ldcg(x + c);
    if constexpr (!SCALES_IN_RING)
        for (int c = int(threadIdx.x) - 32; c < N / 128 * SC; c += 32 * CW) ss[c] = __ldg(sc + c);
    asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
    if (tr) tr[1] = global_ns();
    const int cw = warp - 1;
    int i = cw;
    for (int t = blockIdx.x + i * gridDim.x; t < n_tiles; t += CW * gridDim.x, i += CW) {
        const uint8_t* tile = ring_acquire(ring, i);
        if (tr && i == cw) tr[2] = global_ns();
        // The tile's rows share one 128-row scale block.
        const float* srow =
            SCALES_IN_RING ? reinterpret_cast<const float*>(tile + kTileBytes) : ss + (t * TR / 128) * SC;
        float acc[TR];
#pragma unroll
        for (int r = 0; r < TR; ++r) acc[r] = 0.f;
#pragma unroll 2
        for (int c = 0; c < K / 512; ++c) {
            float xv[16];
            load16(xv, xs + (c * 32 + lane) * 20);
            const float s = srow[(c * 512 + lane * 16) / 128];
#pragma unroll
            for (int r = 0; r < TR; ++r) {
                const uint4 v = *reinterpret_cast<const uint4*>(tile + r * K + c * 512 + lane * 16);
                acc[r] = fmaf(dot16(v, xv), s, acc[r]);
            }
        }
        ring_release(ring, i, lane);
#pragma unroll
        for (int r = 0; r < TR; ++r) {
            const float v = warp_sum(acc[r]);
            if (lane == 0) y[t * TR + r] = v;
        }
    }
    if (trace) {
        asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
        if (tr) tr[3] = global_ns();
    }
#endif
}

// ---- wide rows by column chunks: a tile is 16 rows x 1,024 columns (16 bulk copies of 1 KB), the CTA's fills are
// its row blocks' NC = K / 1,024 chunks in order, so fill i's chunk is i % NC and compute warp i % 8 always sees
// the same chunk: its 32 activations stay in registers and a tile has 16 rows of independent work, as at
// K = 1,024. A row block's NC partial sums meet in shared memory; the warp that completes a row block (a counter
// per slot) sums them in chunk order (deterministic whatever the arrival order) and stores the rows.
// INTERLEAVED: the CTA's row blocks are b, b + grid, ... (as the 16 KB tiles are assigned) instead of a contiguous
// range; COMPUTE false: the compute warps only release the stages (the loader's own ceiling with 1 KB pieces).
template <int K, bool COMPUTE = true, bool INTERLEAVED = false>
__global__ void __launch_bounds__(32 * 9, 1)
    ring_kchunk_kernel(const uint8_t* w, const float* sc, const float* x, float* y, int stages, long long* trace) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int CW = 8, N = kN * kK / K, NC = K / 1024, SC = K / 128, n_rb = N / kTileRows, kSlots = 4;
    static_assert(CW % NC == 0, "a warp's chunk is fixed");
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, 1);
    float* xs = reinterpret_cast<float*>(ring.empty + stages);  // K activations
    float* red = xs + K;                                         // [kSlots][NC][16] partial sums
    int* cnt = reinterpret_cast<int*>(red + kSlots * NC * kTileRows);
    if (threadIdx.x < kSlots) cnt[threadIdx.x] = 0;
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int rb_begin = int(int64_t(n_rb) * blockIdx.x / gridDim.x);
    const int rb_end = int(int64_t(n_rb) * (blockIdx.x + 1) / gridDim.x);
    const int n_rb_cta =
        INTERLEAVED ? (n_rb - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x) : rb_end - rb_begin;
    const int n_fills = n_rb_cta * NC;
    auto rb_of = [&](int j) { return INTERLEAVED ? int(blockIdx.x) + j * int(gridDim.x) : rb_begin + j; };
    if (warp == 0) {
        if (lane == 0)
            for (int i = 0; i < n_fills; ++i) {
                uint64_t* full;
                uint8_t* stage = ring_claim(ring, i, kTileBytes, full);
                const int rb = rb_of(i / NC), c = i % NC;
                for (int r = 0; r < kTileRows; ++r)
                    flashseek::cuda::bulk::copy_g2s(stage + r * 1024, w + size_t(rb * kTileRows + r) * K + c * 1024,
                                                    1024, full);
            }
        return;
    }
    // trace: per CTA globaltimer at the start, after staging, when the first tile arrived, at the end.
    long long* tr = trace && warp == 1 && lane == 0 ? trace + size_t(blockIdx.x) * 4 : nullptr;
    if (tr) tr[0] = global_ns();
    stage_plain<CW>(xs, x, K);
    if (tr) tr[1] = global_ns();
    const int cw = warp - 1, chunk = cw % NC;
    float xv[2][16];
#pragma unroll
    for (int u = 0; u < 2; ++u) load16(xv[u], xs + chunk * 1024 + u * 512 + lane * 16);
    auto scales = [&](float (&sv)[2], int rb) {
#pragma unroll
        for (int u = 0; u < 2; ++u)
            sv[u] = __ldg(sc + (rb * kTileRows / 128) * SC + (chunk * 1024 + u * 512 + lane * 16) / 128);
    };
    float sv[2];
    if (cw < n_fills) scales(sv, rb_of(cw / NC));
    for (int i = cw; i < n_fills; i += CW) {
        const int rb = rb_of(i / NC);
        const float s_now[2] = {sv[0], sv[1]};
        if (i + CW < n_fills) scales(sv, rb_of((i + CW) / NC));
        const uint8_t* tile = ring_acquire(ring, i);
        if (tr && i == cw) tr[2] = global_ns();
        if constexpr (COMPUTE) {
            float part[kTileRows];
#pragma unroll
            for (int r = 0; r < kTileRows; ++r) {
                float acc = 0.f;
#pragma unroll
                for (int u = 0; u < 2; ++u) {
                    const uint4 v = *reinterpret_cast<const uint4*>(tile + r * 1024 + u * 512 + lane * 16);
                    acc = fmaf(dot16(v, xv[u]), s_now[u], acc);
                }
                part[r] = acc;
            }
            ring_release(ring, i, lane);
#pragma unroll
            for (int r = 0; r < kTileRows; ++r) part[r] = warp_sum(part[r]);
            float* red_rb = red + ((i / NC) % kSlots) * NC * kTileRows;
#pragma unroll
            for (int r = 0; r < kTileRows; ++r)
                if (lane == r) red_rb[chunk * kTileRows + r] = part[r];
            __syncwarp();
            int done = 0;
            if (lane == 0) {
                __threadfence_block();
                done = atomicAdd(&cnt[(i / NC) % kSlots], 1) == NC - 1;
            }
            done = __shfl_sync(0xffffffffu, done, 0);
            if (done) {
                __threadfence_block();
                if (lane < kTileRows) {
                    float sum = 0.f;
#pragma unroll
                    for (int c = 0; c < NC; ++c) sum += red_rb[c * kTileRows + lane];
                    y[rb * kTileRows + lane] = sum;
                }
                __syncwarp();
                if (lane == 0) cnt[(i / NC) % kSlots] = 0;
            }
        } else {  // the loader's own ceiling with 1 KB pieces
            ring_release(ring, i, lane);
        }
    }
    if (trace) {
        asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
        if (tr) tr[3] = global_ns();
    }
#endif
}

// ---- chain: two dependent GEMVs in one persistent kernel (stage 1's mechanism) ----------------------------------
// A = rows [0, kChainRows) of the matrix on x, B = rows [kChainRows, 2 kChainRows) on A's first kK outputs; B starts
// only when every CTA has finished its A tiles (one arrival and one poller per CTA on a counter, release / acquire:
// one per compute warp, 1,056 on one address, took 66 us), but the loader streams B's tiles right behind A's
// whatever the dependency: the ring holds B's first tiles while A's tail and the wait run.
constexpr int kChainRows = 16384, kChainTiles = kChainRows / kTileRows;

// The CTA's chain fills: A's tiles blockIdx.x, blockIdx.x + grid, ..., then B's the same way (B's tile t is matrix
// tile kChainTiles + t), per_op of each. The host keeps the grid below kChainTiles: every CTA has A tiles.
__device__ __forceinline__ int chain_per_op() {
    return (kChainTiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
}
__device__ __forceinline__ int chain_tile_of(int i, int per_op) {
    return (i < per_op ? 0 : kChainTiles) + int(blockIdx.x) + (i % per_op) * int(gridDim.x);
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void chain_load(const Ring& r, const uint8_t* w, int per_op) {
    for (int i = 0; i < 2 * per_op; ++i) ring_fill(r, i, w + size_t(chain_tile_of(i, per_op)) * kTileBytes);
}
#endif
// One thread of the CTA (after the CTA's compute warps met): publishes the CTA's A outputs (release) and waits for
// every CTA's arrival (acquire, polling with a short sleep).
__device__ __forceinline__ void grid_arrive_and_wait(unsigned* done) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(done) : "memory");
    unsigned seen = 0;
    for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(done) : "memory");
        if (seen >= gridDim.x) break;
        __nanosleep(20);
    }
}

template <int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    chain_kernel(const uint8_t* w, const float* sc, const float* x, float* ya, float* yb, unsigned* done,
                 int stages, long long* trace) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, CW);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int per_op = chain_per_op();
    auto tile_of = [&](int i) { return chain_tile_of(i, per_op); };
    if (warp == 0) {
        if (lane == 0) chain_load(ring, w, per_op);
        return;
    }
    // trace: per CTA globaltimer at the start, when A's last tile is done, when the grid barrier passed, at the end.
    long long* tr = trace && warp == 1 && lane == 0 ? trace + size_t(blockIdx.x) * 4 : nullptr;
    if (tr) tr[0] = global_ns();
    float* xs = reinterpret_cast<float*>(ring.empty + stages);
    float xv[2][16];
    stage_activations<CW>(xv, xs, x, lane);
    float s[2];
    tile_scales(s, sc, tile_of(0), lane);
    for (int i = 0; i < 2 * per_op; ++i) {
        if (i == per_op) {
            // A is done here: the CTA's compute warps meet (named barrier 1), one thread publishes the CTA's A
            // outputs (release) and waits for every CTA's arrival (acquire, one poller per CTA), the compute warps
            // meet again and stage B's input.
            asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
            if (warp == 1 && lane == 0) {
                if (tr) tr[1] = global_ns();
                grid_arrive_and_wait(done);
                if (tr) tr[2] = global_ns();
            }
            asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
            stage_activations<CW>(xv, xs, ya, lane);
        }
        const float s_now[2] = {s[0], s[1]};
        if (i + 1 < 2 * per_op) tile_scales(s, sc, tile_of(i + 1), lane);
        const uint8_t* tile = ring_acquire(ring, i);
        tile_rows<kTileRows / CW>(tile, tile_of(i), warp - 1, lane, xv, s_now, i < per_op ? ya : yb - kChainRows);
        ring_release(ring, i, lane);
    }
    if (trace) {  // every compute thread the same barrier instruction (bar.sync is .aligned)
        asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
        if (tr) tr[3] = global_ns();
    }
#endif
}

// The chain with the tiles mapping: fill i consumed whole by compute warp i % CW, RG rows at a time. A warp joins
// the grid barrier once, before its first B tile (or when it has no A tile left and no B tile at all).
template <int CW, int RG>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    chain_tiles_kernel(const uint8_t* w, const float* sc, const float* x, float* ya, float* yb, unsigned* done,
                       int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, 1);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int per_op = chain_per_op();
    auto tile_of = [&](int i) { return chain_tile_of(i, per_op); };
    if (warp == 0) {
        if (lane == 0) chain_load(ring, w, per_op);
        return;
    }
    float* xs = reinterpret_cast<float*>(ring.empty + stages);
    float xv[2][16];
    stage_activations<CW>(xv, xs, x, lane);
    const int cw = warp - 1;
    bool crossed = false;
    for (int i = cw;; i += CW) {
        if (!crossed && i >= per_op) {
            crossed = true;
            asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
            if (cw == 0 && lane == 0) grid_arrive_and_wait(done);
            asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
            stage_activations<CW>(xv, xs, ya, lane);
        }
        if (i >= 2 * per_op) break;
        float s[2];
        tile_scales(s, sc, tile_of(i), lane);
        const uint8_t* tile = ring_acquire(ring, i);
        float* out = i < per_op ? ya : yb - kChainRows;
#pragma unroll 1
        for (int r0 = 0; r0 < kTileRows; r0 += RG) tile_rows<RG>(tile, tile_of(i), r0 / RG, lane, xv, s, out);
        ring_release(ring, i, lane);
    }
#endif
}

// ---- fp4: the routed experts' up-projection bytes (6 experts x w1, w3: 24,576 rows x 4,096 e2m1, E8M0 scales per
// 32 columns, 50 MB + 3 MB) through the same ring, one row of a 16 KB tile (8 rows x 2 KB) per compute warp -------
constexpr int kF4Rows = 24576, kF4K = 4096, kF4RowBytes = kF4K / 2, kF4TileRows = kTileBytes / kF4RowBytes;
constexpr int kF4Groups = kF4K / 32, kF4Stride = 36;  // staged activations: 32 columns + 4 floats of padding

// An E8M0 group scale times 2^14 (undoing the widening's 2^-14).
__device__ __forceinline__ float e8m0_widened(uint8_t e) { return __uint_as_float(uint32_t(e) << 23) * 16384.f; }
// NW words of 8 e2m1 weights (each value times 2^-14 after widening) dotted with 8 NW activations in the widening's
// order (word q, pair j = columns 8q + j and 8q + j + 4); X: a register array or a pointer into shared memory.
template <int NW, class X>
__device__ __forceinline__ float fp4_dot(const uint32_t (&words)[NW], const X& xw) {
    float part = 0.f;
#pragma unroll
    for (int q = 0; q < NW; ++q) {
        uint32_t h[4];
        flashseek::cuda::e2m1x8_to_f16x2x4_scaled(words[q], h);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[j]));
            part = fmaf(f.x, xw[q * 8 + 2 * j], part);
            part = fmaf(f.y, xw[q * 8 + 2 * j + 1], part);
        }
    }
    return part;
}
__device__ __forceinline__ float fp4_dot16(uint2 v, const float (&xr)[16]) {
    const uint32_t words[2] = {v.x, v.y};
    return fp4_dot(words, xr);
}

template <int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    ring_fp4_kernel(const uint8_t* w, const uint8_t* sc, const float* x, float* y, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    static_assert(CW == kF4TileRows, "one row of a tile per compute warp");
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, CW);
    // The activations, group g at xs + g * kF4Stride in the widening's order: position 2j of a nibble word's
    // outputs is column j, 2j + 1 is column j + 4 (numeric.cuh: e2m1x8_to_f16x2x4_scaled).
    float* xs = reinterpret_cast<float*>(smem + size_t(stages) * kTileBytes + size_t(stages) * 16);
    for (int c = threadIdx.x; c < kF4K; c += blockDim.x) {
        const int g = c / 32, in = c % 32, word = in / 8, j = in % 8;
        xs[g * kF4Stride + word * 8 + (j < 4 ? 2 * j : 2 * (j - 4) + 1)] = x[c];
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kF4Rows / kF4TileRows;
    if (warp == 0) {
        if (lane == 0) ring_load_strided(ring, w, n_tiles);
        return;
    }
    int i = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++i) {
        const uint8_t* tile = ring_acquire(ring, i);
        const int row = t * kF4TileRows + (warp - 1);
        const uint8_t* wrow = tile + (warp - 1) * kF4RowBytes;
        float acc = 0.f;
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            const int g = p * 32 + lane;  // the lane's 16-byte piece = 32 columns = one scale group
            const uint4 v = *reinterpret_cast<const uint4*>(wrow + g * 16);
            const uint32_t words[4] = {v.x, v.y, v.z, v.w};
            const float* xg = xs + g * kF4Stride;
            const float part = fp4_dot(words, xg);
            const float scale = e8m0_widened(sc[size_t(row) * kF4Groups + g]);
            acc = fmaf(part, scale, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) y[row] = acc;
        ring_release(ring, i, lane);
    }
#endif
}

// A lane's 16 FP4 columns base .. base + 15 of the staged activations xs, in the widening's order: word q, pair j =
// (column base + 8q + j, base + 8q + j + 4).
__device__ __forceinline__ void fp4_lane_activations(float (&xr)[16], const float* xs, int base) {
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            xr[q * 8 + 2 * j] = xs[base + 8 * q + j];
            xr[q * 8 + 2 * j + 1] = xs[base + 8 * q + j + 4];
        }
}
// ---- fp4 by columns: the same tiles, each compute warp a 256-byte column slice (512 columns) of all 8 rows, a lane
// 16 columns (8 bytes) of each row. The lane's 16 activations stay in registers for the whole matrix and its 8 E8M0
// scales per tile are read before the tile's wait; the per-row partial sums of the 8 warps meet in shared memory
// (one named barrier per tile, partials double-buffered by tile parity). The row form above reads one activation
// from shared memory per weight (128 KB per 16 KB tile).
// SCALES_IN_RING: the tile's 8 x 128 scale bytes (contiguous, rows are) travel with it as a second bulk copy into
// the stage, instead of per-lane loads one tile ahead (the scales are 3 MB streamed from HBM like the weights: a
// load issued one tile ahead is one DRAM round trip, about the time of a tile).
constexpr int kF4ColWarps = 8, kF4ColsPerLane = 16, kF4TileScaleBytes = kF4TileRows * kF4Groups;
template <bool SCALES_IN_RING>
__global__ void __launch_bounds__(32 * (kF4ColWarps + 1), 1)
    ring_fp4_cols_kernel(const uint8_t* w, const uint8_t* sc, const float* x, float* y, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int CW = kF4ColWarps, R = kF4TileRows;
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, CW, kTileBytes + (SCALES_IN_RING ? kF4TileScaleBytes : 0));
    float* xs = reinterpret_cast<float*>(ring.empty + stages);  // kF4K activations
    float* red = xs + kF4K;                                      // [2][CW][R] per-warp row partials
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kF4Rows / kF4TileRows;
    if (warp == 0) {
        if (lane == 0) {
            if constexpr (SCALES_IN_RING) {
                ring_load_strided_scaled(
                    ring, w, n_tiles, [&](int t) { return sc + size_t(t) * kF4TileScaleBytes; }, kF4TileScaleBytes);
            } else {
                ring_load_strided(ring, w, n_tiles);
            }
        }
        return;
    }
    const int cw = warp - 1, base = cw * 512 + lane * kF4ColsPerLane, g = base / 32;
    stage_plain<CW>(xs, x, kF4K);
    float xr[kF4ColsPerLane];
    fp4_lane_activations(xr, xs, base);
    uint8_t sn[R];
    if constexpr (!SCALES_IN_RING)
#pragma unroll
        for (int r = 0; r < R; ++r) sn[r] = __ldg(sc + size_t(int(blockIdx.x) * R + r) * kF4Groups + g);
    int i = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++i) {
        uint8_t s_now[R];
        if constexpr (!SCALES_IN_RING) {
#pragma unroll
            for (int r = 0; r < R; ++r) s_now[r] = sn[r];
            if (t + int(gridDim.x) < n_tiles)
#pragma unroll
                for (int r = 0; r < R; ++r)
                    sn[r] = __ldg(sc + size_t((t + int(gridDim.x)) * R + r) * kF4Groups + g);
        }
        const uint8_t* tile = ring_acquire(ring, i);
        if constexpr (SCALES_IN_RING)
#pragma unroll
            for (int r = 0; r < R; ++r) s_now[r] = tile[kTileBytes + r * kF4Groups + g];
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float part =
                fp4_dot16(*reinterpret_cast<const uint2*>(tile + r * kF4RowBytes + cw * 256 + lane * 8), xr);
            acc[r] = part * e8m0_widened(s_now[r]);
        }
        ring_release(ring, i, lane);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = warp_sum(acc[r]);
        float* red_t = red + (i & 1) * CW * R;
        if (lane < R) {
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (lane == r) red_t[cw * R + r] = acc[r];
        }
        asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
        if (cw == 0 && lane < R) {
            float sum = 0.f;
#pragma unroll
            for (int k = 0; k < CW; ++k) sum += red_t[k * R + lane];
            y[t * R + lane] = sum;
        }
    }
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Warp 0 of the FP4 tile kernels: lane 0 streams the CTA's tiles with their scales behind them; true for warp 0 (the
// caller returns), false for the compute warps.
__device__ __forceinline__ bool fp4_tiles_loader(const Ring& ring, const uint8_t* w, const uint8_t* sc, int warp,
                                                 int lane) {
    if (warp != 0) return false;
    if (lane == 0)
        ring_load_strided_scaled(
            ring, w, kF4Rows / kF4TileRows, [&](int t) { return sc + size_t(t) * kF4TileScaleBytes; },
            kF4TileScaleBytes);
    return true;
}
#endif

// ---- fp4 by tiles: fill i consumed whole by compute warp i % 8 (no barrier between warps per tile), its scales in
// the ring; the lane walks the 8 column chunks of 512, taking its 16 activations of a chunk from shared memory once
// for the 8 rows -------------------------------------------------------------------------------------------------
__global__ void __launch_bounds__(32 * (kF4ColWarps + 1), 1)
    ring_fp4_tiles_kernel(const uint8_t* w, const uint8_t* sc, const float* x, float* y, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int CW = kF4ColWarps, R = kF4TileRows;
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, 1, kTileBytes + kF4TileScaleBytes);
    float* xs = reinterpret_cast<float*>(ring.empty + stages);  // kF4K activations
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kF4Rows / kF4TileRows;
    if (fp4_tiles_loader(ring, w, sc, warp, lane)) return;
    stage_plain<CW>(xs, x, kF4K);
    const int cw = warp - 1;
    int i = cw;
    for (int t = blockIdx.x + i * gridDim.x; t < n_tiles; t += CW * gridDim.x, i += CW) {
        const uint8_t* tile = ring_acquire(ring, i);
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.f;
#pragma unroll 1
        for (int c = 0; c < kF4K / 512; ++c) {
            const int base = c * 512 + lane * kF4ColsPerLane, g = base / 32;
            float xr[kF4ColsPerLane];
            fp4_lane_activations(xr, xs, base);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float part =
                    fp4_dot16(*reinterpret_cast<const uint2*>(tile + r * kF4RowBytes + c * 256 + lane * 8), xr);
                acc[r] = fmaf(part, e8m0_widened(tile[kTileBytes + r * kF4Groups + g]), acc[r]);
            }
        }
        ring_release(ring, i, lane);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float v = warp_sum(acc[r]);
            if (lane == 0) y[t * R + r] = v;
        }
    }
#endif
}

// ---- fp4 mma: fill i consumed whole by compute warp i % CW with mma.sync m16n8k32 e4m3 (the FP4 rows converted to
// e4m3 codes through their group's magnitude table, the grouped GEMM's scale folding: fp4_expand::group_table /
// codes8, 9 instructions per 8 weights, every group of a row stored x 2^(6 + its exponent - the row's largest)). The
// tile's 8 rows are the N side (lane g holds row g), the token the first of the 16 M rows (x as e4m3 codes with a
// power-of-two scale per 128 columns; the other rows zero). Lane t4 takes group 4c + t4 of its row per 128 columns
// (16 bytes, 4 words: one k32 step each, elements 0-3 as fragment columns 4 t4 .. + 3, 4-7 as 16 + 4 t4 .. + 3),
// so one k32 step spans the 128 columns' four groups, all under one x scale; the row's 2^(ref - 133) multiplies the
// sum once. D's token row: c0 / c1 of lanes 0-3 are rows 2 t4 / 2 t4 + 1.
template <int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    ring_fp4_mma_kernel(const uint8_t* w, const uint8_t* sc, const uint8_t* ref, const uint8_t* xq, const float* sx,
                        float* y, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    using flashseek::cuda::fp4_expand::codes8;
    using flashseek::cuda::fp4_expand::group_table;
    constexpr int R = kF4TileRows, kChunks = kF4K / 128;
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, 1, kTileBytes + kF4TileScaleBytes);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kF4Rows / kF4TileRows;
    if (fp4_tiles_loader(ring, w, sc, warp, lane)) return;
    uint8_t* xs = reinterpret_cast<uint8_t*>(ring.empty + stages);  // kF4K codes
    for (int c = int(threadIdx.x) - 32; c < kF4K / 16; c += 32 * CW)
        reinterpret_cast<uint4*>(xs)[c] = __ldcg(reinterpret_cast<const uint4*>(xq) + c);
    asm volatile("bar.sync 1, %0;" ::"r"(32 * CW) : "memory");
    const int cw = warp - 1, g = lane >> 2, t4 = lane & 3;
    int i = cw;
    for (int t = blockIdx.x + i * gridDim.x; t < n_tiles; t += CW * gridDim.x, i += CW) {
        const int ref_g = __ldg(ref + t * R + g);
        const uint8_t* tile = ring_acquire(ring, i);
        float y0 = 0.f, y1 = 0.f;
#pragma unroll 4
        for (int c = 0; c < kChunks; ++c) {
            const int grp = 4 * c + t4;
            const uint4 wv = *reinterpret_cast<const uint4*>(tile + g * kF4RowBytes + grp * 16);
            const uint2 table = group_table(int(tile[kTileBytes + g * kF4Groups + grp]) - ref_g);
            const uint4 xa = *reinterpret_cast<const uint4*>(xs + grp * 32);
            const uint4 xb = *reinterpret_cast<const uint4*>(xs + grp * 32 + 16);
            const uint32_t ww[4] = {wv.x, wv.y, wv.z, wv.w};
            const uint32_t xw[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
            float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                uint32_t lo, hi;
                codes8(ww[j], table, lo, hi);
                mma_e4m3_16832(acc, g == 0 ? xw[2 * j] : 0u, 0u, g == 0 ? xw[2 * j + 1] : 0u, 0u, lo, hi);
            }
            const float s = __ldg(sx + c);
            y0 = fmaf(acc[0], s, y0);
            y1 = fmaf(acc[1], s, y1);
        }
        ring_release(ring, i, lane);
        if (g == 0) {
            const int r0 = t * R + 2 * t4;
            y[r0] = y0 * exp2f(float(int(__ldg(ref + r0)) - 133));
            y[r0 + 1] = y1 * exp2f(float(int(__ldg(ref + r0 + 1)) - 133));
        }
    }
#endif
}

// ||y - ref|| / ||ref|| over n outputs of a device array.
double device_rel_l2(const float* y_dev, const double* ref, int n) {
    std::vector<float> hy(n);
    CK(cudaMemcpy(hy.data(), y_dev, size_t(n) * 4, cudaMemcpyDeviceToHost));
    double num = 0.0, den = 0.0;
    for (int i = 0; i < n; ++i) {
        num += (hy[i] - ref[i]) * (hy[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
}

float e4m3_to_float(uint8_t b) {
    const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
    const float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.f + float(m) / 8.f, e - 7);
    return sign ? -v : v;
}

// x quantized per 128 columns as act_quant does (release numerics): e4m3 codes, power-of-two scales, and the
// dequantized values the references are computed over.
struct BlockE4m3 {
    std::vector<uint8_t> codes;
    std::vector<float> scales, dequant;
};
BlockE4m3 quantize_blocks_e4m3(const std::vector<float>& x) {
    const size_t n = x.size();
    BlockE4m3 q{std::vector<uint8_t>(n), std::vector<float>(n / 128), std::vector<float>(n)};
    for (size_t kb = 0; kb < n / 128; ++kb) {
        float amax = 0.f;
        for (size_t k = kb * 128; k < kb * 128 + 128; ++k) amax = std::max(amax, std::fabs(x[k]));
        q.scales[kb] = std::ldexp(1.f, int(std::ceil(std::log2(std::max(amax, 1e-30f) / 448.f))));
        for (size_t k = kb * 128; k < kb * 128 + 128; ++k) {
            q.codes[k] = uint8_t(__nv_cvt_float_to_fp8(x[k] / q.scales[kb], __NV_SATFINITE, __NV_E4M3));
            q.dequant[k] = e4m3_to_float(q.codes[k]) * q.scales[kb];
        }
    }
    return q;
}

}  // namespace

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);  // line by line: a hang still shows how far the probe got
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    std::mt19937_64 rng(12345);
    std::vector<uint8_t> hw(size_t(kN) * kK);
    for (auto& b : hw) {
        b = uint8_t(rng());
        if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
    }
    std::vector<float> hs(size_t(kN / 128) * kScaleCols), hx(kK);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    for (auto& s : hs) s = std::ldexp(1.f, int(rng() % 8) - 10);
    for (auto& v : hx) v = d(rng);
    std::vector<double> ref(kN, 0.0);
    for (int n = 0; n < kN; ++n)
        for (int k = 0; k < kK; ++k)
            ref[n] += double(e4m3_to_float(hw[size_t(n) * kK + k])) * hs[(n / 128) * kScaleCols + k / 128] * hx[k];

    const size_t wbytes = size_t(kN) * kK;
    uint8_t* w = nullptr;
    float *sc = nullptr, *x = nullptr, *y = nullptr;
    CK(cudaMalloc(&w, wbytes * kCopies));
    CK(cudaMalloc(&sc, hs.size() * 4));
    CK(cudaMalloc(&x, kK * 4));
    CK(cudaMalloc(&y, kN * 4));
    for (int c = 0; c < kCopies; ++c) CK(cudaMemcpy(w + c * wbytes, hw.data(), wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(sc, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x, hx.data(), kK * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    // Per-launch time: the median over 20 event pairs around `batch` launches back to back (each on the next copy of
    // the weights), divided by batch. batch 1 includes the event pair's own overhead (a single launch as the step's
    // first kernel sees it); kBatch is a stream of kernels, the per-kernel step's situation.
    constexpr int kBatch = 8;
    auto time_us = [&](auto launch, int batch) {
        std::vector<float> t;
        for (int it = 0; it < 23; ++it) {
            CK(cudaEventRecord(e0));
            for (int j = 0; j < batch; ++j) launch(w + size_t((it * batch + j) % kCopies) * wbytes);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms = 0.f;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 3) t.push_back(ms * 1000.f / float(batch));
        }
        std::sort(t.begin(), t.end());
        return double(t[t.size() / 2]);
    };
    auto median_us = [&](auto launch) { return time_us(launch, kBatch); };
    auto single_us = [&](auto launch) { return time_us(launch, 1); };
    // The copy rate in this process: 1 GiB device to device, read + write.
    void *ca = nullptr, *cb = nullptr;
    const size_t cbytes = size_t(1) << 30;
    CK(cudaMalloc(&ca, cbytes));
    CK(cudaMalloc(&cb, cbytes));
    CK(cudaMemset(ca, 1, cbytes));
    const double copy_us =
        single_us([&](const uint8_t*) { CK(cudaMemcpyAsync(cb, ca, cbytes, cudaMemcpyDeviceToDevice)); });
    const double copy_gbs = 2.0 * double(cbytes) / (copy_us * 1e3);
    printf("copy rate: %.1f GB/s (cudaMemcpy, 1 GiB, read + write); %d SMs; weights %.1f MB\n", copy_gbs, sms,
           wbytes / 1e6);
    CK(cudaFree(ca));
    CK(cudaFree(cb));

    int failed = 0;
    auto report = [&](const char* name, double us, double single, bool check) {
        double err = 0.0;
        if (check) {
            err = device_rel_l2(y, ref.data(), kN);
            failed += !(err < 1e-5);
        }
        const double gbs = double(wbytes) / (us * 1e3);
        printf("%-28s %8.2f us %8.1f GB/s %5.1f%% of copy (single launch %6.2f us, %5.1f%%)  %s\n", name, us, gbs,
               100.0 * gbs / copy_gbs, single, 100.0 * double(wbytes) / (single * 1e3) / copy_gbs,
               check ? (err < 1e-5 ? "check ok" : "CHECK FAILED") : "");
        if (check) printf("%-28s relative L2 error %.2e\n", "", err);
    };
    // One traced launch: where a ring kernel's time goes inside the kernel (ring_kernel's trace layout).
    long long* dtrace = nullptr;
    CK(cudaMalloc(&dtrace, size_t(sms) * kTraceSlots * sizeof(long long)));
    auto summarize_trace = [&](const char* name) {
        std::vector<long long> tr(size_t(sms) * kTraceSlots);
        CK(cudaMemcpy(tr.data(), dtrace, tr.size() * sizeof(long long), cudaMemcpyDeviceToHost));
        const int n_tiles = kN / kTileRows;
        long long t_min = LLONG_MAX, t_max = 0, s_max = 0;
        std::vector<double> first, compute, release, wait, loader_last, waits_sum;
        const double cyc_per_ns = double(tr[3] - tr[0]) / double(tr[2] - tr[1]);
        for (int b = 0; b < sms; ++b) {
            const long long* c = tr.data() + size_t(b) * kTraceSlots;
            t_min = std::min(t_min, c[1]);
            s_max = std::max(s_max, c[1]);
            t_max = std::max(t_max, c[2]);
            const int tiles = std::min(kTraceTiles, (n_tiles - b + sms - 1) / sms);
            first.push_back(double(c[4] - c[0]));
            double ws = 0.0;
            for (int i = 0; i < tiles; ++i) {
                compute.push_back(double(c[5 + 3 * i] - c[4 + 3 * i]));
                release.push_back(double(c[6 + 3 * i] - c[5 + 3 * i]));
                if (i > 0) {
                    wait.push_back(double(c[4 + 3 * i] - c[6 + 3 * (i - 1)]));
                    ws += wait.back();
                }
            }
            waits_sum.push_back(ws);
            loader_last.push_back(double(c[4 + 3 * kTraceTiles + tiles - 1] - c[0]));
        }
        auto med = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        auto us = [&](double cycles) { return cycles / cyc_per_ns / 1e3; };
        printf("  trace %s: in-kernel span %.2f us (CTA starts spread %.2f us), clock %.2f GHz; medians: first tile "
               "%.2f us after start, per tile dot products %.3f us, release %.3f us, wait for the next tile %.3f us "
               "(sum %.2f us per CTA), loader's last fill issued %.2f us after start\n",
               name, double(t_max - t_min) / 1e3, double(s_max - t_min) / 1e3, cyc_per_ns, us(med(first)),
               us(med(compute)), us(med(release)), us(med(wait)), us(med(waits_sum)), us(med(loader_last)));
        const long long* c = tr.data();
        printf("  trace %s: CTA 0 tile arrivals (us after start):", name);
        for (int i = 0; i < std::min(kTraceTiles, (n_tiles + sms - 1) / sms); ++i)
            printf(" %.2f", us(double(c[4 + 3 * i] - c[0])));
        printf("\n");
    };

    CK(cudaMemset(y, 0xff, kN * 4));
    {
        auto regs = [&](const uint8_t* wc) { regs_kernel<<<kN / kTileRows, 128>>>(wc, sc, x, y); };
        report("regs (simt_gemv form)", median_us(regs), single_us(regs), true);
    }
    for (int stages : {4, 8, 12}) {
        const size_t smem = size_t(stages) * kTileBytes + size_t(stages) * 16 + kK * 4;
        auto run = [&](auto kernel, int cw, bool compute, const char* form) {
            CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(cudaMemset(y, 0xff, kN * 4));
            auto launch = [&](const uint8_t* wc) {
                kernel<<<sms, 32 * (cw + 1), smem>>>(wc, sc, x, y, stages, nullptr);
            };
            const double us = median_us(launch), single = single_us(launch);
            CK(cudaGetLastError());
            char name[64];
            snprintf(name, sizeof name, "%s %2d stages, %d warps", form, stages, cw);
            report(name, us, single, compute);
            if (stages == 8) {
                kernel<<<sms, 32 * (cw + 1), smem>>>(w, sc, x, y, stages, dtrace);
                CK(cudaDeviceSynchronize());
                summarize_trace(name);
            }
        };
        run(ring_kernel<false, 8>, 8, false, "copy");
        run(ring_kernel<true, 4>, 4, true, "ring");
        run(ring_kernel<true, 8>, 8, true, "ring");
        // A warp waits for its next fill only after consuming its previous one: with stages a multiple of CW a
        // stage is never two phases behind its waiter (a parity wait would pass on the older phase).
        if (stages % 4 == 0) run(ring_tiles_kernel<4, 4>, 4, true, "tiles/4");
        if (stages % 8 == 0) run(ring_tiles_kernel<8, 4>, 8, true, "tiles/4");
        if (stages % 8 == 0) run(ring_tiles_kernel<8, 8>, 8, true, "tiles/8");
        if (stages % 12 == 0) run(ring_tiles_kernel<12, 4>, 12, true, "tiles/4");
    }
    // The tiles ring with tensor-core arithmetic: mma (x as f16) and mma8 (x as e4m3 codes with a power-of-two scale
    // per 128 columns, the smallest with |x| / scale <= 448); each reference takes x as its kernel sees it.
    {
        auto reference = [&](const std::vector<float>& xk) {
            std::vector<double> r(kN, 0.0);
            for (int n = 0; n < kN; ++n)
                for (int k = 0; k < kK; ++k)
                    r[n] += double(e4m3_to_float(hw[size_t(n) * kK + k])) * hs[(n / 128) * kScaleCols + k / 128] *
                            double(xk[k]);
            return r;
        };
        std::vector<float> x16(kK);
        for (int k = 0; k < kK; ++k) x16[k] = __half2float(__float2half_rn(hx[k]));
        const BlockE4m3 hq = quantize_blocks_e4m3(hx);
        const std::vector<double> ref16 = reference(x16), ref8 = reference(hq.dequant);
        uint8_t* xq = nullptr;
        float* sx = nullptr;
        CK(cudaMalloc(&xq, kK));
        CK(cudaMalloc(&sx, kScaleCols * 4));
        CK(cudaMemcpy(xq, hq.codes.data(), kK, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(sx, hq.scales.data(), kScaleCols * 4, cudaMemcpyHostToDevice));
        // One form at `stages` with cw compute warps: timed, checked, and the per-tile arithmetic the planner's
        // us_per_kweight stands for if the kernel were arithmetic-bound (a warp's share of the tiles over its time).
        auto run = [&](const char* form, auto kernel, int stages, int cw, size_t x_bytes, const std::vector<double>& r,
                       auto launch_with) {
            if (stages % cw) return;  // a warp's next fill must never be two phases behind (see tiles above)
            const size_t smem = size_t(stages) * kTileBytes + size_t(stages) * 16 + x_bytes;
            CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(cudaMemset(y, 0xff, kN * 4));
            auto launch = [&](const uint8_t* wc) { launch_with(kernel, wc, smem); };
            const double us = median_us(launch), single = single_us(launch);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            const double err = device_rel_l2(y, r.data(), kN);
            failed += !(err < 1e-5);
            const double gbs = double(wbytes) / (us * 1e3);
            const double tiles_per_warp = double(kN / kTileRows) / double(sms * cw);
            printf("%-4s %2d stages, %2d warps       %8.2f us %8.1f GB/s %5.1f%% of copy (single launch %6.2f us)  "
                   "%s (rel L2 %.2e); <= %.3f us per 1,024 weights\n",
                   form, stages, cw, us, gbs, 100.0 * gbs / copy_gbs, single, err < 1e-5 ? "check ok" : "CHECK FAILED",
                   err, us / tiles_per_warp / (kTileBytes / 1024.0));
        };
        for (int stages : {8, 12})
            for (int cw : {4, 8}) {
                auto f16 = [&](auto kernel, const uint8_t* wc, size_t smem) {
                    kernel<<<sms, 32 * (cw + 1), smem>>>(wc, sc, x, nullptr, y, stages);
                };
                auto e4m3 = [&](auto kernel, const uint8_t* wc, size_t smem) {
                    kernel<<<sms, 32 * (cw + 1), smem>>>(wc, sc, xq, sx, y, stages);
                };
                if (cw == 4) {
                    run("mma", ring_mma_kernel<4, false>, stages, cw, kK * 6, ref16, f16);
                    run("mma8", ring_mma_kernel<4, true>, stages, cw, kK, ref8, e4m3);
                } else {
                    run("mma", ring_mma_kernel<8, false>, stages, cw, kK * 6, ref16, f16);
                    run("mma8", ring_mma_kernel<8, true>, stages, cw, kK, ref8, e4m3);
                }
            }
        CK(cudaFree(xq));
        CK(cudaFree(sx));
    }
    // The same bytes as wo_a-wide (8,192 x 4,096) and wo_b-shaped (4,096 x 8,192) rows through the tiles ring.
    enum class Wide { Tiles, TilesScalesInRing, Chunks, ChunksInterleaved, ChunksCopy };
    auto wide = [&](auto kernel, int K, Wide form) {
        const int N = kN * kK / K;
        std::vector<float> hxw(K);
        for (auto& v : hxw) v = d(rng);
        std::vector<double> refw(N, 0.0);
        const int SC = K / 128;
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k)
                refw[n] += double(e4m3_to_float(hw[size_t(n) * K + k])) * hs[(n / 128) * SC + k / 128] * hxw[k];
        float* xw = nullptr;
        CK(cudaMalloc(&xw, K * 4));
        CK(cudaMemcpy(xw, hxw.data(), K * 4, cudaMemcpyHostToDevice));
        const int stages = 8, cw = 8;
        const bool chunks = form == Wide::Chunks || form == Wide::ChunksInterleaved || form == Wide::ChunksCopy;
        const bool check = form != Wide::ChunksCopy;
        // ring_kchunk_kernel: K activations, partials and counters after the ring; ring_wide_kernel: the padded
        // activations and (staged form) the scales, or stages widened by a scale row.
        const size_t smem =
            chunks ? size_t(stages) * kTileBytes + size_t(stages) * 16 + size_t(K) * 4 +
                         size_t(4) * (K / 1024) * kTileRows * 4 + 64
                   : size_t(stages) * (kTileBytes + (form == Wide::TilesScalesInRing ? kWideScaleBytes : 0)) +
                         size_t(stages) * 16 + size_t(K / 16 * 20) * 4 + size_t(N / 128 * SC) * 4;
        static const char* const kNames[] = {"tiles", "tiles+scales", "chunks", "chunks/il", "copy 1KB"};
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        CK(cudaMemset(y, 0xff, kN * 4));
        auto launch = [&](const uint8_t* wc) {
            kernel<<<sms, 32 * (cw + 1), smem>>>(wc, sc, xw, y, stages, nullptr);
        };
        const double us = median_us(launch), single = single_us(launch);
        CK(cudaGetLastError());
        const double err = check ? device_rel_l2(y, refw.data(), N) : 0.0;
        kernel<<<sms, 32 * (cw + 1), smem>>>(w, sc, xw, y, stages, dtrace);
        CK(cudaDeviceSynchronize());
        std::vector<long long> tw(size_t(sms) * 4);
        CK(cudaMemcpy(tw.data(), dtrace, tw.size() * sizeof(long long), cudaMemcpyDeviceToHost));
        std::vector<double> staged, first;
        long long t0 = LLONG_MAX, t1 = 0;
        for (int b = 0; b < sms; ++b) {
            t0 = std::min(t0, tw[4 * b]);
            t1 = std::max(t1, tw[4 * b + 3]);
            staged.push_back(double(tw[4 * b + 1] - tw[4 * b]) / 1e3);
            first.push_back(double(tw[4 * b + 2] - tw[4 * b]) / 1e3);
        }
        std::sort(staged.begin(), staged.end());
        std::sort(first.begin(), first.end());
        printf("  trace: in-kernel span %.2f us; medians: activations staged %.2f us, first tile %.2f us after "
               "start (max %.2f / %.2f)\n",
               double(t1 - t0) / 1e3, staged[staged.size() / 2], first[first.size() / 2], staged.back(),
               first.back());
        failed += !(err < 1e-5);
        const double gbs = double(wbytes) / (us * 1e3);
        printf("wide %5d x %4d %-12s 8 st %d w %8.2f us %8.1f GB/s %5.1f%% of copy (single launch %6.2f us)  %s "
               "(relative L2 error %.2e)\n",
               N, K, kNames[int(form)], cw, us, gbs, 100.0 * gbs / copy_gbs, single,
               !check ? "not checked" : err < 1e-5 ? "check ok" : "CHECK FAILED", err);
        CK(cudaFree(xw));
    };
    wide(ring_wide_kernel<4096, 8>, 4096, Wide::Tiles);
    wide(ring_wide_kernel<8192, 8>, 8192, Wide::Tiles);
    wide(ring_wide_kernel<4096, 8, true>, 4096, Wide::TilesScalesInRing);
    wide(ring_wide_kernel<8192, 8, true>, 8192, Wide::TilesScalesInRing);
    wide(ring_kchunk_kernel<4096>, 4096, Wide::Chunks);
    wide(ring_kchunk_kernel<8192>, 8192, Wide::Chunks);
    wide(ring_kchunk_kernel<8192, true, true>, 8192, Wide::ChunksInterleaved);
    wide(ring_kchunk_kernel<8192, false>, 8192, Wide::ChunksCopy);

    // Two dependent GEMVs (16.8 MB each): back-to-back launches of the register form against one persistent kernel.
    {
        std::vector<double> ref_b(kChainRows, 0.0);
        for (int n = 0; n < kChainRows; ++n)
            for (int k = 0; k < kK; ++k)
                ref_b[n] += double(e4m3_to_float(hw[size_t(kChainRows + n) * kK + k])) *
                            hs[((kChainRows + n) / 128) * kScaleCols + k / 128] * ref[k];
        float* yb = nullptr;
        unsigned* done = nullptr;
        CK(cudaMalloc(&yb, kChainRows * 4));
        CK(cudaMalloc(&done, 1024 * sizeof(unsigned)));
        auto check_chain = [&](const char* name, double us) {
            const double err =
                std::max(device_rel_l2(y, ref.data(), kChainRows), device_rel_l2(yb, ref_b.data(), kChainRows));
            failed += !(err < 1e-5);
            const double gbs = 2.0 * double(kChainRows) * kK / (us * 1e3);
            printf("%-28s %8.2f us %8.1f GB/s %5.1f%% of copy  %s (relative L2 error %.2e)\n", name, us, gbs,
                   100.0 * gbs / copy_gbs, err < 1e-5 ? "check ok" : "CHECK FAILED", err);
        };
        CK(cudaMemset(y, 0xff, kN * 4));
        CK(cudaMemset(yb, 0xff, kChainRows * 4));
        check_chain("chain: two regs launches", median_us([&](const uint8_t* wc) {
                        regs_kernel<<<kChainTiles, 128>>>(wc, sc, x, y);
                        regs_kernel<<<kChainTiles, 128>>>(wc + size_t(kChainRows) * kK,
                                                          sc + (kChainRows / 128) * kScaleCols, y, yb);
                    }));
        for (int stages : {8, 12}) {
            const size_t smem = size_t(stages) * kTileBytes + size_t(stages) * 16 + kK * 4;
            CK(cudaFuncSetAttribute(chain_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(cudaMemset(y, 0xff, kN * 4));
            CK(cudaMemset(yb, 0xff, kChainRows * 4));
            int it = 0;
            CK(cudaMemset(done, 0, 1024 * sizeof(unsigned)));
            const double us = median_us([&](const uint8_t* wc) {
                chain_kernel<8><<<std::min(sms, kChainTiles), 32 * 9, smem>>>(wc, sc, x, y, yb, done + it++, stages,
                                                                            nullptr);
            });
            CK(cudaGetLastError());
            char name[64];
            snprintf(name, sizeof name, "chain: persistent, %2d stages", stages);
            check_chain(name, us);
            const int grid = std::min(sms, kChainTiles);
            chain_kernel<8><<<grid, 32 * 9, smem>>>(w, sc, x, y, yb, done + it++, stages, dtrace);
            CK(cudaDeviceSynchronize());
            std::vector<long long> ct(size_t(grid) * 4);
            CK(cudaMemcpy(ct.data(), dtrace, ct.size() * sizeof(long long), cudaMemcpyDeviceToHost));
            long long t0 = LLONG_MAX, a_last = 0, pass_first = LLONG_MAX, pass_last = 0, end = 0;
            for (int b = 0; b < grid; ++b) {
                t0 = std::min(t0, ct[4 * b]);
                a_last = std::max(a_last, ct[4 * b + 1]);
                pass_first = std::min(pass_first, ct[4 * b + 2]);
                pass_last = std::max(pass_last, ct[4 * b + 2]);
                end = std::max(end, ct[4 * b + 3]);
            }
            printf("  trace %s: last CTA done with A %.2f us after the first start, barrier passed %.2f .. %.2f us, "
                   "last CTA done with B %.2f us\n",
                   name, (a_last - t0) / 1e3, (pass_first - t0) / 1e3, (pass_last - t0) / 1e3, (end - t0) / 1e3);
        }
        {
            const int stages = 8;
            const size_t smem = size_t(stages) * kTileBytes + size_t(stages) * 16 + kK * 4;
            CK(cudaFuncSetAttribute(chain_tiles_kernel<8, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(cudaMemset(y, 0xff, kN * 4));
            CK(cudaMemset(yb, 0xff, kChainRows * 4));
            CK(cudaMemset(done, 0, 1024 * sizeof(unsigned)));
            int it = 0;
            const double us = median_us([&](const uint8_t* wc) {
                chain_tiles_kernel<8, 8><<<std::min(sms, kChainTiles), 32 * 9, smem>>>(wc, sc, x, y, yb, done + it++,
                                                                                     stages);
            });
            CK(cudaGetLastError());
            check_chain("chain: persistent tiles, 8", us);
        }
        CK(cudaFree(yb));
        CK(cudaFree(done));
    }
    // FP4 (the routed experts' up-projection bytes) through the ring.
    {
        const size_t f4bytes = size_t(kF4Rows) * kF4RowBytes;
        std::vector<uint8_t> h4(f4bytes), hs4(size_t(kF4Rows) * kF4Groups);
        for (auto& b : h4) b = uint8_t(rng());
        for (auto& b : hs4) b = uint8_t(127 - 6 + rng() % 4);  // 2^-6 .. 2^-3
        std::vector<float> hx4(kF4K);
        for (auto& v : hx4) v = d(rng);
        static const float kE2m1[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
        // The rows against activations xk (double sums of the exact products).
        auto fp4_reference = [&](const std::vector<float>& xk) {
            std::vector<double> r(kF4Rows, 0.0);
            for (int n = 0; n < kF4Rows; ++n)
                for (int g = 0; g < kF4Groups; ++g) {
                    double part = 0.0;
                    for (int k = 32 * g; k < 32 * g + 32; ++k) {
                        const uint8_t nib = (h4[size_t(n) * kF4RowBytes + k / 2] >> (4 * (k & 1))) & 15;
                        part += (nib & 8 ? -1.0 : 1.0) * kE2m1[nib & 7] * xk[k];
                    }
                    r[n] += part * std::ldexp(1.0, int(hs4[size_t(n) * kF4Groups + g]) - 127);
                }
            return r;
        };
        const std::vector<double> ref4 = fp4_reference(hx4);
        uint8_t *w4 = nullptr, *s4 = nullptr;
        float *x4 = nullptr, *y4 = nullptr;
        const int copies4 = 5;  // 267 MB with the scales: more than L2
        CK(cudaMalloc(&w4, f4bytes * copies4));
        CK(cudaMalloc(&s4, hs4.size()));
        CK(cudaMalloc(&x4, kF4K * 4));
        CK(cudaMalloc(&y4, kF4Rows * 4));
        for (int c = 0; c < copies4; ++c) CK(cudaMemcpy(w4 + c * f4bytes, h4.data(), f4bytes, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(s4, hs4.data(), hs4.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(x4, hx4.data(), kF4K * 4, cudaMemcpyHostToDevice));
        for (int stages : {8, 12}) {
            const size_t smem = size_t(stages) * kTileBytes + size_t(stages) * 16 + size_t(kF4Groups) * kF4Stride * 4;
            CK(cudaFuncSetAttribute(ring_fp4_kernel<kF4TileRows>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
            CK(cudaMemset(y4, 0xff, kF4Rows * 4));
            int it = 0;
            const double us = median_us([&](const uint8_t*) {
                ring_fp4_kernel<kF4TileRows><<<sms, 32 * (kF4TileRows + 1), smem>>>(w4 + (it++ % copies4) * f4bytes,
                                                                                   s4, x4, y4, stages);
            });
            CK(cudaGetLastError());
            const double err = device_rel_l2(y4, ref4.data(), kF4Rows);
            failed += !(err < 1e-5);
            const double gbs = double(f4bytes + hs4.size()) / (us * 1e3);
            printf("fp4 ring %2d stages, %d warps %8.2f us %8.1f GB/s %5.1f%% of copy  %s (relative L2 error %.2e)\n",
                   stages, kF4TileRows, us, gbs, 100.0 * gbs / copy_gbs, err < 1e-5 ? "check ok" : "CHECK FAILED", err);
        }
        auto cols = [&](auto kernel, int stages, int stride, const char* form) {
            const size_t smem = size_t(stages) * stride + size_t(stages) * 16 + size_t(kF4K) * 4 +
                                size_t(2) * kF4ColWarps * kF4TileRows * 4;
            CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(cudaMemset(y4, 0xff, kF4Rows * 4));
            int it = 0;
            const double us = median_us([&](const uint8_t*) {
                kernel<<<sms, 32 * (kF4ColWarps + 1), smem>>>(w4 + (it++ % copies4) * f4bytes, s4, x4, y4, stages);
            });
            CK(cudaGetLastError());
            const double err = device_rel_l2(y4, ref4.data(), kF4Rows);
            failed += !(err < 1e-5);
            const double gbs = double(f4bytes + hs4.size()) / (us * 1e3);
            printf("fp4 %s %2d stages, %d warps %8.2f us %8.1f GB/s %5.1f%% of copy  %s (relative L2 error %.2e)\n",
                   form, stages, kF4ColWarps, us, gbs, 100.0 * gbs / copy_gbs,
                   err < 1e-5 ? "check ok" : "CHECK FAILED", err);
        };
        {
            // fp4 mma: x as e4m3 codes per 128 columns (as mma8), the rows' reference exponents (their largest group
            // exponent), and a reference over the dequantized x.
            std::vector<uint8_t> href(kF4Rows);
            const BlockE4m3 hq4 = quantize_blocks_e4m3(hx4);
            const std::vector<double> ref4q = fp4_reference(hq4.dequant);
            for (int n = 0; n < kF4Rows; ++n)
                href[n] = *std::max_element(hs4.begin() + size_t(n) * kF4Groups, hs4.begin() + size_t(n + 1) * kF4Groups);
            uint8_t *xq4 = nullptr, *dref = nullptr;
            float* sx4 = nullptr;
            CK(cudaMalloc(&xq4, kF4K));
            CK(cudaMalloc(&dref, kF4Rows));
            CK(cudaMalloc(&sx4, hq4.scales.size() * 4));
            CK(cudaMemcpy(xq4, hq4.codes.data(), kF4K, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dref, href.data(), kF4Rows, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(sx4, hq4.scales.data(), hq4.scales.size() * 4, cudaMemcpyHostToDevice));
            auto fp4_mma = [&](auto kernel, int stages, int cw) {
                if (stages % cw) return;
                const size_t smem = size_t(stages) * (kTileBytes + kF4TileScaleBytes) + size_t(stages) * 16 + kF4K;
                CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
                CK(cudaMemset(y4, 0xff, kF4Rows * 4));
                int it = 0;
                const double us = median_us([&](const uint8_t*) {
                    kernel<<<sms, 32 * (cw + 1), smem>>>(w4 + (it++ % copies4) * f4bytes, s4, dref, xq4, sx4, y4, stages);
                });
                CK(cudaGetLastError());
                const double err = device_rel_l2(y4, ref4q.data(), kF4Rows);
                failed += !(err < 1e-5);
                const double gbs = double(f4bytes + hs4.size()) / (us * 1e3);
                const double tiles_per_warp = double(kF4Rows / kF4TileRows) / double(sms * cw);
                printf("fp4 mma %2d stages, %d warps  %8.2f us %8.1f GB/s %5.1f%% of copy  %s (relative L2 error %.2e); "
                       "<= %.3f us per 1,024 weights\n",
                       stages, cw, us, gbs, 100.0 * gbs / copy_gbs, err < 1e-5 ? "check ok" : "CHECK FAILED", err,
                       us / tiles_per_warp / (2.0 * kTileBytes / 1024.0));
            };
            for (int stages : {8, 12}) {
                fp4_mma(ring_fp4_mma_kernel<4>, stages, 4);
                fp4_mma(ring_fp4_mma_kernel<8>, stages, 8);
            }
            CK(cudaFree(xq4));
            CK(cudaFree(dref));
            CK(cudaFree(sx4));
        }
        for (int stages : {8, 12}) {
            cols(ring_fp4_cols_kernel<false>, stages, kTileBytes, "cols");
            cols(ring_fp4_cols_kernel<true>, stages, kTileBytes + kF4TileScaleBytes, "cols+scales");
            if (stages % kF4ColWarps == 0)
                cols(ring_fp4_tiles_kernel, stages, kTileBytes + kF4TileScaleBytes, "tiles+scales");
        }
        CK(cudaFree(w4));
        CK(cudaFree(s4));
        CK(cudaFree(x4));
        CK(cudaFree(y4));
    }
    printf("%s\n", failed ? "weight_stream_probe: CHECK FAILED" : "weight_stream_probe: every check ok");
    return failed ? 1 : 0;
}
