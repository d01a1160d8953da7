// Standalone H200 probe: checks the operand conventions src/cuda/common/wgmma.cuh assumes for
// wgmma.mma_async m64n16k32 / m64n8k32 e4m3 (A from registers in the mma.sync m16n8k32 fragment layout, B K-major
// in shared memory with no swizzle, LBO = 128 along k and SBO = 256 along n, D in the mma.sync C layout), against a
// CPU product of small integers (exact in fp32). Prints the number of mismatching outputs per variant; the variant
// with LBO and SBO swapped is run too, so a wrong reading of the descriptor fields shows as "swapped: 0 mismatches".
// Build: nvcc -O3 -std=c++20 -arch=sm_90a -Isrc -o wgmma_probe scripts/probes/wgmma_probe.cu
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/common/wgmma.cuh"
#include "probe_check.h"


using namespace flashseek::cuda;

// a: [64][32] e4m3 row-major, b: [16][32] e4m3 (column n's 32 k values), d: [64][16] fp32.
__global__ void probe(const uint8_t* a, const uint8_t* b, float* d, int swapped, int n8) {
#if FS_WGMMA_AVAILABLE
    __shared__ __align__(128) uint8_t tile[512];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int lbo = swapped ? wgmma::kSbo : wgmma::kLbo, sbo = swapped ? wgmma::kLbo : wgmma::kSbo;
    for (int i = tid; i < 512; i += 128) {
        const int n = i / 32, k = i % 32;
        tile[(n >> 3) * sbo + (k >> 4) * lbo + (n & 7) * 16 + (k & 15)] = b[n * 32 + k];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    auto word = [&](int row, int k0) {
        const uint8_t* p = a + row * 32 + k0;
        return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    };
    const int r = 16 * warp + g;
    uint32_t af[4] = {word(r, 4 * t), word(r + 8, 4 * t), word(r, 16 + 4 * t), word(r + 8, 16 + 4 * t)};
    const uint32_t addr = uint32_t(__cvta_generic_to_shared(tile));
    // Descriptor with the probe's LBO/SBO (b_descriptor hard-codes the production values).
    const uint64_t desc = uint64_t((addr >> 4) & 0x3fff) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    wgmma::fence();
    if (n8) {
        float d4[4];
        wgmma::mma_n8(d4, af, desc);
        wgmma::commit();
        wgmma::wait<0>();
        for (int i = 0; i < 4; ++i) wgmma::fence_operand(d4[i]), acc[i] = d4[i];
    } else {
        wgmma::mma_n16(acc, af, desc);
        wgmma::commit();
        wgmma::wait<0>();
        for (int i = 0; i < 8; ++i) wgmma::fence_operand(acc[i]);
    }
    for (int i = 0; i < (n8 ? 1 : 2); ++i)
        for (int j = 0; j < 4; ++j) d[(r + (j >> 1) * 8) * 16 + 8 * i + 2 * t + (j & 1)] = acc[4 * i + j];
#endif
}

static uint8_t e4m3_of(float v) { return __nv_fp8_e4m3(v).__x; }

int main() {
    srand(12345);
    std::vector<float> av(64 * 32), bv(16 * 32);
    std::vector<uint8_t> a(64 * 32), b(16 * 32);
    for (int i = 0; i < 64 * 32; ++i) av[i] = float(rand() % 9 - 4), a[i] = e4m3_of(av[i]);
    for (int i = 0; i < 16 * 32; ++i) bv[i] = float(rand() % 7 - 3), b[i] = e4m3_of(bv[i]);
    uint8_t *da, *db;
    float* dd;
    CK(cudaMalloc(&da, a.size()));
    CK(cudaMalloc(&db, b.size()));
    CK(cudaMalloc(&dd, 64 * 16 * 4));
    CK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
    int failures = 0;
    for (int n8 = 0; n8 < 2; ++n8)
        for (int swapped = 0; swapped < 2; ++swapped) {
            CK(cudaMemset(dd, 0xff, 64 * 16 * 4));
            probe<<<1, 128>>>(da, db, dd, swapped, n8);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            std::vector<float> d(64 * 16);
            CK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
            int bad = 0;
            const int ncols = n8 ? 8 : 16;
            for (int m = 0; m < 64; ++m)
                for (int n = 0; n < ncols; ++n) {
                    float ref = 0.f;
                    for (int k = 0; k < 32; ++k) ref += av[m * 32 + k] * bv[n * 32 + k];
                    if (d[m * 16 + n] != ref) {
                        if (bad < 4) printf("  m%d n%d got %g want %g\n", m, n, d[m * 16 + n], ref);
                        ++bad;
                    }
                }
            printf("wgmma_probe %s %s: %d mismatches of %d\n", n8 ? "m64n8k32" : "m64n16k32",
                   swapped ? "swapped LBO/SBO" : "production LBO/SBO", bad, 64 * ncols);
            if (!swapped && bad) ++failures;
        }
    printf("wgmma_probe: %s\n", failures ? "FAIL (production layout wrong)" : "PASS");
    return failures ? 1 : 0;
}
