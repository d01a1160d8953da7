// The tensor-core ceiling `flashseek bench` compares prefill with: the dense FP8 GEMM rate of this GPU through
// cuBLASLt (cuda/common/cublaslt_gemm.h) on a square problem large enough to fill the device.
#include "cuda/backend/cuda_backend.h"
#include "cuda/common/cublaslt_gemm.h"

namespace flashseek::cuda {

double measure_fp8_gemm_rate(int64_t size, int reps) {
    const double us = cublaslt_gemm_us(GemmPrecision::FP8_E4M3, size, size, size, nullptr, reps);
    return us > 0 ? 2.0 * double(size) * double(size) * double(size) / (us * 1e-6) : 0.0;
}

}  // namespace flashseek::cuda
