// Programmatic dependent launch (PDL, sm_90+): lets a kernel's CTAs be scheduled while the kernel before it in the
// stream is still finishing, so the ~1-3 us launch gap between the many small dependent kernels of a decode step
// (about 40 per layer) overlaps the previous kernel's tail instead of adding to it. Works inside CUDA graphs
// (captured as programmatic edges).
//
// Contract for a kernel launched with launch_pdl():
//   - every CTA calls pdl_wait() before its first read of memory written by an earlier kernel and before it
//     writes anything an earlier kernel may still read; in practice: first statement of the kernel, before any
//     early return. Checkpoint weights, which no kernel of the stream writes, may be read before it (the
//     one-token GEMVs and the wgmma GEMV request their first weights there, behind the previous kernel's tail);
//     a kernel whose weight loads there are small or predicated waits with pdl_wait_after_prefetch(), or ptxas
//     may issue them after the wait (check the SASS: the wait is ACQBULK).
//     pdl_wait() returns once the preceding grid has completed and its writes are visible, so ordering stays
//     transitive along the stream (each kernel completes only after its own wait returned).
//   - pdl_trigger() (optional) lets the next kernel's CTAs start launching before this one ends.
// On pre-Hopper devices, or with FLASHSEEK_PDL=0 in the environment, launch_pdl() is an ordinary launch and both
// device calls compile to nothing / are no-ops.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/kernel_policy.h"

namespace flashseek::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// pdl_wait() for a kernel that requests checkpoint weights before its wait: the same wait behind a call. ptxas
// treats griddepcontrol.wait as an instruction without operands and may schedule it ahead of the independent loads
// written before it, predicated ones in particular (the SASS of bf16_gemv_kernel, mhc_finalize_kernel,
// route_group_kernel and kv_store_kernel had their weight loads after the wait); a call is a scheduling boundary,
// so the loads are issued first and stay in flight during the wait (docs/perf-log/2026-12-06_attention-kv-loads.md).
static __device__ __noinline__ void pdl_wait_after_prefetch() { pdl_wait(); }
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// pdl_wait() with the trigger after it (trigger_first false: the next kernel is launched once this one's dependency
// is met) or before it (true: the next kernel is launched while this one still waits). A small kernel in a chain
// whose later kernel requests its weights before its own wait passes true, so that the launches reach that kernel
// while the work before the chain still runs and its weight requests overlap that work (the attention's merge and
// wo_a's preparation before one token's ring_gemv). The ordering stays transitive: each kernel still completes only
// after its own wait returned.
__device__ __forceinline__ void pdl_wait_and_trigger(bool trigger_first) {
    if (trigger_first) pdl_trigger();
    pdl_wait();
    if (!trigger_first) pdl_trigger();
}

// Whether launches on the current device use PDL: compute capability >= 9.0 and the process's kernel policy allows
// it (KernelPolicy::pdl; FLASHSEEK_PDL=0 turns it off for A/B runs).
inline bool pdl_enabled() { return KernelPolicy::process().pdl && current_arch().cc >= 90; }

// kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-stream-serialization attribute when
// pdl_enabled(), and (cooperative) the cooperative attribute: the launch fails unless every CTA of the grid can be
// resident at once, which a kernel whose CTAs wait for each other needs (under MPS or beside other work the device
// may offer fewer SMs than it has). The kernel must follow the contract above. Launch errors are checked here.
template <typename... Params, typename... Args>
void launch_attrs(const char* name, bool cooperative, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  cudaStream_t stream, Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2];
    unsigned n = 0;
    if (pdl_enabled()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    if (cooperative) {
        attr[n].id = cudaLaunchAttributeCooperative;
        attr[n].val.cooperative = 1;
        ++n;
    }
    cfg.attrs = n ? attr : nullptr;
    cfg.numAttrs = n;
    const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    if (err != cudaSuccess) throw_cuda_error(err, name, __FILE__, __LINE__);
}
template <typename... Params, typename... Args>
void launch_pdl(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
    launch_attrs(name, false, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace flashseek::cuda
