// Device helpers of the bulk-copy streaming kernels (moe/moe_bulk.cu, gemm/bulk_gemv.cu), sm_90+ only (callers
// guard their bodies with __CUDA_ARCH__ >= 900): mbarriers, cp.async.bulk and per-lane cp.async global -> shared
// completing on mbarriers, and the e4m3 tensor-core pieces (FP4 -> e4m3 bit moves, f16 e4m3 codes -> bytes,
// mma.sync m16n8k32 e4m3).
// Why asynchronous copies into shared memory: they complete on an mbarrier, so a warp keeps kilobytes in flight
// without registers; per-thread 16-byte loads into registers reached 24-53% of the copy bandwidth, bulk copies
// ~100% (scripts/probes/stream_probe.cu, docs/perf.md). Weight rows go by per-lane 16-byte cp.async (a bulk copy
// per row with per-lane addresses is issued one lane at a time); bulk copies remain for one-thread tiles.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/mbarrier.cuh"

namespace flashseek::cuda::bulk {

// Dynamic shared memory of the per-warp rings: [warps][stages][stage_bytes] slots, then [warps][stages] mbarriers.
constexpr size_t ring_smem_bytes(int warps, int stages, int stage_bytes) {
    return size_t(warps) * stages * stage_bytes + size_t(warps) * stages * 8;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

using mbar::mbar_init_count;  // the ring primitives (common/mbarrier.cuh)
using mbar::mbar_wait;
using mbar::cp_async_mbar_arrive;
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
// Orders this thread's earlier generic-proxy shared-memory accesses before later bulk copies into the same memory
// (a stage is refilled only after every lane of the warp read it: __syncwarp first).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// bytes % 16 == 0, src and dst 16-byte aligned.
__device__ __forceinline__ void copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
        "l"(src), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
}

// 16 bytes global -> shared through L2 (cp.async.cg, no L1 allocation), each lane its own addresses: a warp moves
// 512 bytes per instruction, where per-lane cp.async.bulk copies are issued one lane at a time (the bulk copy takes
// uniform operands, so ptxas loops over the lanes: ~8 instructions per copy). dst, src 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}

// 8 FP4 nibbles (element 2i in the low nibble of byte i) -> even elements' e4m3 codes (lo) and odd ones' (hi), each
// the code of value * 2^-6: sign to bit 7, e1.e0.m to bits 4..2 (FP4 subnormal 0.5 -> e4m3 subnormal).
__device__ __forceinline__ void fp4x8_to_e4m3(uint32_t x, uint32_t& lo, uint32_t& hi) {
    hi = ((x & 0x70707070u) >> 2) | (x & 0x80808080u);
    lo = ((x & 0x07070707u) << 2) | ((x << 4) & 0x80808080u);
}

// Two f16 that hold e4m3 values exactly (prepared release activations) -> two e4m3 bytes, low half -> low byte.
__device__ __forceinline__ uint32_t f16x2_to_e4m3x2(uint32_t v) {
    __half2_raw r;
    r.x = uint16_t(v & 0xffffu);
    r.y = uint16_t(v >> 16);
    return uint32_t(__nv_cvt_halfraw2_to_fp8x2(r, __NV_SATFINITE, __NV_E4M3));
}

// Eight columns [8i, 8i + 8) of a prepared FP8-layout activation (e4m3 values as f16, stored x0 x2 x1 x3 x4 x6 x5 x7:
// the mma_gemv fragment order) -> their e4m3 bytes in column order: lo = x0..x3, hi = x4..x7.
__device__ __forceinline__ void prepared_fp8x8_to_e4m3(const uint4& v, uint32_t& lo, uint32_t& hi) {
    const uint32_t p = f16x2_to_e4m3x2(v.x) | (f16x2_to_e4m3x2(v.y) << 16);  // x0 x2 x1 x3
    const uint32_t q = f16x2_to_e4m3x2(v.z) | (f16x2_to_e4m3x2(v.w) << 16);  // x4 x6 x5 x7
    lo = __byte_perm(p, 0u, 0x3120);
    hi = __byte_perm(q, 0u, 0x3120);
}

// d = A (16 x 32, e4m3) * B (32 x 8, e4m3), fp32, C = 0. Not volatile: the compiler may overlap independent mmas.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f), "f"(0.f), "f"(0.f), "f"(0.f));
}

// This warp's ring in that layout; lanes < stages initialise its mbarriers, made visible to the async proxy. Count
// 32: every lane copies its 16-byte pieces of a stage with cp.async and arrives through cp_async_mbar_arrive (one
// cp.async.bulk per row with per-lane addresses is issued by ptxas one lane at a time, ~8 instructions per row:
// the wgmma kernels lost ~13% of their time to that, docs/perf-log).
struct WarpRing {
    unsigned char* slots;
    uint64_t* bars;
};
template <int kWarps, int kStages, int kStageBytes>
__device__ __forceinline__ WarpRing warp_ring(unsigned char* smem, int warp, int lane) {
    WarpRing r;
    r.slots = smem + size_t(warp) * kStages * kStageBytes;
    r.bars = reinterpret_cast<uint64_t*>(smem + size_t(kWarps) * kStages * kStageBytes) + warp * kStages;
    if (lane < kStages) mbar_init_count(&r.bars[lane], 32);
    mbar_init_fence();
    __syncwarp();
    return r;
}

// Starts moving the cache lines of [p, p + bytes) (bytes <= 256, any alignment) into L2, so later loads hit L2.
// Prefetches never fault.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
    const char* c = static_cast<const char*>(p);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c));
    if (bytes > 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(c + 128));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + bytes - 1));  // the third line a range of <= 256 bytes can touch
}

__device__ __forceinline__ float e8m0_to_f32_scaled(uint32_t b, uint32_t log2_extra) {  // 2^(b - 127 + extra)
    return __uint_as_float((b + log2_extra) << 23);
}
#endif

}  // namespace flashseek::cuda::bulk
