// Standalone H200 probe for the persistent decode step's weight stream (docs/decode-step-design.md, stage 1): how
// fast a one-token FP8 GEMV of wq_b's shape (32,768 x 1,024 e4m3, fp32 scales per 128 x 128 block, 33.6 MB) runs
//   - regs:  one 16-row tile per 4-warp CTA, 16-byte register loads issued before the activation is staged
//            (simt_gemv's form, the per-kernel step's GEMV);
//   - ring:  one CTA per SM for the whole matrix; a loader lane streams the CTA's 16-row tiles (16 KB contiguous
//            each, tiles blockIdx.x, blockIdx.x + grid, ...) by cp.async.bulk into a ring of shared-memory stages
//            (mbarriers full / empty) while compute warps do the SIMT dot products from shared memory;
//   - copy:  the same ring with the compute warps only releasing the stages (the stream's own ceiling);
//   - chain: two dependent 8.4 MB GEMVs (B's input is A's output: a grid-wide counter between them) as two
//            launches of the register form against one persistent ring kernel whose loader streams B's tiles while
//            A finishes and the grid waits (stage 1's mechanism);
//   - fp4:   the routed experts' up-projection bytes (24,576 x 4,096 e2m1 with E8M0 group scales, 53 MB) through
//            the ring with SIMT widening (numeric.cuh's e2m1x8_to_f16x2x4_scaled), where the per-kernel step reaches
//            28% of the copy rate.
// Ring depths 4 / 8 / 12 stages and 4 / 8 compute warps. Each variant's output is checked against a CPU reference
// (double sums of the exact products: relative L2 error); times are the median of 30 launches rotating over 8
// copies of the weights (269 MB, more than L2), against cudaMemcpy device to device in the same process (counted
// as read + write, as `flashseek bench` counts it).
// Build: nvcc -O3 -std=c++20 --expt-relaxed-constexpr -arch=sm_90a -Isrc -o weight_stream_probe \
//        scripts/probes/weight_stream_probe.cu
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/warp_reduce.cuh"
#include "cuda/gemm/mma_core.cuh"
#include "probe_check.h"

namespace {

constexpr int kN = 32768, kK = 1024, kTileRows = 16, kTileBytes = kTileRows * kK, kCopies = 8;
constexpr int kScaleCols = kK / 128;

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
};

// Thread 0 initializes the barriers; the caller syncs the CTA before first use.
__device__ __forceinline__ Ring make_ring(uint8_t* smem, int stages, int consumers) {
    using namespace flashseek::cuda::bulk;
    Ring r{smem, reinterpret_cast<uint64_t*>(smem + size_t(stages) * kTileBytes), nullptr, stages};
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
// The loader lane: waits until fill i's stage was released by every compute warp (its previous round), then
// copies the 16 KB tile at src into it.
__device__ __forceinline__ void ring_fill(const Ring& r, int i, const uint8_t* src) {
    using namespace flashseek::cuda::bulk;
    const int s = i % r.stages, round = i / r.stages;
    if (round > 0) mbar_wait(&r.empty[s], uint32_t((round - 1) & 1));
    mbar_expect_tx(&r.full[s], kTileBytes);
    copy_g2s(r.buf + size_t(s) * kTileBytes, src, kTileBytes, &r.full[s]);
}
// The loader lane over the CTA's tiles blockIdx.x, blockIdx.x + grid, ... of n_tiles contiguous 16 KB tiles at w.
__device__ __forceinline__ void ring_load_strided(const Ring& r, const uint8_t* w, int n_tiles) {
    int i = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++i) ring_fill(r, i, w + size_t(t) * kTileBytes);
}
// A compute warp: waits for fill i, returns its tile.
__device__ __forceinline__ const uint8_t* ring_acquire(const Ring& r, int i) {
    const int s = i % r.stages;
    flashseek::cuda::bulk::mbar_wait(&r.full[s], uint32_t((i / r.stages) & 1));
    return r.buf + size_t(s) * kTileBytes;
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
template <int RPW>
__device__ __forceinline__ void tile_rows(const uint8_t* tile, int t, int cw, int lane, const float (&xv)[2][16],
                                          const float* sc, float* y) {
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr) {
        const int lr = cw * RPW + rr, row = t * kTileRows + lr;
        float acc = 0.f;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int col = u * 512 + lane * 16;
            const uint4 v = *reinterpret_cast<const uint4*>(tile + lr * kK + col);
            acc = fmaf(dot16(v, xv[u]), sc[(row / 128) * kScaleCols + col / 128], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) y[row] = acc;
    }
}

// A lane's 32 activations (columns lane * 16 + u * 512), through L2.
__device__ __forceinline__ void lane_activations(float (&xv)[2][16], const float* x, int lane) {
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int j = 0; j < 16; ++j) xv[u][j] = __ldcg(x + u * 512 + lane * 16 + j);
}

