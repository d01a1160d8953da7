// DeviceGuard, DeviceMemory, MappedHostMemory (device_memory.h).
#include "cuda/comm/device_memory.h"

#include <cstring>

#include "util/error.h"

namespace flashseek::cuda {

namespace {
// The errors of a call made while a graph capture is under way: the communicators allocate only at construction and
// at group registration, which must come before any capture.
const char* capture_hint(cudaError_t err) {
    const bool capturing = err == cudaErrorStreamCaptureUnsupported || err == cudaErrorStreamCaptureInvalidated ||
                           err == cudaErrorStreamCaptureImplicit;
    return capturing ? "; a graph capture is under way: create communicators and register their groups before capturing"
                     : "";
}

void check(cudaError_t err, const char* what, const char* call) {
    if (err != cudaSuccess)
        fail("communicator: {} failed for {}: {} ({}){}", call, what, cudaGetErrorName(err), cudaGetErrorString(err),
             capture_hint(err));
}
}  // namespace

DeviceGuard::DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "the current device", "cudaGetDevice");
    if (device != previous_) check(cudaSetDevice(device), "a rank's device", "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }

DeviceMemory::DeviceMemory(int device, size_t bytes, const char* what) : device_(device), bytes_(bytes) {
    DeviceGuard on(device);
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
        ptr_ = nullptr;
        fail("communicator: cannot allocate {} bytes of {} on device {}: {} ({}){}", bytes, what, device,
             cudaGetErrorName(err), cudaGetErrorString(err), capture_hint(err));
    }
    check(cudaMemset(ptr_, 0, bytes), what, "cudaMemset");
    // The zeros must be in place before any stream (non-blocking ones too, which the memset does not order) runs.
    check(cudaDeviceSynchronize(), what, "cudaDeviceSynchronize");
}

void DeviceMemory::release() noexcept {
    if (!ptr_) return;
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device_);
    cudaFree(ptr_);
    cudaSetDevice(previous);
    ptr_ = nullptr;
}

MappedHostMemory::MappedHostMemory(size_t bytes, const char* what) {
    check(cudaHostAlloc(&ptr_, bytes, cudaHostAllocMapped | cudaHostAllocPortable), what, "cudaHostAlloc");
    std::memset(ptr_, 0, bytes);
}

void MappedHostMemory::release() noexcept {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
}

}  // namespace flashseek::cuda
