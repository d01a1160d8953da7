// Pieces of the passes over long rows spread over many CTAs (the greedy argmax, the sampler's max and normalizer):
// a thread's strided loads of one chunk requested together, and the largest 64-bit key of a thread's entries and of
// the CTA. Keys pack a value's order-preserving bits above an index's complement, so a maximum of keys is an argmax
// with the lowest index on ties and the order of the reduction does not matter.
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

// The key of value bits `value_key` (order-preserving) at index i, and the index a key holds.
__device__ __forceinline__ unsigned long long value_index_key(uint32_t value_key, uint32_t i) {
    return (unsigned long long)value_key << 32 | (0xffffffffu - i);
}
__device__ __forceinline__ uint32_t key_index(unsigned long long key) { return 0xffffffffu - uint32_t(key); }

// The largest key_of(value, index) over this thread's entries of row[begin, end): threadIdx.x + begin, then every
// kThreads, kPerThread loads in flight. key_of returns 0 for an entry that cannot win; 0 when none can.
template <int kThreads, int kPerThread, typename KeyOf>
__device__ __forceinline__ unsigned long long thread_max_key(const float* row, int64_t begin, int64_t end,
                                                             KeyOf key_of) {
    unsigned long long best = 0;
    for (int64_t i0 = begin + threadIdx.x; i0 < end; i0 += int64_t(kThreads) * kPerThread) {
        float v[kPerThread];
        load_strided(row, i0, kThreads, end, 0.f, v);
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
            const int64_t i = i0 + int64_t(k) * kThreads;
            const unsigned long long key = i < end ? key_of(v[k], uint32_t(i)) : 0ull;
            best = key > best ? key : best;
        }
    }
    return best;
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

// The largest key_of(value, index) of this CTA's slice of a row: entries [blockIdx.x * slice, + slice) clipped to
// n, valid in thread 0 (0 when nothing can win). Contains a CTA barrier: every thread must call it.
template <int kThreads, int kPerThread, typename KeyOf>
__device__ __forceinline__ unsigned long long slice_max_key(const float* row, int64_t n, int64_t slice, KeyOf key_of) {
    __shared__ unsigned long long s_warp[kThreads / 32];
    const int64_t begin = int64_t(blockIdx.x) * slice, end = begin + slice < n ? begin + slice : n;
    return cta_max_key<kThreads>(thread_max_key<kThreads, kPerThread>(row, begin, end, key_of), s_warp);
}

}  // namespace flashseek::cuda
