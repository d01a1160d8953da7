// Random weight matrices in each checkpoint format for the GPU harness: host bytes (for the CPU reference's
// dequantize_linear) and a device copy (for the CUDA kernels).
#pragma once
#include <memory>
#include <random>

#include "cuda/gemm/linear.cuh"
#include "harness.h"
#include "model/weights.h"

namespace flashseek::test {

struct TestWeight {
    cuda::WeightKind kind{};
    cuda::ScaleKind scale_kind{};
    int64_t out = 0, in = 0;
    std::vector<uint8_t> w_bytes, s_bytes;  // host copies, as the checkpoint stores them
    std::unique_ptr<DeviceArray<uint8_t>> w_dev, s_dev;
    cuda::DeviceLinear device() const;
    Linear host() const;                      // views into w_bytes/s_bytes for cpu::dequantize_linear
    std::vector<float> dequantized() const;   // cpu::dequantize_linear
    size_t bytes() const { return w_bytes.size() + s_bytes.size(); }
};

// Values: FP8 codes from N(0,1)*64 rounded to e4m3 (no NaN), FP4 uniform codes, BF16 N(0, 0.05).
// Scales: E8M0 in [2^-10, 2^-6] (FP8) / [2^-8, 2^-5] (FP4); F32 scales uniform in [1e-3, 1e-2].
TestWeight make_weight(std::mt19937_64& rng, cuda::WeightKind kind, cuda::ScaleKind scale_kind, int64_t out,
                       int64_t in, bool upload = true);

}  // namespace flashseek::test
