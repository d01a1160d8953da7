// Pieces of the passes over long rows spread over many CTAs (the greedy argmax, the sampler's max and normalizer):
// a thread's strided loads of one chunk requested together, and the CTA's largest 64-bit key. Keys pack a value's
// order-preserving bits above an index's complement, so a maximum of keys is an argmax with the lowest index on ties
// and the order of the reduction does not matter.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashseek::cuda {

// v[k] = row[i0 + k * stride] where that is below end, else fill: N loads in flight before any is used.
template <int N>
__device__ __forceinline__ void load_strided(const float* row, int64_t i0, int64_t stride, int64_t end, float fill,
                                             float (&v)[N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const int64_t i = i0 + int64_t(k) * stride;
        v[k] = i < end ? row[i] : fill;
    }
}

// The largest key of a CTA of kThreads threads (every thread passes one; 0 = none), valid in thread 0. s_warp:
// kThreads / 32 slots. Contains a CTA barrier: every thread must call it.
template <int kThreads>
__device__ __forceinline__ unsigned long long cta_max_key(unsigned long long key, unsigned long long* s_warp) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, key, o);
        key = other > key ? other : key;
    }
    if ((threadIdx.x & 31) == 0) s_warp[threadIdx.x >> 5] = key;
    __syncthreads();
    if (threadIdx.x == 0)
#pragma unroll
        for (int w = 1; w < kThreads / 32; ++w) key = s_warp[w] > key ? s_warp[w] : key;
    return key;
}

}  // namespace flashseek::cuda
