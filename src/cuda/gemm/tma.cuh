// Device side of the sm_90a compute-bound GEMMs (gemm_sm90.cu, moe/moe_gemm_sm90.cu): TMA tile loads and stores
// with tensor maps (gemm/tensor_map.h builds them on the host), the mbarrier arrive the consumers use to free a
// stage, register reallocation between the producer and the math warpgroups, and the shared-memory matrix
// descriptor of a K-major tile written by TMA with the 128-byte swizzle.
// Callers guard their bodies with FS_WGMMA_AVAILABLE (common/wgmma.cuh): setmaxnreg exists only in the
// arch-specific sm_90a build.
//
// Tile layout (PTX ISA, "matrix descriptor" and "tensor copy" sections): every tile row is exactly 128 bytes of K
// (128 e4m3 or 64 bf16 values); TMA with CU_TENSOR_MAP_SWIZZLE_128B stores the 16-byte chunk c of row r at chunk
// c ^ (r % 8) of that row, rows 128 bytes apart, so 8 rows form one 1024-byte swizzle atom. The tile base must be
// 1024-byte aligned (the swizzle is a function of the absolute shared address). The wgmma descriptor of such a tile
// (K-major, swizzle mode 1 = 128B): start address >> 4, leading byte offset unused (only one atom along K), stride
// byte offset 1024 (from one 8-row group to the next). A k-step of 32 bytes inside the row advances the start
// address by 32 bytes; the hardware applies the same XOR to the computed addresses, so no base offset is needed.
#pragma once
#include <cstdint>

#include "cuda/common/bulk_copy.cuh"
#include "cuda/common/wgmma.cuh"

namespace flashseek::cuda::tma {

#if FS_WGMMA_AVAILABLE
using bulk::smem_u32;

// Matrix descriptor of a K-major 128B-swizzled tile starting at shared address `addr` (see the header).
__device__ __forceinline__ uint64_t sw128_descriptor(uint32_t addr) {
    return uint64_t((addr >> 4) & 0x3fff) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Brings a tensor map (a __grid_constant__ kernel parameter) into the descriptor cache before its first use.
__device__ __forceinline__ void prefetch_map(const void* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// One 2-D box of `map` at coordinates (c0 = innermost, c1) into shared memory at dst (128-byte aligned; 1024 with
// the 128-byte swizzle), completing `bar`'s transaction bytes (the whole box counts, out-of-bounds elements are
// written as zeros). c0 times the element size must be a multiple of 16 bytes: the copy engine refuses another
// start with an illegal instruction (the grouped expert GEMM's scale boxes at an expert's first slot did).
__device__ __forceinline__ void load_2d(void* dst, const void* map, int32_t c0, int32_t c1, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            smem_u32(dst)),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
        : "memory");
}

// One 2-D box of `map` at coordinates (c0 = innermost, c1) from shared memory at src (1024-byte aligned with the
// 128-byte swizzle: the box is laid out as load_2d would have written it), into the bulk async-group of the issuing
// thread. Elements outside the matrix are not written. The source must have been made visible to the async proxy
// (fence_proxy_async by every thread that wrote it) and stay unchanged until wait_group_read covers the group.
__device__ __forceinline__ void store_2d(const void* map, const void* src, int32_t c0, int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(smem_u32(src)), "r"(c0), "r"(c1)
                 : "memory");
}
// Closes the issuing thread's bulk async-group of the stores issued since the last commit.
__device__ __forceinline__ void commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Waits until at most N of the thread's committed groups still read their shared sources (the buffers may be
// rewritten), or, for wait_group, until at most N are incomplete (their writes done: before the CTA exits).
template <int N>
__device__ __forceinline__ void wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

using mbar::mbar_arrive;  // a consumer warp frees a stage (common/mbarrier.cuh)

// Register reallocation of a whole warpgroup (every thread of it executes the same call): the producer gives
// registers back, the math warpgroups take them.
template <int R>
__device__ __forceinline__ void release_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void claim_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}
#endif

}  // namespace flashseek::cuda::tma
