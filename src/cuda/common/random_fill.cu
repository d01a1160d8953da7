// On-GPU random fill for dummy weights (see random_fill.cuh): splitmix64 of (seed, index), one element per thread
// in a grid-stride loop.
#include "cuda/common/random_fill.cuh"

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"

namespace flashseek::cuda {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_kernel(void* dst, size_t n, FillKind kind, uint64_t seed, float scale) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint64_t r = mix64(seed * 0x632be59bd9b4e019ull + i);
        const float u = float(r >> 40) * (1.f / 16777216.f) * 2.f - 1.f;  // uniform [-1, 1)
        switch (kind) {
            case FillKind::BYTES: static_cast<uint8_t*>(dst)[i] = uint8_t(r); break;
            case FillKind::E4M3: {
                uint8_t b = uint8_t(r);
                if ((b & 0x7f) == 0x7f) b ^= 1;  // 0x7f / 0xff are NaN
                static_cast<uint8_t*>(dst)[i] = b;
                break;
            }
            case FillKind::BF16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16_bits(u * scale); break;
            case FillKind::F32: static_cast<float*>(dst)[i] = u * scale; break;
            case FillKind::E8M0: {
                const uint32_t packed = uint32_t(scale), lo = packed & 255, hi = packed >> 8;
                static_cast<uint8_t*>(dst)[i] = uint8_t(lo + uint32_t(r % (hi - lo + 1)));
                break;
            }
        }
    }
}

}  // namespace

void fill_random(void* dst, size_t n_elements, FillKind kind, uint64_t seed, float scale, cudaStream_t stream) {
    if (n_elements == 0) return;
    FS_REQUIRE(dst != nullptr, "fill_random: destination is null");
    if (kind == FillKind::E8M0) {
        const uint32_t packed = uint32_t(scale);
        FS_REQUIRE((packed & 255) <= (packed >> 8) && (packed >> 8) < 255, "fill_random: bad E8M0 range ", packed);
    }
    const size_t blocks = std::min<size_t>((n_elements + 255) / 256, 65536);
    fill_kernel<<<unsigned(blocks), 256, 0, stream>>>(dst, n_elements, kind, seed, scale);
    CUDA_CHECK_LAUNCH("fill_kernel");
}

}  // namespace flashseek::cuda
