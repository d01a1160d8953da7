// cuBLASLt as the reference dense GEMM of this device: the tensor-core ceiling `flashseek bench` compares prefill
// with (gemm_ceiling.cpp), the FP8 / BF16 ceilings of the op harness's perf mode and the perf suites' `cuBLASLt
// (ref)` rows. The library is opened at run time (dlopen of libcublasLt.so.13 / .12 / .so, once per process), so
// that every binary starts on a machine whose loader cannot find it; the rate is then reported as unmeasured.
// Self-contained: its own operands (random, on the device), handle, stream and events per call.
#pragma once
#include <cstdint>
#include <string>

namespace flashseek::cuda {

enum class GemmPrecision {
    FP8_E4M3,  // e4m3 inputs with unit per-tensor scales, bf16 output, fp32 accumulation
    BF16,      // bf16 inputs, bf16 output, fp32 accumulation
};

// Median microseconds per call of D[m, n] = A[m, k] . B[n, k]^T (the "TN" layout FP8 needs: both operands
// K-major), over `reps` calls timed one by one with events after 3 untimed ones. Returns a negative value when
// cuBLASLt is missing, has no algorithm for the problem or fails, with the reason in *why (when why is not null).
double cublaslt_gemm_us(GemmPrecision precision, int64_t m, int64_t n, int64_t k, std::string* why, int reps = 10);

}  // namespace flashseek::cuda
