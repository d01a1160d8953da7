// An owned, uninitialized device allocation for measurements and perf suites that fill their buffers on the device
// (cuda/common/random_fill.cuh): at least 16 bytes, so that an empty problem still gets a valid pointer. The CUDA
// backend's buffers are cuda/backend/cuda_util.h's DeviceBuffer (named, with the free memory in its error).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "cuda/common/check.cuh"

namespace flashseek::cuda {

struct DeviceScratch {
    void* ptr = nullptr;
    explicit DeviceScratch(size_t bytes) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }
    ~DeviceScratch() { cudaFree(ptr); }
    DeviceScratch(const DeviceScratch&) = delete;
    DeviceScratch& operator=(const DeviceScratch&) = delete;
};

}  // namespace flashseek::cuda
