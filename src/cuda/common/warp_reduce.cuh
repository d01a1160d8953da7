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

// An order-preserving unsigned key of a float that is not NaN, equal for +0 and -0 (they compare equal).
__device__ __forceinline__ unsigned order_key(float f) {
    const unsigned u = __float_as_uint(f == 0.f ? 0.f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The argmax over the warp of non-NaN values (the largest value, the smallest index among equal ones) in two warp
// reductions (sm_80+) instead of five dependent butterfly rounds of two shuffles each: the largest key, then the
// smallest index among the lanes holding it. A total order, so the result does not depend on the reduction's order.
// Only best_index is updated (the routing's selection rounds, moe_route.cu, where the chain is on the decode
// critical path).
__device__ __forceinline__ void warp_argmax_redux(float best, int& best_index) {
    const unsigned key = order_key(best);
    const unsigned top = __reduce_max_sync(0xffffffffu, key);
    best_index = __reduce_min_sync(0xffffffffu, key == top ? best_index : INT_MAX);
}

}  // namespace flashseek::cuda
