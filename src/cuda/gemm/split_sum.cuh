// Split-K pieces shared by the kernels whose last unit of an output tile adds the partials of every K split: the
// election of that unit (the GEMVs, the tile GEMM, the FP8 GEMM) and the sum of one output element (gemv_simt.cu,
// gemv.cu, linear.cu). Internal to src/cuda/gemm.
// Why a helper: written as `for (sp) sum += __ldcg(...)`, each load waited for the add before it (one L2 round trip
// per split); the same sums with four loads in flight took the split-K FP8 GEMM's and the streaming GEMVs' sums down
// by ~0.1 us per value (docs/perf-log/2026-12-04_split-k-fp8-gemm.md). The additions keep split order, so the
// result is bit for bit the plain loop's.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace flashseek::cuda {

// The barrier of a whole CTA (split_arrives_last's default).
struct CtaBarrier {
    __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// Whether the calling unit (a CTA, or the threads that `sync` joins), having stored its partials of one output tile,
// is the last of `splits` units to arrive at the tile's counter; the last one sees every unit's partials. Fence,
// barrier, one atomic by the `leader` thread, barrier, fence. `flag` is a __shared__ word of the unit; every thread
// of the unit calls this. The last unit resets the counter for the next launch after its sum.
template <class Sync = CtaBarrier>
__device__ __forceinline__ bool split_arrives_last(uint32_t* counter, int splits, uint32_t& flag, bool leader,
                                                   Sync sync = {}) {
    __threadfence();
    sync();
    if (leader) flag = atomicAdd(counter, 1u) == uint32_t(splits - 1);
    sync();
    if (!flag) return false;
    __threadfence();
    return true;
}

// p[0] + p[stride] + ... + p[(k - 1) stride], added in that order; the loads of four splits issued together (the
// last group's at clamped addresses, its extra values not added).
__device__ __forceinline__ float sum_splits(const float* p, int64_t stride, int k) {
    float sum = 0.f;
    for (int sp = 0; sp < k; sp += 4) {
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = __ldcg(p + int64_t(min(sp + j, k - 1)) * stride);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (sp + j < k) sum += v[j];
    }
    return sum;
}

}  // namespace flashseek::cuda
