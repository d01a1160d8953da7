// Random weight matrices generated on the device for the perf suites (perf_linear.cpp, perf_moe.cpp): no host
// traffic, any size, finite values of the format (cuda::fill_random). Values do not matter for timing; they only
// must not be zeros (which run faster) or NaN.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cuda/gemm/linear.cuh"

namespace flashseek::test {

// One weight (and its scale tensor) in device memory it owns.
struct PerfWeight {
    cuda::WeightKind kind = cuda::WeightKind::BF16;
    int64_t out = 0, in = 0;
    void* w = nullptr;
    void* s = nullptr;  // E8M0 scales; null for BF16
    size_t bytes = 0;   // weight + scales

    PerfWeight(cuda::WeightKind kind, int64_t out, int64_t in, uint64_t seed);
    ~PerfWeight();
    PerfWeight(const PerfWeight&) = delete;
    PerfWeight& operator=(const PerfWeight&) = delete;
    PerfWeight(PerfWeight&& o) noexcept;
    PerfWeight& operator=(PerfWeight&&) = delete;

    cuda::DeviceLinear device() const;
};

// Bytes of a weight of this kind and shape with its scales (what one call streams).
size_t weight_bytes(cuda::WeightKind kind, int64_t out, int64_t in);

}  // namespace flashseek::test
