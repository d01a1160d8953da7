// Helpers of the communicator tests and benchmark (test_cuda_comm): seeds, the host reference of the all-reduce,
// per-rank streams and buffers on the ranks' devices, pinned host staging, and launching the ranks' graphs.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/comm/communicator.h"
#include "cuda/comm/device_memory.h"

namespace flashseek::test {

// FS_TEST_SEED when set, else a fresh one.
uint64_t fresh_seed();
// CUDA devices of this machine (0 without a driver).
int gpu_count();
// "cudaErrorName (its message)": what every CUDA failure of the tests reports.
std::string cuda_error_text(cudaError_t err);
// Whether NCCL can be loaded here; `why` gets the loader's message when not.
bool nccl_loadable(std::string* why);
// NCCL missing is a skip unless FLASHSEEK_REQUIRE_NCCL=1 (the multi-GPU script sets it): then a failure.
#define FS_SKIP_WITHOUT_NCCL()                                                                   \
    do {                                                                                         \
        std::string fs_why_;                                                                     \
        if (!::flashseek::test::nccl_loadable(&fs_why_)) {                                       \
            if (::flashseek::test::nccl_required()) FAIL() << fs_why_;                           \
            GTEST_SKIP() << "NCCL cannot be loaded here (FLASHSEEK_REQUIRE_NCCL=1 makes this a failure): " << fs_why_; \
        }                                                                                        \
    } while (0)
bool nccl_required();

// Partials with a wide spread of magnitudes (normal x 2^[-4, 4]), so that the order of the sum shows in the bits.
std::vector<float> random_partial(std::mt19937_64& rng, int64_t n);
// bf16 bits of (((p[m0] + p[m1]) + p[m2]) + ...) per element, over the group's members in order.
std::vector<uint16_t> reference_sum(const std::vector<std::vector<float>>& partials, const std::vector<int>& members);

// One non-blocking stream per rank, on the rank's device (or one shared stream when `shared`).
class RankStreams {
public:
    RankStreams(const std::vector<int>& devices, bool shared);
    ~RankStreams();
    RankStreams(const RankStreams&) = delete;
    RankStreams& operator=(const RankStreams&) = delete;
    cudaStream_t operator[](int rank) const { return streams_[size_t(rank)]; }
    void synchronize() const;

private:
    std::vector<int> devices_;
    std::vector<cudaStream_t> streams_;
    bool shared_;
};

// n elements of T on a device, with `pad` guard elements on each side filled with a sentinel byte pattern.
template <typename T>
class GuardedArray {
public:
    static constexpr int64_t kPad = 8;
    static constexpr unsigned char kSentinel = 0xa5;
    GuardedArray(int device, int64_t n, int64_t offset = 0)
        : mem_(device, size_t(n + 2 * kPad + offset) * sizeof(T), "a test array"), n_(n), offset_(offset) {
        cuda::DeviceGuard on(device);
        EXPECT_EQ(cudaMemset(mem_.as<T>(), kSentinel, mem_.bytes()), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    T* data() const { return mem_.as<T>() + kPad + offset_; }
    int64_t size() const { return n_; }
    // The whole allocation, guards included (for the check that nothing outside [data, data + n) was written).
    const T* raw() const { return mem_.as<T>(); }
    int64_t raw_size() const { return n_ + 2 * kPad + offset_; }
    int64_t raw_index(int64_t i) const { return kPad + offset_ + i; }

private:
    cuda::DeviceMemory mem_;
    int64_t n_, offset_;
};

// Pinned host memory (sources and destinations of asynchronous copies that stay valid until the end of a test),
// handed out from large blocks: few allocations, none between the calls of a check.
class PinnedPool {
public:
    template <typename T>
    T* take(size_t count) {
        const size_t bytes = (count * sizeof(T) + 255) / 256 * 256;
        if (blocks_.empty() || used_ + bytes > capacity_) {
            capacity_ = std::max(bytes, size_t(32) << 20);
            blocks_.emplace_back(capacity_, "test staging");
            used_ = 0;
        }
        T* p = reinterpret_cast<T*>(blocks_.back().template as<char>() + used_);
        used_ += bytes;
        return p;
    }

private:
    std::vector<cuda::MappedHostMemory> blocks_;
    size_t used_ = 0, capacity_ = 0;
};

// Launches one graph per rank, each from its own host thread when the ranks span several devices (NCCL: one thread
// driving several GPUs through graphs may block in cudaGraphLaunch), in rank order otherwise; `after` enqueues what
// follows the rank's graph on its stream (from the same thread). Returns after every launch, not every completion.
void launch_rank_graphs(const std::vector<cudaGraphExec_t>& graphs, const std::vector<int>& devices,
                        const RankStreams& streams, const std::function<void(int rank)>& after = {});

// Captures what `enqueue` puts on the ranks' streams into one graph per rank (each stream captured on its own, one
// capture for ranks sharing a stream); every capture ends before any graph is instantiated. A failure names the step,
// the rank and the CUDA error (name and message; for the instantiation also its verdict and the node it blamed).
std::vector<cudaGraphExec_t> capture_rank_graphs(const std::vector<int>& devices, const RankStreams& streams,
                                                 const std::function<void()>& enqueue);
void destroy_graphs(std::vector<cudaGraphExec_t>& graphs);

}  // namespace flashseek::test
