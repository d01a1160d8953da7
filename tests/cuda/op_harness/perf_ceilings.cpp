// The ceilings of perf mode (perf_ceilings.h), measured once per process on the current device with the same
// functions as `flashseek bench` (cuda/common: copy_bandwidth.h, cublaslt_gemm.h).
#include "perf_ceilings.h"

#include <cuda_runtime.h>

#include "cuda/common/check.cuh"
#include "cuda/common/copy_bandwidth.h"
#include "cuda/common/cublaslt_gemm.h"

namespace flashseek::test {
namespace {

Ceilings measure() {
    Ceilings c;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp p{};
    CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    c.device = std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
               std::to_string(p.multiProcessorCount) + " SMs, L2 " + std::to_string(p.l2CacheSize >> 20) + " MB)";
    c.copy_bytes_per_s = cuda::measure_copy_bandwidth(size_t(1) << 30, 10);
    const int64_t n = 8192;
    const double flops = 2.0 * double(n) * double(n) * double(n);
    std::string why_fp8, why_bf16;
    const double fp8_us = cuda::cublaslt_gemm_us(cuda::GemmPrecision::FP8_E4M3, n, n, n, &why_fp8);
    const double bf16_us = cuda::cublaslt_gemm_us(cuda::GemmPrecision::BF16, n, n, n, &why_bf16);
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
