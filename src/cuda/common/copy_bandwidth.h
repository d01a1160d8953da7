// The device-to-device copy bandwidth (bytes read plus bytes written per second): the memory roofline that
// `flashseek bench` reports decode against and the copy ceiling of the op harness's perf mode.
#pragma once
#include <cstddef>

namespace flashseek::cuda {

// Median of `reps` cudaMemcpyAsync copies of `bytes` (rounded down to 16) after 3 untimed ones, between buffers
// filled with random bytes; `bytes` should be far larger than L2.
double measure_copy_bandwidth(size_t bytes = size_t(2) << 30, int reps = 20);

}  // namespace flashseek::cuda
