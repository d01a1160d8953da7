// Copy bandwidth (copy_bandwidth.h): random source bytes, then timed device-to-device copies on a stream of the
// measurement's own.
#include "cuda/common/copy_bandwidth.h"

#include <cuda_runtime.h>

#include "cuda/common/check.cuh"
#include "cuda/common/device_scratch.h"
#include "cuda/common/event_timing.h"
#include "cuda/common/random_fill.cuh"

namespace flashseek::cuda {

double measure_copy_bandwidth(size_t bytes, int reps) {
    bytes = bytes / 16 * 16;
    FS_REQUIRE(bytes > 0 && reps >= 1, "measure_copy_bandwidth: bytes (", bytes, ") and reps (", reps,
               ") must be positive");
    const DeviceScratch src(bytes), dst(bytes);
    const MeasureStream stream;
    fill_random(src.ptr, bytes, FillKind::BYTES, 1, 0.f, stream.get());
    const double ms = median_event_ms(
        [&](cudaStream_t s) { CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, s)); }, 3,
        reps, stream.get());
    return 2.0 * double(bytes) / (ms * 1e-3);
}

}  // namespace flashseek::cuda