// ---- ring: one CTA per SM, warp 0 lane 0 loads, CW compute warps of 16 / CW rows each ---------------------------
template <bool COMPUTE, int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    ring_kernel(const uint8_t* w, const float* sc, const float* x, float* y, int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, CW);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, n_tiles = kN / kTileRows;
    if (warp == 0) {
        if (lane == 0) ring_load_strided(ring, w, n_tiles);
        return;
    }
    float xv[2][16];
    lane_activations(xv, x, lane);
    int i = 0;
    for (int t = blockIdx.x; t < n_tiles; t += gridDim.x, ++i) {
        const uint8_t* tile = ring_acquire(ring, i);
        if constexpr (COMPUTE) tile_rows<kTileRows / CW>(tile, t, warp - 1, lane, xv, sc, y);
        ring_release(ring, i, lane);
    }
#endif
}

// ---- chain: two dependent GEMVs in one persistent kernel (stage 1's mechanism) ----------------------------------
// A = rows [0, kChainRows) of the matrix on x, B = rows [kChainRows, 2 kChainRows) on A's first kK outputs; B starts
// only when every compute warp of the grid has finished its A tiles (a counter, release / acquire), but the loader
// streams B's tiles right behind A's whatever the dependency: the ring holds B's first tiles while A's tail and
// the wait run.
constexpr int kChainRows = 8192, kChainTiles = kChainRows / kTileRows;

template <int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1)
    chain_kernel(const uint8_t* w, const float* sc, const float* x, float* ya, float* yb, unsigned* done,
                 int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    const Ring ring = make_ring(smem, stages, CW);
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    // The CTA's tiles: A's blockIdx.x, blockIdx.x + grid, ..., then B's the same way (B's tile t is matrix tile
    // kChainTiles + t). The host keeps the grid below kChainTiles: every CTA has A tiles, so every compute warp
    // reaches the counter.
    const int per_op = (kChainTiles - int(blockIdx.x) + int(gridDim.x) - 1) / int(gridDim.x);
    auto tile_of = [&](int i) {
        return (i < per_op ? 0 : kChainTiles) + int(blockIdx.x) + (i % per_op) * int(gridDim.x);
    };
    if (warp == 0) {
        if (lane == 0)
            for (int i = 0; i < 2 * per_op; ++i) ring_fill(ring, i, w + size_t(tile_of(i)) * kTileBytes);
        return;
    }
    float xv[2][16];
    lane_activations(xv, x, lane);
    for (int i = 0; i < 2 * per_op; ++i) {
        if (i == per_op) {
            // A is done here: publish, then wait for every compute warp of the grid and read B's input.
            __syncwarp();
            if (lane == 0) {
                __threadfence();
                atomicAdd(done, 1u);
                const unsigned target = gridDim.x * CW;
                unsigned seen = 0;
                do {
                    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(done) : "memory");
                } while (seen < target);
            }
            __syncwarp();
            lane_activations(xv, ya, lane);
        }
        const uint8_t* tile = ring_acquire(ring, i);
        tile_rows<kTileRows / CW>(tile, tile_of(i), warp - 1, lane, xv, sc, i < per_op ? ya : yb - kChainRows);
        ring_release(ring, i, lane);
    }
#endif
}

// ---- fp4: the routed experts' up-projection bytes (6 experts x w1, w3: 24,576 rows x 4,096 e2m1, E8M0 scales per
// 32 columns, 50 MB + 3 MB) through the same ring, one row of a 16 KB tile (8 rows x 2 KB) per compute warp -------
constexpr int kF4Rows = 24576, kF4K = 4096, kF4RowBytes = kF4K / 2, kF4TileRows = kTileBytes / kF4RowBytes;
constexpr int kF4Groups = kF4K / 32, kF4Stride = 36;  // staged activations: 32 columns + 4 floats of padding

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
            float part = 0.f;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                uint32_t h[4];
                flashseek::cuda::e2m1x8_to_f16x2x4_scaled(words[q], h);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h[j]));
                    part = fmaf(f.x, xg[q * 8 + 2 * j], part);
                    part = fmaf(f.y, xg[q * 8 + 2 * j + 1], part);
                }
            }
            const float scale = __uint_as_float(uint32_t(sc[size_t(row) * kF4Groups + g]) << 23) * 16384.f;
            acc = fmaf(part, scale, acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) y[row] = acc;
        ring_release(ring, i, lane);
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

}  // namespace

