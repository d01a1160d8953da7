// prefetch_to_l2 (l2_prefetch.cuh): up to 64 CTAs of one warp each, every lane requesting its own 16 KB pieces.
#include "cuda/common/l2_prefetch.cuh"

#include <algorithm>
#include <cstdint>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"

namespace flashseek::cuda {
namespace {

constexpr size_t kPiece = size_t(16) << 10;  // bytes per bulk prefetch: a 33.6 MB matrix is 2,048 of them
constexpr int kLanes = 32;
constexpr int kMaxCtas = 64;  // the pieces spread over the copy engines of 64 SMs; each CTA leaves once it issued

// Lane i of the grid requests pieces i, i + G, i + 2G, ... of the 16-byte-aligned range [lo, hi).
__global__ void __launch_bounds__(kLanes) l2_prefetch_kernel(const char* lo, const char* hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const size_t lane = size_t(blockIdx.x) * kLanes + threadIdx.x, stride = size_t(gridDim.x) * kLanes;
    const size_t n = size_t(hi - lo);
    for (size_t off = lane * kPiece; off < n; off += stride * kPiece) {
        const uint32_t len = uint32_t(n - off < kPiece ? n - off : kPiece);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo + off), "r"(len) : "memory");
    }
#endif
}

}  // namespace

void prefetch_to_l2(const void* p, size_t bytes, cudaStream_t stream) {
    if (p == nullptr || bytes == 0 || current_arch().cc < 90) return;
    // The bulk form takes 16-byte-aligned addresses and sizes: the range widened to the 16-byte grid (the lines it
    // touches are the same; prefetches never fault).
    const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~uintptr_t(15);
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes + 15) & ~uintptr_t(15);
    const size_t pieces = (hi - lo + kPiece - 1) / kPiece;
    const int ctas = int(std::min<size_t>(kMaxCtas, (pieces + kLanes - 1) / kLanes));
    l2_prefetch_kernel<<<unsigned(ctas), kLanes, 0, stream>>>(reinterpret_cast<const char*>(lo),
                                                              reinterpret_cast<const char*>(hi));
    CUDA_CHECK_LAUNCH("l2_prefetch_kernel");
}

}  // namespace flashseek::cuda
