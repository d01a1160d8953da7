// The kernel behind random_fill.cuh: one element per thread in a grid-stride loop. The formulas of the kinds the
// dummy weights use (BYTES, E4M3_UNIFORM, BF16, F32, E8M0 as a two-value jitter, I64_ROUTE) fix the bench numbers
// and the end-to-end tests' dummy models: changing a hash constant or an expression here changes every dummy
// weight.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda/common/check.cuh"
#include "cuda/common/random_fill.cuh"

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

__global__ void fill_kernel(void* dst, uint64_t n, FillParams p, uint64_t seed) {
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint64_t h = splitmix64(seed ^ splitmix64(i));
        switch (p.kind) {
            case FillKind::BYTES:
                static_cast<uint8_t*>(dst)[i] = uint8_t(h >> 56);
                break;
            case FillKind::E4M3: {
                uint8_t b = uint8_t(h >> 56);
                if ((b & 0x7f) == 0x7f) b ^= 1;  // 0x7f / 0xff are NaN: take the largest finite code instead
                static_cast<uint8_t*>(dst)[i] = b;
                break;
            }
            case FillKind::E4M3_UNIFORM:
                static_cast<__nv_fp8_e4m3*>(dst)[i] = __nv_fp8_e4m3(p.scale * uniform_pm1(h));
                break;
            case FillKind::BF16:
                static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16(p.center + p.scale * uniform_pm1(h));
                break;
            case FillKind::F32:
                static_cast<float*>(dst)[i] = p.center + p.scale * uniform_pm1(h);
                break;
            case FillKind::E8M0:
                static_cast<uint8_t*>(dst)[i] = uint8_t(p.e8m0_hi - int(h % uint64_t(p.e8m0_hi - p.e8m0_lo + 1)));
                break;
            case FillKind::I64_ROUTE: {
                // Row r starts at a hashed expert and steps by n_experts / top_k, so its top_k ids are distinct.
                const uint64_t row = i / uint64_t(p.top_k), j = i % uint64_t(p.top_k);
                const uint64_t hr = splitmix64(seed ^ splitmix64(row * 0x51ull));
                const int spread = p.n_experts / p.top_k > 0 ? p.n_experts / p.top_k : 1;
                static_cast<int64_t*>(dst)[i] =
                    int64_t((hr % uint64_t(p.n_experts) + j * uint64_t(spread)) % uint64_t(p.n_experts));
                break;
            }
        }
    }
}

}  // namespace

void fill_random(void* dst, size_t n_elements, const FillParams& p, uint64_t seed, cudaStream_t stream) {
    if (n_elements == 0) return;
    FS_REQUIRE(dst != nullptr, "fill_random: destination is null");
    if (p.kind == FillKind::E8M0)
        FS_REQUIRE(0 <= p.e8m0_lo && p.e8m0_lo <= p.e8m0_hi && p.e8m0_hi <= 254, "fill_random: E8M0 range [",
                   p.e8m0_lo, ", ", p.e8m0_hi, "] is not within [0, 254] (255 is NaN)");
    if (p.kind == FillKind::I64_ROUTE)
        FS_REQUIRE(p.top_k >= 1 && p.top_k <= p.n_experts, "fill_random: routing rows need 1 <= top_k (", p.top_k,
                   ") <= n_experts (", p.n_experts, ")");
    constexpr int kThreads = 256;
    const size_t blocks = std::min<size_t>((n_elements + kThreads - 1) / kThreads, 8192);
    fill_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(dst, uint64_t(n_elements), p, seed);
    CUDA_CHECK_LAUNCH("fill_kernel");
}

void fill_random(void* dst, size_t n_elements, FillKind kind, uint64_t seed, float scale, cudaStream_t stream) {
    FillParams p;
    p.kind = kind;
    p.scale = scale;
    if (kind == FillKind::E8M0) {
        const uint32_t packed = uint32_t(scale);
        p.e8m0_lo = int(packed & 255);
        p.e8m0_hi = int(packed >> 8);
    }
    FS_REQUIRE(kind != FillKind::I64_ROUTE, "fill_random: routing rows need FillParams (n_experts, top_k)");
    fill_random(dst, n_elements, p, seed, stream);
}

}  // namespace flashseek::cuda
