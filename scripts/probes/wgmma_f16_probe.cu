// Standalone H200 probe for a wgmma GEMV with f16 operands (the planned wo_a kernel: its activation stays bf16, so the
// e4m3 GEMV cannot take it): wgmma.mma_async m64n16k16 f32.f16.f16 with A from registers (e4m3 weights widened by
// numeric.cuh's e4m3x4_to_f16x2x2_scaled, value x 2^-8, pairs (b0, b2) / (b1, b3)) and B f16 K-major in shared memory,
// no swizzle, the core-matrix layout of common/wgmma.cuh with 2-byte elements: byte (k, n) at
// (n / 8) * SBO + (k / 8) * LBO + (n % 8) * 16 + (k % 8) * 2, LBO = 128, SBO = 256 (512 bytes per k16 step).
// A thread's 32-bit load at physical k [4t, 4t + 4) of row g gives reg0 = logical k (2t, 2t + 1) from physical
// (4t, 4t + 2) and reg2 = logical (2t + 8, 2t + 9) from (4t + 1, 4t + 3), so B is written in that permuted k order.
// Runs the four combinations of (LBO/SBO production or swapped) x (imm-trans-b 0 or 1) against a CPU product of small
// integers (exact in fp32) and prints the mismatches of each: the production row must show 0.
// Build: nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc -o wgmma_f16_probe \
//        scripts/probes/wgmma_f16_probe.cu
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/common/numeric.cuh"
#include "cuda/common/wgmma.cuh"
#include "probe_check.h"


using namespace flashseek::cuda;

// Logical k (the wgmma operand's) of physical k p (the stored order) inside a 16-k step.
__host__ __device__ int logical_k16(int p) {
    const int t = p / 4, j = p % 4;
    return (j & 1) * 8 + 2 * t + (j >> 1);
}

// a: [64][16] e4m3 row-major (physical k order), b: [16][16] f16 values (column n's 16 k, physical order), d: [64][16].
template <int TB>
__global__ void probe(const uint8_t* a, const __half* b, float* d, int swapped) {
#if FS_WGMMA_AVAILABLE
    __shared__ __align__(128) unsigned char tile[512];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int lbo = swapped ? wgmma::kSbo : wgmma::kLbo, sbo = swapped ? wgmma::kLbo : wgmma::kSbo;
    for (int i = tid; i < 256; i += 128) {
        const int n = i / 16, p = i % 16, k = logical_k16(p);
        *reinterpret_cast<__half*>(tile + (n >> 3) * sbo + (k >> 3) * lbo + (n & 7) * 16 + (k & 7) * 2) = b[n * 16 + p];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    auto word = [&](int row) {
        const uint8_t* q = a + row * 16 + 4 * t;
        return uint32_t(q[0]) | uint32_t(q[1]) << 8 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 24;
    };
    const int r = 16 * warp + g;
    uint32_t af[4];
    e4m3x4_to_f16x2x2_scaled(word(r), af[0], af[2]);
    e4m3x4_to_f16x2x2_scaled(word(r + 8), af[1], af[3]);
    const uint32_t addr = uint32_t(__cvta_generic_to_shared(tile));
    const uint64_t desc = uint64_t((addr >> 4) & 0x3fff) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32);
    float acc[8];
    wgmma::fence();
    wgmma::mma_f16_n16<TB>(acc, af, desc);
    wgmma::commit();
    wgmma::wait<0>();
    for (int i = 0; i < 8; ++i) wgmma::fence_operand(acc[i]);
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) d[(r + (j >> 1) * 8) * 16 + 8 * i + 2 * t + (j & 1)] = acc[4 * i + j];
#endif
}

static uint8_t e4m3_of(float v) { return __nv_fp8_e4m3(v).__x; }

int main() {
    srand(12345);
    std::vector<float> av(64 * 16), bv(16 * 16);
    std::vector<uint8_t> a(64 * 16);
    std::vector<__half> b(16 * 16);
    for (int i = 0; i < 64 * 16; ++i) av[i] = float(rand() % 9 - 4), a[i] = e4m3_of(av[i]);
    for (int i = 0; i < 16 * 16; ++i) bv[i] = float(rand() % 7 - 3), b[i] = __float2half(bv[i]);
    uint8_t* da;
    __half* db;
    float* dd;
    CK(cudaMalloc(&da, a.size()));
    CK(cudaMalloc(&db, b.size() * sizeof(__half)));
    CK(cudaMalloc(&dd, 64 * 16 * 4));
    CK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), b.size() * sizeof(__half), cudaMemcpyHostToDevice));
    int production_bad = -1;
    for (int tb = 0; tb < 2; ++tb)
        for (int swapped = 0; swapped < 2; ++swapped) {
            CK(cudaMemset(dd, 0xff, 64 * 16 * 4));
            if (tb)
                probe<1><<<1, 128>>>(da, db, dd, swapped);
            else
                probe<0><<<1, 128>>>(da, db, dd, swapped);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            std::vector<float> d(64 * 16);
            CK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int m = 0; m < 64; ++m)
                for (int n = 0; n < 16; ++n) {
                    float ref = 0.f;  // physical order on both sides: the permutation cancels
                    for (int p = 0; p < 16; ++p) ref += av[m * 16 + p] * bv[n * 16 + p];
                    ref *= 1.f / 256.f;  // A was widened as value x 2^-8
                    if (d[m * 16 + n] != ref) {
                        if (bad < 3) printf("  m%d n%d got %g want %g\n", m, n, d[m * 16 + n], ref);
                        ++bad;
                    }
                }
            printf("wgmma_f16_probe m64n16k16 trans-b %d, %s LBO/SBO: %d mismatches of 1024\n", tb,
                   swapped ? "swapped" : "production", bad);
            if (tb == 0 && !swapped) production_bad = bad;
        }
    printf("wgmma_f16_probe: %s\n", production_bad == 0 ? "PASS (trans-b 0, production LBO/SBO)"
                                                        : "FAIL: see which combination has 0 mismatches");
    return production_bad == 0 ? 0 : 1;
}
