// cuBLASLt as the reference dense GEMM, opened at run time (dlopen of libcublasLt.so.13 / .12 / .so): the test
// executables must start on machines whose loader does not find it; perf mode then reports the GEMM ceiling as
// unmeasured. Used for the FP8 / BF16 ceilings (perf_ceilings.h) and available to any perf suite that wants
// cuBLASLt's time on its own shape.
#pragma once
#include <cstdint>
#include <string>

namespace flashseek::test {

enum class GemmPrecision {
    FP8_E4M3,  // e4m3 inputs with unit per-tensor scales, bf16 output, fp32 accumulation
    BF16,      // bf16 inputs, bf16 output, fp32 accumulation
};

// Median microseconds per call of D[m, n] = A[m, k] . B[n, k]^T through cuBLASLt on random device buffers it
// allocates (the "TN" layout FP8 needs: both operands K-major). Returns a negative value when cuBLASLt is missing or
// has no algorithm for the problem, with the reason in *why.
double cublaslt_gemm_us(GemmPrecision precision, int64_t m, int64_t n, int64_t k, std::string* why);

}  // namespace flashseek::test
