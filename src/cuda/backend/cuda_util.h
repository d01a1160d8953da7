// Small CUDA runtime helpers for the backend: an error check that throws flashseek::Error with file and line,
// owning device and pinned host allocations, and device facts the backend needs. Host code only (no kernels here).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

// No fmt here: nvcc cannot compile fmt's consteval format strings, so .cu files must not include util/error.h.

namespace flashseek::cuda {
// Throws flashseek::Error "CUDA error <name> (<text>) in <call> at <file>:<line>".
[[noreturn]] void raise_cuda_error(cudaError_t err, const char* call, const char* file, int line);
// Throws flashseek::Error with `message` (for .cu files, which cannot use FS_CHECK).
[[noreturn]] void raise_error(const std::string& message);
}  // namespace flashseek::cuda

// FS_CUDA_TRY(call): throws flashseek::Error naming the call, file and line when a CUDA runtime call fails.
#define FS_CUDA_TRY(call)                                                                       \
    do {                                                                                        \
        cudaError_t fs_cuda_err_ = (call);                                                      \
        if (fs_cuda_err_ != cudaSuccess)                                                        \
            ::flashseek::cuda::raise_cuda_error(fs_cuda_err_, #call, __FILE__, __LINE__);       \
    } while (0)
// FS_CUDA_LAUNCHED(what): checks the last launch (configuration errors surface here, not at the next sync).
#define FS_CUDA_LAUNCHED(what) FS_CUDA_TRY(cudaPeekAtLastError())

namespace flashseek::cuda {

// One device allocation, freed on destruction. Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes, const char* what = "buffer") { allocate(bytes, what); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void allocate(size_t bytes, const char* what = "buffer");
    void release() noexcept;
    template <typename T = void>
    T* as() const { return static_cast<T*>(ptr_); }
    void* get() const { return ptr_; }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// One pinned host allocation (cudaMallocHost), zero-filled, freed on destruction. Move-only.
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t bytes, const char* what = "pinned buffer") { allocate(bytes, what); }
    ~PinnedBuffer() { release(); }
    PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    void allocate(size_t bytes, const char* what = "pinned buffer");
    void release() noexcept;
    template <typename T = void>
    T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

struct DeviceFacts {
    int device = 0;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    size_t total_memory = 0;
    size_t l2_bytes = 0;
    std::string name;
    int compute_capability() const { return cc_major * 10 + cc_minor; }
};
DeviceFacts query_device(int device = -1);  // -1 = current device

inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace flashseek::cuda
