// The perf suites' cuBLASLt reference (FP8 e4m3 with unit per-tensor scales, or BF16; "TN" layout), as
// flashseek::test names: cuda/common/cublaslt_gemm.h is the one implementation, which `flashseek bench` and the
// ceilings of perf mode use too. Suites may include cuda/common/cublaslt_gemm.h directly.
#pragma once
#include "cuda/common/cublaslt_gemm.h"

namespace flashseek::test {

using cuda::cublaslt_gemm_us;
using cuda::GemmPrecision;

}  // namespace flashseek::test
