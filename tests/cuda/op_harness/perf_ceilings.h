// The ceilings perf mode measures once per process, on the device at hand: the device-to-device copy bandwidth
// (read + write, cudaMemcpyAsync of 1 GiB, median of 10 after 3 warm-ups) for weight-streaming ops, and the dense
// tensor-core GEMM rate through cuBLASLt at 8192^3 (FP8 e4m3 and BF16, random inputs: zeros run faster) for
// compute-bound ones. A rate cuBLASLt cannot give (library not found, no algorithm) is 0 and its reason is kept.
#pragma once
#include <string>

namespace flashseek::test {

struct Ceilings {
    std::string device;             // name, compute capability, SMs, L2
    double copy_bytes_per_s = 0;
    double fp8_flops_per_s = 0;
    double bf16_flops_per_s = 0;
    std::string gemm_note;          // why a GEMM rate is missing, if one is
};

const Ceilings& measured_ceilings();

}  // namespace flashseek::test