int main() {
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

    auto median_us = [&](auto launch) {
        std::vector<float> t;
        for (int it = 0; it < 33; ++it) {
            CK(cudaEventRecord(e0));
            launch(w + size_t(it % kCopies) * wbytes);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms = 0.f;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 3) t.push_back(ms * 1000.f);
        }
        std::sort(t.begin(), t.end());
        return double(t[t.size() / 2]);
    };
    // The copy rate in this process: 1 GiB device to device, read + write.
    void *ca = nullptr, *cb = nullptr;
    const size_t cbytes = size_t(1) << 30;
    CK(cudaMalloc(&ca, cbytes));
    CK(cudaMalloc(&cb, cbytes));
    CK(cudaMemset(ca, 1, cbytes));
    const double copy_us =
        median_us([&](const uint8_t*) { CK(cudaMemcpyAsync(cb, ca, cbytes, cudaMemcpyDeviceToDevice)); });
    const double copy_gbs = 2.0 * double(cbytes) / (copy_us * 1e3);
    printf("copy rate: %.1f GB/s (cudaMemcpy, 1 GiB, read + write); %d SMs; weights %.1f MB\n", copy_gbs, sms,
           wbytes / 1e6);
    CK(cudaFree(ca));
    CK(cudaFree(cb));

    int failed = 0;
    auto report = [&](const char* name, double us, bool check) {
        double err = 0.0;
        if (check) {
            err = device_rel_l2(y, ref.data(), kN);
            failed += !(err < 1e-5);
        }
        const double gbs = double(wbytes) / (us * 1e3);
        printf("%-28s %8.2f us %8.1f GB/s %5.1f%% of copy  %s\n", name, us, gbs, 100.0 * gbs / copy_gbs,
               check ? (err < 1e-5 ? "check ok" : "CHECK FAILED") : "");
        if (check) printf("%-28s relative L2 error %.2e\n", "", err);
    };

    CK(cudaMemset(y, 0xff, kN * 4));
    report("regs (simt_gemv form)",
           median_us([&](const uint8_t* wc) { regs_kernel<<<kN / kTileRows, 128>>>(wc, sc, x, y); }), true);
    for (int stages : {4, 8, 12}) {
        const size_t smem = size_t(stages) * kTileBytes + size_t(stages) * 16;
        auto run = [&](auto kernel, int cw, bool compute) {
            CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(cudaMemset(y, 0xff, kN * 4));
            const double us = median_us([&](const uint8_t* wc) {
                kernel<<<sms, 32 * (cw + 1), smem>>>(wc, sc, x, y, stages);
            });
            CK(cudaGetLastError());
            char name[64];
            snprintf(name, sizeof name, "%s %2d stages, %d warps", compute ? "ring" : "copy", stages, cw);
            report(name, us, compute);
        };
        run(ring_kernel<false, 8>, 8, false);
        run(ring_kernel<true, 4>, 4, true);
        run(ring_kernel<true, 8>, 8, true);
    }
    // Two dependent GEMVs (8.4 MB each): back-to-back launches of the register form against one persistent kernel.
    {
        std::vector<double> ref_b(kChainRows, 0.0);
        for (int n = 0; n < kChainRows; ++n)
            for (int k = 0; k < kK; ++k)
                ref_b[n] += double(e4m3_to_float(hw[size_t(kChainRows + n) * kK + k])) *
                            hs[((kChainRows + n) / 128) * kScaleCols + k / 128] * ref[k];
        float* yb = nullptr;
        unsigned* done = nullptr;
        CK(cudaMalloc(&yb, kChainRows * 4));
        CK(cudaMalloc(&done, 64 * sizeof(unsigned)));
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
            const size_t smem = size_t(stages) * kTileBytes + size_t(stages) * 16;
            CK(cudaFuncSetAttribute(chain_kernel<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
            CK(cudaMemset(y, 0xff, kN * 4));
            CK(cudaMemset(yb, 0xff, kChainRows * 4));
            int it = 0;
            CK(cudaMemset(done, 0, 64 * sizeof(unsigned)));
            const double us = median_us([&](const uint8_t* wc) {
                chain_kernel<8><<<std::min(sms, kChainTiles), 32 * 9, smem>>>(wc, sc, x, y, yb, done + it++, stages);
            });
            CK(cudaGetLastError());
            char name[64];
            snprintf(name, sizeof name, "chain: persistent, %2d stages", stages);
            check_chain(name, us);
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
        std::vector<double> ref4(kF4Rows, 0.0);
        for (int n = 0; n < kF4Rows; ++n)
            for (int g = 0; g < kF4Groups; ++g) {
                double part = 0.0;
                for (int k = 32 * g; k < 32 * g + 32; ++k) {
                    const uint8_t nib = (h4[size_t(n) * kF4RowBytes + k / 2] >> (4 * (k & 1))) & 15;
                    part += (nib & 8 ? -1.0 : 1.0) * kE2m1[nib & 7] * hx4[k];
                }
                ref4[n] += part * std::ldexp(1.0, int(hs4[size_t(n) * kF4Groups + g]) - 127);
            }
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
        CK(cudaFree(w4));
        CK(cudaFree(s4));
        CK(cudaFree(x4));
        CK(cudaFree(y4));
    }
    printf("%s\n", failed ? "weight_stream_probe: CHECK FAILED" : "weight_stream_probe: every check ok");
    return failed ? 1 : 0;
}
