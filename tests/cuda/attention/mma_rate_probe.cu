// measure_mma_bf16_tflops (mma_rate_probe.cuh): each warp issues 8 independent accumulator chains of
// m16n8k16 bf16 mma.sync on register operands; the sums are kept alive through a never-taken store.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/attention/attn_tile.cuh"
#include "mma_rate_probe.cuh"

namespace flashseek::cuda::test {
namespace {

constexpr int kChains = 8;
constexpr int kIters = 2048;

__global__ void __launch_bounds__(256) mma_rate_kernel(float* never_written) {
    const __nv_bfloat162 one_half = __floats2bfloat162_rn(1.f, 0.5f), quarter = __floats2bfloat162_rn(0.25f, -1.f);
    const uint32_t a = *reinterpret_cast<const uint32_t*>(&one_half), b = *reinterpret_cast<const uint32_t*>(&quarter);
    float c[kChains][4] = {};
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
        for (int k = 0; k < kChains; ++k) attn_detail::mma_16816(c[k], a, b, a, b, b, a);
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kChains; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    if (s == 1234.5f) never_written[threadIdx.x] = s;
}

}  // namespace

double measure_mma_bf16_tflops() {
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    float* sink = nullptr;
    cudaMalloc(&sink, 256 * sizeof(float));
    const int blocks = 4 * sms, threads = 256;
    mma_rate_kernel<<<blocks, threads>>>(sink);  // warm-up (clocks up)
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
        cudaEventRecord(a);
        mma_rate_kernel<<<blocks, threads>>>(sink);
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float t = 0.f;
        cudaEventElapsedTime(&t, a, b);
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(sink);
    std::sort(ms.begin(), ms.end());
    const double flops = double(blocks) * (threads / 32) * kIters * kChains * (2.0 * 16 * 8 * 16);
    return flops / (ms[ms.size() / 2] * 1e-3) * 1e-12;
}

}  // namespace flashseek::cuda::test
