// The shared-memory mbarrier primitives every ring of stage buffers uses (sm_80+): the bulk-copy streaming kernels
// and the sm_90a GEMMs (through common/bulk_copy.cuh and gemm/tma.cuh) and the prefill attention's stage ring
// (attention/sparse_attention_prefill.cu). One set, so that a ring's init count, arrival forms and phase waits mean
// the same everywhere. The expect_tx arrival and the cluster-scope init fence belong to the bulk copies
// (sm_90, bulk_copy.cuh).
#pragma once
#include <cstdint>

namespace flashseek::cuda::mbar {

__device__ __forceinline__ uint32_t smem_addr(const uint64_t* b) { return uint32_t(__cvta_generic_to_shared(b)); }

// An mbarrier whose phase needs `count` arrivals (plus, on sm_90, its expected transaction bytes).
__device__ __forceinline__ void mbar_init_count(uint64_t* b, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count));
}
// A plain arrival (count 1): a consumer frees a stage.
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
// Arrives once every earlier cp.async of this thread has landed (.noinc: the barrier's arrival count includes this
// arrival, see mbar_init_count).
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* b) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(b)) : "memory");
}
// Waits until the phase of the given parity has completed (sm_90: try_wait, which suspends the warp for a while
// instead of spinning; earlier parts spin on test_wait).
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n .reg .pred p;\n WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n" ::"r"(
            smem_addr(b)),
        "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n .reg .pred p;\n WAIT_%=: mbarrier.test_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n" ::"r"(
            smem_addr(b)),
        "r"(parity)
        : "memory");
#endif
}

}  // namespace flashseek::cuda::mbar
