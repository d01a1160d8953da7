// Warp-wide butterfly reductions of one value per lane (every lane gets the result), shared by every kernel family.
// The order of the adds is part of the numerics: the attention kernels rely on this exact xor 16, 8, 4, 2, 1 tree
// (sparse_attention_prefill.cu reproduces it across registers and lanes to stay bit-identical with decode).
#pragma once
#include <cuda_runtime.h>

#include <climits>

namespace flashseek::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Argmax over the warp of (best, best_index) pairs: the largest value, the smallest index among equal values (a
// total order, so the result does not depend on the butterfly's order). A NaN never wins: comparisons with it are
// false, so it is only the result when every lane holds one.
template <typename Index>
__device__ __forceinline__ void warp_argmax(float& best, Index& best_index) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, best, o);
        const Index other_index = __shfl_xor_sync(0xffffffffu, best_index, o);
        if (other > best || (other == best && other_index < best_index)) {
            best = other;
            best_index = other_index;
        }
    }
}

// An order-preserving unsigned key of a float that is not NaN, equal for +0 and -0 (they compare equal).
__device__ __forceinline__ unsigned order_key(float f) {
    const unsigned u = __float_as_uint(f == 0.f ? 0.f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// warp_argmax of non-NaN values in two warp reductions (sm_80+) instead of five dependent butterfly rounds of two
// shuffles each: the largest key, then the smallest index among the lanes holding it. The same total order (value,
// then smaller index), so the same winner; only best_index is updated (the routing's selection rounds, moe_route.cu,
// where the chain is on the decode critical path).
__device__ __forceinline__ void warp_argmax_redux(float best, int& best_index) {
    const unsigned key = order_key(best);
    const unsigned top = __reduce_max_sync(0xffffffffu, key);
    best_index = __reduce_min_sync(0xffffffffu, key == top ? best_index : INT_MAX);
}

}  // namespace flashseek::cuda
