// Element i of a small array whose index is known at run time only, as a chain of selects: indexed directly, a
// kernel-parameter array would be copied to local memory, and a register array spilled there. Used by the peer
// all-reduce kernels (their per-rank pointers) and the norms (the chunk a warp finishes).
#pragma once
#include <cuda_runtime.h>

namespace flashseek::cuda {

template <typename T, int N>
__device__ __forceinline__ T pick(const T (&arr)[N], int i) {
    T v = arr[0];
#pragma unroll
    for (int k = 1; k < N; ++k)
        if (k == i) v = arr[k];
    return v;
}

}  // namespace flashseek::cuda
