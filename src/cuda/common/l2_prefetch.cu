// prefetch_to_l2 (l2_prefetch.cuh): a few CTAs of one warp each, every lane requesting its own contiguous pieces.
#include "cuda/common/l2_prefetch.cuh"

#include <algorithm>
#include <cstdint>

#include "cuda/common/check.cuh"

namespace flashseek::cuda {
namespace {

constexpr size_t kPiece = size_t(64) << 10;  // bytes per bulk prefetch
constexpr int kLanes = 32;
constexpr int kMaxCtas = 64;  // spread over copy engines of many SMs; each CTA leaves as soon as it has issued

// Lane i of the grid requests pieces i, i + G, i + 2G, ... of the 16-byte-aligned range [lo, hi).
__global__ void __launch_bounds__(kLanes) l2_prefetch_kernel(const char* lo, const char* hi) {
    const size_t lane = size_t(blockIdx.x) * kLanes + threadIdx.x, stride = size_t(gridDim.x) * kLanes;
    const size_t n = size_t(hi - lo);
    for (size_t off = lane * kPiece; off < n; off += stride * kPiece) {
        const char* a = lo + off;
        const uint32_t len = uint32_t(n - off < kPiece ? n - off : kPiece);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(len) : "memory");
#else
        for (uint32_t b = 0; b < len; b += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + b));
#endif
    }
}

}  // namespace

void prefetch_to_l2(const void* p, size_t bytes, cudaStream_t stream) {
    if (p == nullptr || bytes == 0) return;
    // The bulk form takes 16-byte-aligned addresses and sizes: widen the range to the 16-byte grid (the lines it
    // touches are the same, prefetches never fault).
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(15);
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes + 15) & ~uintptr_t(15);
    const size_t pieces = (hi - lo + kPiece - 1) / kPiece;
    const int ctas = int(std::min<size_t>(kMaxCtas, (pieces + kLanes - 1) / kLanes));
    l2_prefetch_kernel<<<unsigned(ctas), kLanes, 0, stream>>>(reinterpret_cast<const char*>(lo),
                                                              reinterpret_cast<const char*>(hi));
    CUDA_CHECK_LAUNCH("l2_prefetch_kernel");
}

}  // namespace flashseek::cuda
