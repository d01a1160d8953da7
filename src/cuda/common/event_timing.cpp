// Event timing (event_timing.h): each call between its own pair of events, synchronized before the next, so one
// slow call shows as one sample rather than spreading over the others.
#include "cuda/common/event_timing.h"

#include <algorithm>
#include <vector>

#include "cuda/common/check.cuh"

namespace flashseek::cuda {
namespace {

struct EventPair {
    cudaEvent_t start = nullptr, stop = nullptr;
    EventPair() {
        CUDA_CHECK(cudaEventCreate(&start));
        const cudaError_t created = cudaEventCreate(&stop);
        if (created != cudaSuccess) cudaEventDestroy(start);
        CUDA_CHECK(created);
    }
    ~EventPair() {
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
    }
    EventPair(const EventPair&) = delete;
    EventPair& operator=(const EventPair&) = delete;
};

}  // namespace

double median_event_ms(const std::function<void(cudaStream_t)>& op, int warmups, int reps, cudaStream_t stream) {
    FS_REQUIRE(warmups >= 0 && reps >= 1, "median_event_ms: warmups (", warmups, ") must be >= 0 and reps (", reps,
               ") >= 1");
    for (int i = 0; i < warmups; ++i) op(stream);
    const EventPair ev;
    std::vector<float> ms;
    for (int r = 0; r < reps; ++r) {
        CUDA_CHECK(cudaEventRecord(ev.start, stream));
        op(stream);
        CUDA_CHECK(cudaEventRecord(ev.stop, stream));
        CUDA_CHECK(cudaEventSynchronize(ev.stop));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, ev.start, ev.stop));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return double(ms[ms.size() / 2]);
}

MeasureStream::MeasureStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
MeasureStream::~MeasureStream() { cudaStreamDestroy(stream_); }

}  // namespace flashseek::cuda
