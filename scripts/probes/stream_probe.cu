// Standalone H200 probe (no project dependencies): can per-warp bulk asynchronous copies (cp.async.bulk +
// mbarrier, sm_90) stream FP4 weight tiles into shared memory near the copy bandwidth, and does the FP4 -> e4m3
// bit conversion + mma.sync m16n8k32 e4m3 keep up? Answers the design question of the streaming decode GEMV
// (docs/perf.md, "bulk-copy streaming GEMV") before it is written.
// Each warp owns a ring of S stages; a stage is 16 rows x RB bytes (rows padded by 16 bytes: conflict-free 4-byte
// fragment reads), filled by 16 bulk copies (one per lane 0..15) completing on one mbarrier. Items (16-row tiles)
// are dealt to warps round robin. mode 0: touch one word per stage; mode 1: full e4m3 conversion + mma + scale FMAs.
// Build: nvcc -O3 -std=c++17 -arch=sm_90a -o stream_probe stream_probe.cu
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#include "probe_check.h"

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
    asm volatile(
        "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}\n" ::"r"(smem_addr(b)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ void fp4x8_to_e4m3(uint32_t x, uint32_t& lo, uint32_t& hi) {
    const uint32_t h = x & 0xF0F0F0F0u;            // odd elements, sign at bit 7 already
    const uint32_t l = (x << 4) & 0xF0F0F0F0u;     // even elements
    hi = (h | (h >> 2)) & 0x9C9C9C9Cu;             // s..mmm0000 -> s..mmm00 + sign: value * 2^-6 as e4m3
    lo = (l | (l >> 2)) & 0x9C9C9C9Cu;
}

__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f), "f"(0.f), "f"(0.f), "f"(0.f));
}

template <int S, int RB, int MODE>
__global__ void stream_kernel(const uint8_t* w, int64_t n_items, int64_t row_bytes, float* out) {
    constexpr int kStride = RB + 16;
    constexpr int kStage = 16 * kStride;
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nwarps = blockDim.x / 32;
    unsigned char* ring = smem + warp * S * kStage;
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + nwarps * S * kStage) + warp * S;
    if (lane < S) mbar_init(&bars[lane], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncwarp();
    const int64_t gw = int64_t(blockIdx.x) * nwarps + warp, nw = int64_t(gridDim.x) * nwarps;
    const int64_t chunks = row_bytes / RB;  // items are (tile, chunk)
    // MODE 2 ("sweep", touch only): a warp streams its tiles' chunks in order (tile gw: chunk 0, 1, ..., then tile
    // gw + nw), as the MoE kernels do; modes 0/1 deal (tile, chunk) items round robin, so neighbouring warps read
    // neighbouring chunks of the same rows at the same time.
    const int64_t n_tiles = n_items / chunks;
    auto issue = [&](int64_t it, int stage) {
        int64_t tile = it / chunks, chunk = it % chunks;
        if (MODE == 2) {
            const int64_t s = (it - gw) / nw;
            tile = gw + (s / chunks) * nw;
            chunk = s % chunks;
        }
        if (lane == 0) mbar_expect_tx(&bars[stage], 16 * RB);
        __syncwarp();
        if (lane < 16)
            bulk_g2s(ring + stage * kStage + lane * kStride, w + (tile * 16 + lane) * row_bytes + chunk * RB, RB, &bars[stage]);
    };
    int64_t my_n = gw < n_items ? (n_items - gw + nw - 1) / nw : 0;
    if (MODE == 2) my_n = gw < n_tiles ? (n_tiles - gw + nw - 1) / nw * chunks : 0;
    for (int s = 0; s < S - 1 && s < my_n; ++s) issue(gw + s * nw, s);
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    uint32_t bact0 = 0x38383838u ^ uint32_t(lane), bact1 = 0x30303030u ^ uint32_t(lane);
    for (int64_t i = 0; i < my_n; ++i) {
        const int stage = int(i % S);
        if (i + S - 1 < my_n) {
            // the stage being refilled was consumed in iteration i - 1 (all lanes past it after __syncwarp)
            __syncwarp();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            issue(gw + (i + S - 1) * nw, int((i + S - 1) % S));
        }
        mbar_wait(&bars[stage], uint32_t((i / S) & 1));
        const unsigned char* st = ring + stage * kStage;
        if (MODE != 1) {
            acc[0] += float(*reinterpret_cast<const uint32_t*>(st + g * kStride + 4 * t) & 0xff);
        } else {
#pragma unroll 4
            for (int kb = 0; kb < RB / 16; ++kb) {
                const uint32_t x0 = *reinterpret_cast<const uint32_t*>(st + g * kStride + kb * 16 + 4 * t);
                const uint32_t x1 = *reinterpret_cast<const uint32_t*>(st + (g + 8) * kStride + kb * 16 + 4 * t);
                uint32_t a[4];
                fp4x8_to_e4m3(x0, a[0], a[2]);
                fp4x8_to_e4m3(x1, a[1], a[3]);
                float d[4];
                mma_e4m3(d, a, bact0, bact1);
                const float s = __uint_as_float(0x3f800000u + (uint32_t(kb & 3) << 23));
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[j] = fmaf(d[j], s, acc[j]);
            }
        }
    }
    out[(int64_t(blockIdx.x) * blockDim.x + threadIdx.x)] = acc[0] + acc[1] + acc[2] + acc[3];
}

