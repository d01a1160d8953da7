// The ceilings of perf mode (perf_ceilings.h), measured once per process on the current device.
#include "perf_ceilings.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"
#include "gemm_rate.h"
#include "perf_report.h"

namespace flashseek::test {
namespace {

double measure_copy_bandwidth() {
    const size_t bytes = size_t(1) << 30;
    void *a = nullptr, *b = nullptr;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    cuda::fill_random(a, bytes, cuda::FillKind::BYTES, 1, 0.f, nullptr);
    const double ms = median_call_ms(
        [&](cudaStream_t st) { CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); }, 3, 10, nullptr);
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    return 2.0 * double(bytes) / (ms * 1e-3);  // bytes read + written
}

Ceilings measure() {
    Ceilings c;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    c.device = std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
               std::to_string(p.multiProcessorCount) + " SMs, L2 " + std::to_string(p.l2CacheSize >> 20) + " MB)";
    c.copy_bytes_per_s = measure_copy_bandwidth();
    const int64_t n = 8192;
    const double flops = 2.0 * double(n) * double(n) * double(n);
    std::string why_fp8, why_bf16;
    const double fp8_us = cublaslt_gemm_us(GemmPrecision::FP8_E4M3, n, n, n, &why_fp8);
    const double bf16_us = cublaslt_gemm_us(GemmPrecision::BF16, n, n, n, &why_bf16);
    if (fp8_us > 0) c.fp8_flops_per_s = flops / (fp8_us * 1e-6);
    if (bf16_us > 0) c.bf16_flops_per_s = flops / (bf16_us * 1e-6);
    if (fp8_us <= 0) c.gemm_note += "FP8 GEMM rate unmeasured: " + why_fp8 + ". ";
    if (bf16_us <= 0) c.gemm_note += "BF16 GEMM rate unmeasured: " + why_bf16 + ".";
    return c;
}

}  // namespace

const Ceilings& measured_ceilings() {
    static const Ceilings c = measure();
    return c;
}

}  // namespace flashseek::test
