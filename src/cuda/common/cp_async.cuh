// Per-thread cp.async global -> shared (sm_80+) of 4 or 8 bytes through L1 (.ca), optionally zero-filling: small
// pieces (scales, pair slots, 4-element slices) that several kernels stage without registers; and 16 bytes through
// L2 only (.cg) with a partial zero fill, for contiguous per-token blocks. The 16-byte copies of the tile GEMMs and
// the attention have their own forms (gemm/mma_tile.cuh, attention/attn_tile.cuh, common/bulk_copy.cuh).
#pragma once
#include <cstdint>

namespace flashseek::cuda {

// BYTES (4 or 8) from src to dst, both BYTES-aligned.
template <int BYTES>
__device__ __forceinline__ void cp_async_ca(void* dst, const void* src) {
    static_assert(BYTES == 4 || BYTES == 8, "cp.async.ca copies 4, 8 or 16 bytes; 16 go through .cg elsewhere");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(uint32_t(__cvta_generic_to_shared(dst))), "l"(src),
                 "n"(BYTES)
                 : "memory");
}

// The same with the first src_bytes (0..BYTES) read and the rest zero-filled (0: nothing is read, src must still
// be a valid address).
template <int BYTES>
__device__ __forceinline__ void cp_async_ca_zfill(void* dst, const void* src, int src_bytes) {
    static_assert(BYTES == 4 || BYTES == 8, "cp.async.ca copies 4, 8 or 16 bytes; 16 go through .cg elsewhere");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
                 "l"(src), "n"(BYTES), "r"(src_bytes)
                 : "memory");
}

// 16 bytes, both 16-byte aligned, through L2 only: the first src_bytes (0..16) read, the rest zero-filled (0: nothing
// is read, src must still be a valid address).
__device__ __forceinline__ void cp_async_cg16_zfill(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(uint32_t(__cvta_generic_to_shared(dst))),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}

// Waits for every cp.async this thread issued.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

}  // namespace flashseek::cuda
