// allow_dynamic_smem (smem.cuh): a mutex-guarded record of the limits already raised, per device and kernel.
#include "cuda/common/smem.cuh"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "cuda/common/check.cuh"

namespace flashseek::cuda {

void allow_dynamic_smem(const void* kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return;
    static std::mutex mu;
    static std::map<std::pair<int, const void*>, size_t> raised;  // (device, kernel) -> bytes
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu);
    size_t& have = raised[{device, kernel}];
    if (have >= bytes) return;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    have = bytes;
}

}  // namespace flashseek::cuda
