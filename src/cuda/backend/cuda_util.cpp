// Out-of-line parts of cuda_util.h (allocation with a readable out-of-memory message, device facts).
#include "cuda/backend/cuda_util.h"

#include <cstring>

#include "cuda/backend/cuda_backend.h"
#include "util/error.h"

namespace flashseek::cuda {

void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
    fail("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(err), cudaGetErrorString(err), call, file, line);
}
void raise_error(const std::string& message) { throw Error(message); }

void DeviceBuffer::allocate(size_t bytes, const char* what) {
    release();
    if (bytes == 0) return;
    cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();  // clear the sticky-free allocation error so later calls are not blamed
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        ptr_ = nullptr;
        fail("cannot allocate {:.3f} GB of GPU memory for {} ({}; {:.3f} GB free of {:.3f} GB)", bytes / 1e9, what,
             cudaGetErrorString(e), free_b / 1e9, total_b / 1e9);
    }
    bytes_ = bytes;
}

void DeviceBuffer::release() noexcept {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
}

void PinnedBuffer::allocate(size_t bytes, const char* what) {
    release();
    if (bytes == 0) return;
    const cudaError_t e = cudaMallocHost(&ptr_, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        ptr_ = nullptr;
        fail("cannot allocate {:.3f} GB of pinned host memory for {} ({})", bytes / 1e9, what, cudaGetErrorString(e));
    }
    std::memset(ptr_, 0, bytes);
    bytes_ = bytes;
}

void PinnedBuffer::release() noexcept {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
}

void require_cuda_device() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        fail("no CUDA device is available ({})", e != cudaSuccess ? cudaGetErrorString(e) : "no devices");
    }
}

DeviceFacts query_device(int device) {
    if (device < 0) FS_CUDA_TRY(cudaGetDevice(&device));
    cudaDeviceProp p{};
    FS_CUDA_TRY(cudaGetDeviceProperties(&p, device));
    DeviceFacts f;
    f.device = device;
    f.cc_major = p.major;
    f.cc_minor = p.minor;
    f.sm_count = p.multiProcessorCount;
    f.total_memory = p.totalGlobalMem;
    f.l2_bytes = size_t(p.l2CacheSize);
    f.name = p.name;
    return f;
}

}  // namespace flashseek::cuda
