// Moving a decode GEMV's weights towards L2 before griddepcontrol.wait.
// Why: under programmatic dependent launch (common/pdl.cuh) a kernel's CTAs become resident while the kernel before
// it is still running. At decode the kernels in front of most projections (norms, RoPE, attention, routing, mHC) are
// latency chains that leave DRAM nearly idle, and the projection then starts its weight stream from a cold ramp.
// Weights never depend on earlier kernels, so the CTAs that are resident early may request them before their wait:
// the first `ctas` CTAs of the grid each prefetch one contiguous slice of the first `max_bytes` of the matrix
// (prefetch.global.L2, one request per 128-byte line; nothing is loaded into registers or shared memory, nothing can
// fault). The GEMV then reads those lines from L2. A CTA that only starts after the wait issues its slice anyway;
// the lines are then in flight a little ahead of its own loads.
// The cap (FLASHSEEK_L2_PREFETCH_MB, default below) keeps the prefetched part small enough to still be in L2 when
// it is read; 0 turns the prefetch off. Without PDL (pre-Hopper, FLASHSEEK_PDL=0) there is no early window and the
// plan is empty.
#pragma once
#include <cstdint>

namespace flashseek::cuda {

struct WeightPrefetch {
    uint64_t max_bytes = 0;  // prefix of the weight range to prefetch (0: none)
    uint32_t ctas = 0;       // CTAs (linear index within the grid) that each issue one slice
};

// Host: the plan for a launch of `grid_ctas` CTAs over a weight range of `bytes` bytes.
WeightPrefetch plan_weight_prefetch(uint64_t bytes, uint64_t grid_ctas);

#if defined(__CUDACC__)
__device__ __forceinline__ uint32_t linear_cta_index() {
    return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// Issues CTA `cta`'s slice of the first plan.max_bytes of [base, base + bytes). Call before pdl_wait().
__device__ __forceinline__ void prefetch_weights_l2(const void* base, uint64_t bytes, const WeightPrefetch& plan,
                                                    uint32_t cta) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cta >= plan.ctas) return;
    const uint64_t total = bytes < plan.max_bytes ? bytes : plan.max_bytes;
    const uint64_t per = ((total + plan.ctas - 1) / plan.ctas + 127) & ~uint64_t(127);
    const uint64_t begin = uint64_t(cta) * per;
    const uint64_t end = begin + per < total ? begin + per : total;
    const char* b = static_cast<const char*>(base);
    for (uint64_t off = begin + uint64_t(threadIdx.x) * 128; off < end; off += uint64_t(blockDim.x) * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(b + off));
#else
    (void)base, (void)bytes, (void)plan, (void)cta;
#endif
}
#endif

}  // namespace flashseek::cuda
