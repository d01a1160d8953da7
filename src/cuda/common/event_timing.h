// Timing one operation on a stream with CUDA events: the device ceilings (copy bandwidth, the cuBLASLt GEMM rate)
// and the op harness's graph replays measure the same way, each on a non-blocking stream of its own so that no
// other work of the process overlaps the timed calls.
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace flashseek::cuda {

// Median milliseconds of `reps` calls of op(stream), each between two events, after `warmups` untimed calls.
double median_event_ms(const std::function<void(cudaStream_t)>& op, int warmups, int reps, cudaStream_t stream);

// A non-blocking stream owned by one measurement.
class MeasureStream {
public:
    MeasureStream();
    ~MeasureStream();
    MeasureStream(const MeasureStream&) = delete;
    MeasureStream& operator=(const MeasureStream&) = delete;
    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

}  // namespace flashseek::cuda
