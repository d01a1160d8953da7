// Host helpers of the communicators, whose ranks live on several devices: a guard that makes a device current for a
// scope (and restores the caller's), and device / host-mapped allocations that remember their device, so that they
// are freed there whatever device is current when they go.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace flashseek::cuda {

class DeviceGuard {
public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = 0;
};

// `bytes` of device memory on `device`, zero-filled (synchronously: at construction, never during a capture).
class DeviceMemory {
public:
    DeviceMemory() = default;
    DeviceMemory(int device, size_t bytes, const char* what);
    ~DeviceMemory() { release(); }
    DeviceMemory(DeviceMemory&& o) noexcept
        : ptr_(std::exchange(o.ptr_, nullptr)), device_(o.device_), bytes_(std::exchange(o.bytes_, 0)) {}
    DeviceMemory& operator=(DeviceMemory&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
            device_ = o.device_;
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;

    template <typename T>
    T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

private:
    void release() noexcept;
    void* ptr_ = nullptr;
    int device_ = 0;
    size_t bytes_ = 0;
};

// Pinned host memory mapped into every device's address space (kernels write it, the host reads it), zero-filled.
class MappedHostMemory {
public:
    MappedHostMemory() = default;
    MappedHostMemory(size_t bytes, const char* what);
    ~MappedHostMemory() { release(); }
    MappedHostMemory(MappedHostMemory&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
    MappedHostMemory& operator=(MappedHostMemory&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = std::exchange(o.ptr_, nullptr);
        }
        return *this;
    }
    MappedHostMemory(const MappedHostMemory&) = delete;
    MappedHostMemory& operator=(const MappedHostMemory&) = delete;

    template <typename T>
    T* as() const { return static_cast<T*>(ptr_); }

private:
    void release() noexcept;
    void* ptr_ = nullptr;
};

}  // namespace flashseek::cuda
