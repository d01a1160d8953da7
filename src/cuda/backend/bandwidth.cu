// Measures the GPU's device-to-device copy bandwidth (read + write bytes per second), the denominator of the
// memory roofline that `flashseek bench` reports. Buffers are far larger than L2 and filled with non-zero data.
#include <algorithm>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda/backend/cuda_util.h"

namespace flashseek::cuda {

namespace {
__global__ void fill_pattern(uint32_t* p, size_t n) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = uint32_t(i * 2654435761u) | 1u;
}
}  // namespace

double measure_copy_bandwidth(size_t bytes, int reps) {
    bytes = bytes / 16 * 16;
    DeviceBuffer a(bytes, "bandwidth test source"), b(bytes, "bandwidth test destination");
    fill_pattern<<<1024, 256>>>(a.as<uint32_t>(), bytes / 4);
    FS_CUDA_LAUNCHED("fill_pattern");
    cudaStream_t s;
    FS_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    FS_CUDA_TRY(cudaEventCreate(&e0));
    FS_CUDA_TRY(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int i = 0; i < reps + 3; ++i) {
        FS_CUDA_TRY(cudaEventRecord(e0, s));
        FS_CUDA_TRY(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
        FS_CUDA_TRY(cudaEventRecord(e1, s));
        FS_CUDA_TRY(cudaEventSynchronize(e1));
        float t = 0;
        FS_CUDA_TRY(cudaEventElapsedTime(&t, e0, e1));
        if (i >= 3) ms.push_back(t);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2] * 1e-3;
    return 2.0 * double(bytes) / med;
}

}  // namespace flashseek::cuda
