// An owned, uninitialized device allocation (cudaMalloc, at least 16 bytes so that empty problems still get a valid
// pointer), for perf suites and ceilings that fill their buffers on the device.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "cuda/common/check.cuh"

namespace flashseek::test {

struct DeviceBuffer {
    void* ptr = nullptr;
    explicit DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace flashseek::test