template <int S, int RB, int MODE>
float run(const uint8_t* w, int64_t bytes, int64_t row_bytes, int warps, int ctas_per_sm, int sms, float* out, int reps) {
    const int64_t n_items = bytes / (16 * row_bytes) * (row_bytes / RB);
    const size_t smem = size_t(warps) * S * 16 * (RB + 16) + size_t(warps) * S * 8;
    CK(cudaFuncSetAttribute(stream_kernel<S, RB, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ts;
    for (int r = 0; r < reps + 2; ++r) {
        CK(cudaEventRecord(a));
        stream_kernel<S, RB, MODE><<<sms * ctas_per_sm, warps * 32, smem>>>(w, n_items, row_bytes, out);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        CK(cudaGetLastError());
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r >= 2) ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

int main() {
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int64_t big = int64_t(1) << 30;
    uint8_t* w;
    CK(cudaMalloc(&w, 2 * big));
    CK(cudaMemset(w, 0x5a, 2 * big));
    float* out;
    CK(cudaMalloc(&out, 1 << 24));
    // copy bandwidth (read + write) on 1 GB
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> ts;
    for (int r = 0; r < 7; ++r) {
        CK(cudaEventRecord(a));
        CK(cudaMemcpyAsync(w + big, w, big, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    const double copy_bw = 2.0 * big / (ts[3] * 1e-3) / 1e9;
    printf("copy bandwidth %.0f GB/s\n", copy_bw);
    struct Size { const char* name; int64_t bytes; };
    const Size sizes[] = {{"1 GB (C=16 MoE layer)", big}, {"75 MB (C=1 MoE layer)", 75 << 20}, {"16.8 MB", 16800 << 10}};
    // rotate the base over the 2 GB buffer so small sizes do not sit in L2 between reps: use offsets
    printf("%-24s %-30s %9s %7s\n", "size", "variant", "us", "%copy");
    for (const auto& sz : sizes) {
        auto rep = [&](const char* v, float ms) {
            printf("%-24s %-30s %9.1f %6.1f%%\n", sz.name, v, ms * 1e3, 100.0 * sz.bytes / (ms * 1e-3) / 1e9 / copy_bw);
        };
        rep("S3 RB128 W8 C2 touch", run<3, 128, 0>(w, sz.bytes, 2048, 8, 2, sms, out, 9));
        rep("S3 RB128 W8 C2 sweep", run<3, 128, 2>(w, sz.bytes, 2048, 8, 2, sms, out, 9));
        rep("S6 RB128 W8 C2 sweep", run<6, 128, 2>(w, sz.bytes, 2048, 8, 2, sms, out, 9));
        rep("S3 RB256 W8 C2 sweep", run<3, 256, 2>(w, sz.bytes, 2048, 8, 2, sms, out, 9));
        rep("S3 RB512 W4 C2 sweep", run<3, 512, 2>(w, sz.bytes, 2048, 4, 2, sms, out, 9));
        rep("S3 RB1024 W4 C1 touch", run<3, 1024, 0>(w, sz.bytes, 2048, 4, 1, sms, out, 9));
        rep("S6 RB512 W4 C1 touch", run<6, 512, 0>(w, sz.bytes, 2048, 4, 1, sms, out, 9));
        rep("S4 RB512 W6 C1 touch", run<4, 512, 0>(w, sz.bytes, 2048, 6, 1, sms, out, 9));
        rep("S3 RB512 W4 C2 touch", run<3, 512, 0>(w, sz.bytes, 2048, 4, 2, sms, out, 9));
        rep("S8 RB256 W6 C1 touch", run<8, 256, 0>(w, sz.bytes, 2048, 6, 1, sms, out, 9));
        rep("S3 RB1024 W4 C1 mma", run<3, 1024, 1>(w, sz.bytes, 2048, 4, 1, sms, out, 9));
        rep("S6 RB512 W4 C1 mma", run<6, 512, 1>(w, sz.bytes, 2048, 4, 1, sms, out, 9));
        rep("S4 RB512 W6 C1 mma", run<4, 512, 1>(w, sz.bytes, 2048, 6, 1, sms, out, 9));
        rep("S3 RB512 W4 C2 mma", run<3, 512, 1>(w, sz.bytes, 2048, 4, 2, sms, out, 9));
        rep("S8 RB256 W6 C1 mma", run<8, 256, 1>(w, sz.bytes, 2048, 6, 1, sms, out, 9));
        rep("S4 RB256 W8 C1 mma", run<4, 256, 1>(w, sz.bytes, 2048, 8, 1, sms, out, 9));
    }
    return 0;
}
