// Kernel behind dummy_fill.cuh.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda/backend/cuda_util.h"
#include "cuda/backend/dummy_fill.cuh"

namespace flashseek::cuda {

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
__device__ __forceinline__ float uniform_pm1(uint64_t h) {  // [-1, 1)
    return float(int64_t(h >> 40) - (int64_t(1) << 23)) * (1.f / float(1 << 23));
}

__global__ void fill_kernel(void* dst, int64_t n, FillParams p, uint64_t stream_seed) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint64_t h = splitmix64(stream_seed ^ splitmix64(uint64_t(i)));
        switch (p.kind) {
            case FillKind::Bf16Uniform:
                static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16(p.center + p.a * uniform_pm1(h));
                break;
            case FillKind::F32Uniform:
                static_cast<float*>(dst)[i] = p.center + p.a * uniform_pm1(h);
                break;
            case FillKind::E4m3Uniform:
                static_cast<__nv_fp8_e4m3*>(dst)[i] = __nv_fp8_e4m3(p.a * uniform_pm1(h));
                break;
            case FillKind::E8m0Jitter:
                static_cast<uint8_t*>(dst)[i] = uint8_t(p.base - int(h & 1));
                break;
            case FillKind::Fp4Bytes:
                static_cast<uint8_t*>(dst)[i] = uint8_t(h >> 56);
                break;
            case FillKind::I64Route: {
                const int64_t row = i / p.top_k, j = i % p.top_k;
                const uint64_t hr = splitmix64(stream_seed ^ splitmix64(uint64_t(row) * 0x51ull));
                const int spread = p.n_experts / p.top_k > 0 ? p.n_experts / p.top_k : 1;
                static_cast<int64_t*>(dst)[i] = int64_t((hr % uint64_t(p.n_experts) + uint64_t(j * spread)) %
                                                        uint64_t(p.n_experts));
                break;
            }
        }
    }
}

}  // namespace

void launch_dummy_fill(void* dst, int64_t n, const FillParams& p, uint64_t seed, cudaStream_t s) {
    if (n <= 0) return;
    const int threads = 256;
    const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 8192);
    fill_kernel<<<unsigned(blocks), threads, 0, s>>>(dst, n, p, seed);
    FS_CUDA_LAUNCHED("dummy weight fill");
}

}  // namespace flashseek::cuda
