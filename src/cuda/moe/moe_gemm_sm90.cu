// Grouped FP4 expert GEMMs on sm_90a (moe_gemm.cuh; tiles of grouped_gemm_common.cuh), with the weights as the
// register operand of wgmma. A tile's weight rows are the M side (two math warpgroups x 64 rows), its BM slot rows
// the N side (TMA, 128-byte swizzle, read by both warpgroups from shared memory). Our own kernel, not CUTLASS: the
// FP4 conversion with per-32 scale folding into the register fragment and the SwiGLU / act_quant epilogue are
// specific to this checkpoint format.
// Why the weights go through registers: the earlier form expanded every FP4 weight into an e4m3 tile in shared
// memory on one producer warpgroup and both math warpgroups read it back as a descriptor operand. Nsight Compute put
// its 128-K stage at ~2,600 cycles against ~700 of tensor work (the math warps waited on one expanding warp per
// scheduler; 48 KB of shared-memory traffic per stage for the expanded tile). Here every math thread converts only
// its own fragment (rows g and g + 8 of its warp, 64 values per stage) straight from the packed bytes while its
// warpgroup's previous wgmma runs. Measured on the H200 (docs/perf-log/2026-12-02_register-operand-experts.md): a
// 4,096-token prefill pass's up-projection 3.64 -> 2.66 ms per layer, down 1.76 -> 1.21 ms (bench events).
// Why slot tiles of 32 and 64 rows beside 128 (BM = Problem::slot_rows, chosen per pass by moe_gemm_slot_rows): a short
// prompt gives each expert few slots (256 tokens x 6 picks over 256 experts: ~6 each), and a 128-row tile pays for 128
// whatever it holds: per 128-K stage four m64n128k32 wgmma per math warpgroup (~512 tensor-core cycles per stage and
// SM, more than the ~470 cycles the SM's share of the copy rate needs for the stage's 8 KB of weights), 64 promotions
// per thread and a 16 KB slot tile from L2. A 256-token prefill's routed experts ran at 33-35% of the copy rate, 39.9
// of its 53.3 ms of per-op events (run 216 of docs/perf-log/2026-12-05_expert-weight-boxes.md). A 32-row tile does a
// quarter of that work and reads a 4 KB slot tile; the weights and their conversion per tile are the same, so an expert
// whose slots need several narrow tiles converts its weights once per tile.
// Design:
//   - Producer warpgroup (128 threads, 56 registers). Warps 8-9 issue, as soon as the math warps free a stage slot:
//     thread 0 loads the packed FP4 weight tile by TMA (two boxes of 64 rows x one 128-K block, 64 bytes, with the
//     64-byte swizzle, from the expert's maps in ExpertTable::w_maps; expect_tx on the stage's landed barrier) and
//     the stage's slot tile (expect_tx on the full barrier); thread i copies the E8M0 scales of raw rows i and i + 64
//     (16 bytes, four stages' worth, at every fourth stage where the expert's scale rows allow it, else 4 bytes per
//     stage: every row is its own 128-byte line, so a warp's copy costs 32 L1 wavefronts whatever its width, and the
//     4-byte form spent ~130 of the ~900 shared-memory wavefronts of a stage, Nsight Compute run 88; at a sub-tile's
//     first stage also the words holding the rows' reference exponents) and, for i < BM / 2, the activation scales of
//     slots 2i and 2i + 1 (two 4-byte cp.async into the math threads' order, Smem::sa_index), then arrives on
//     landed through cp.async.mbarrier.arrive (count 64 + 1). Rows, tile and pointers are set once per sub-tile. Warps 10-11
//     finish: thread i waits for the landed barrier, then per row and 32-group the 8-entry e4m3 magnitude table
//     against the row's reference (group_table below) and, at a sub-tile's first stage, the row's column scale,
//     and arrives on the full barrier (count 1 + 64). Issuing never waits for data: every free
//     slot has its copies in flight. (With the finishing done by the issuing threads a few stages later, a stage
//     could be finished only after a later one was issued, which needed the math warps to free a slot: the pipeline
//     ran about one stage deep and the kernel was slower than the earlier form.)
//     Why the weights come by TMA: copied by the issuing threads (one 16-byte cp.async per row and 32 K), the
//     weight tiles cost 40% of the kernel's time (a variant without those copies ran 1.66x faster, run 84 of
//     docs/perf-log/2026-12-02_row-reference-experts.md), while the math warps waited on the full barrier at 81% of
//     their stages and the issuers almost never waited for a free slot (Nsight Compute, run 81); prefetching the
//     rows into L2 ahead made it slower, so the cost was the copies' path through the load/store unit, not DRAM.
//   - Math warpgroups (2 x 128 threads, 224 registers). Up-projection: a tile is one 128-column block of h in two
//     sub-tiles of 64 columns; warp q of warpgroup w holds h column c = 32w + 8q + g of the sub-tile as fragment
//     row g (its w1 row) and row g + 8 (its w3 row), so gate and up of (c, slot) meet in one thread. Down: 128 w2
//     rows, warpgroup w rows 64w... Per stage: convert the next stage's fragment (per row one 16-byte load of its
//     32-group t4 and that group's table, the slot tile's codes being GROUP_INTERLEAVED to match; per 4 values the
//     table lookup and the signs, codes8 below) while this stage's four m64nBMk32 wgmma run; wait, promote
//     fin += acc * a_scale[slot] (fp32; the slots' scales in BM / 16 16-byte loads), free the stage, issue the
//     next stage's wgmma. The row's column scale multiplies fin once, in the epilogue.
//   - Epilogue: down: fp32 rows per slot, or bf16 rows (y_bf16) through the staging block with 16-byte stores.
//     Up: h = bf16(silu(min(bf16 g, L)) * clamp(bf16 u) * weight[slot]) into a shared staging block (BM slots x
//     128 columns, bf16) over both sub-tiles, then each pair of math threads quantizes one slot's 128 values (the
//     down-projection's act_quant input, GROUP_INTERLEAVED) and stores them.
//     Slots past the expert's count are not stored.
// Numerics: moe_gemm.cuh's scale folding with one reference per row over the whole K (ExpertTable::row_ref, made
// when the weights are bound), the same per-slot arithmetic whatever the grouping. Against one reference per (row,
// 128-K block), which needs a row-scale product per accumulator and stage (64 FMUL per math thread and stage), the
// bits are the same wherever every group lies within 2^14 of its row's largest scale: acc and every partial sum
// scale by the same power of two, and fp32 rounding commutes with that. (Scanning each row's K / 32 scales in the
// kernel at every sub-tile instead of reading a precomputed byte measured slower than the products it saved.)
// Each k-step sums 8 products of each of the block's four 32-groups (the interleaved order) where the mma.sync
// kernels' steps take one group each: the same 128 products per promotion, summed in another order inside the
// tensor core, so the two paths' bits differ (as they did before: mma.sync and wgmma accumulate differently).
// The slot tile's width changes none of a slot's arithmetic: the same fragments and k32 steps (one wgmma of width
// BM instead of 128), the same promotions in the same order, the same epilogue; the widths give the same bits if
// the tensor core's sum of an element does not depend on the instruction's N (tests/cuda/linear/test_moe_gemm.cpp
// checks it bit for bit), which prefill batch invariance needs (the width follows the pass's size).
// compute-sanitizer: memcheck clean; racecheck reports the mbarrier-ordered hand-offs (TMA / cp.async -> landed ->
// finisher -> full -> math, and back through empty) as hazards, as it did for the earlier form: it does not follow
// mbarrier phases.
#include <cuda.h>

#include <string>
#include <type_traits>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/cp_async.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/tensor_map.h"
#include "cuda/gemm/tma.cuh"
#include "cuda/gemm/wgmma_ss.cuh"
#include "cuda/moe/fp4_expand.cuh"
#include "cuda/moe/grouped_gemm_common.cuh"

namespace flashseek::cuda::grouped_gemm {
namespace {

constexpr int kMathThreads = 256;             // two math warpgroups (warps 0-7)
constexpr int kThreads = kMathThreads + 128;  // + the producer warpgroup (its registers go to the math warps)
constexpr int kBN = kBlockN;  // weight rows per tile

constexpr int kRawTile = kBN * 64;   // packed FP4, 128 K per row
// E8M0 scales, 16 bytes per row: the four groups of this stage and, where the rows allow 16-byte copies, of the
// next three stages too (copied at every fourth stage; the finisher keeps them in registers).
constexpr int kScaleBlock = kBN * 16;
constexpr int kTables = kBN * 4 * 8;  // per row and 32-group (row-major): the magnitude table (two words)
constexpr int kStagingPitch = 128 + 8;  // bf16 per staged slot row: + 16 bytes against bank conflicts

// Shared memory of the kernel with BM slot rows per tile (32, 64 or 128).
template <int BM>
struct Smem {
    // Stages in flight: as many as fit in 227 KB. The narrow tiles' smaller slot tiles leave room for more, and
    // they need it: their tensor work per stage is below the SM's share of the copy rate, so only the weight bytes
    // in flight (8 KB per stage) keep the SM at that share.
    static constexpr int kStages = BM == 128 ? 6 : BM == 64 ? 8 : 11;
    static constexpr int kATile = BM * 128;  // slot codes, 128 K
    // The activation scales of a stage in the order the math threads read them: thread t4 of each quad needs slots
    // 8i + 2 t4 + j (i < BM / 8, j < 2), stored contiguously at t4 * kSaPitch + 2i + j, so BM / 16 16-byte loads
    // fetch them; a pitch of BM / 4 + 4 floats puts the four quads' rows on different banks.
    static constexpr int kSaPitch = BM / 4 + 4;
    static constexpr int kSaStage = 4 * kSaPitch * 4;  // bytes per stage
    static constexpr size_t kRawOffset = size_t(kStages) * kATile;
    static constexpr size_t kScaleOffset = kRawOffset + size_t(kStages) * kRawTile;
    static constexpr size_t kTableOffset = kScaleOffset + size_t(kStages) * kScaleBlock;
    static constexpr size_t kSaOffset = kTableOffset + size_t(kStages) * kTables;
    static constexpr size_t kRefOffset = kSaOffset + size_t(kStages) * kSaStage;  // per stage: a reference byte per row
    static constexpr size_t kRowScaleOffset = kRefOffset + size_t(kStages) * kBN;
    static constexpr size_t kStagingOffset = kRowScaleOffset + size_t(kStages) * kBN * 4;
    static constexpr size_t kBarrierOffset = kStagingOffset + size_t(BM) * kStagingPitch * 2;
    static constexpr size_t kPrefixOffset = kBarrierOffset + 3 * kStages * 8;
    static constexpr size_t kBytes = kPrefixOffset + (kMaxExperts + 1) * 4 + 1024;
    static_assert(kATile % 1024 == 0 && kRawOffset % 1024 == 0, "swizzled slot tiles 1024-aligned");
    static_assert(kTableOffset % 16 == 0 && kSaOffset % 16 == 0 && kSaStage % 16 == 0 && kStagingOffset % 16 == 0,
                  "alignment");
    static_assert(kBytes <= 227 * 1024, "shared memory of one sm_90 CTA");
    // Where slot n of a stage's activation scales is stored (floats from the stage's start).
    static __host__ __device__ constexpr int sa_index(int n) {
        return ((n >> 1) & 3) * kSaPitch + 2 * (n >> 3) + (n & 1);
    }
};

struct GroupedParams {
    CUtensorMap map_a;        // the slots' act_quant codes
    const float* a_scales;    // ... and their scales, [K / 128, a_scales_ld]
    int64_t a_scales_ld;
    int slots;                // rows of the act_quant (every expert's slots)
    const void* const* s_a;   // per expert: the E8M0 scales of up: w1, down: w2
    const void* const* s_b;   // up: w3, down: unused
    const uint8_t* ref_a;  // row references of w_a's / w_b's rows (expert e at e * ref_stride)
    const uint8_t* ref_b;
    int64_t ref_stride;
    const unsigned char* maps_a;  // TMA maps of w_a's / w_b's packed weights (expert e at + 384 e)
    const unsigned char* maps_b;
    const int32_t* count;
    const int32_t* offset;
    int E;
    int K;         // weights per row (hidden for up, inter for down)
    int n_blocks;  // tiles along the output columns: inter / 128 (up: h blocks) or hidden / 128 (down)
    const float* slot_weight;
    float limit;
    uint8_t* h_codes;  // up: act_quant of h, [slots, ldo] codes
    float* h_scales;   // ... and [inter / 128, h_scales_ld] scales
    int64_t h_scales_ld;
    float* y;            // down: fp32 [slots, ldo]
    uint16_t* y_bf16;    // ... or those values rounded to bf16 (staged, coalesced stores)
    int64_t ldo;
};

#if FS_WGMMA_AVAILABLE

using bulk::mbar_expect_tx;
using bulk::mbar_init_count;
using bulk::mbar_init_fence;
using bulk::mbar_wait;
using bulk::smem_u32;
// Lane 0 of the warp arrives on the mbarrier, predicated inside one instruction: a branch on the lane there made
// ptxas serialize every wgmma of the kernel (C7518, "WG.DP in divergent path").
__device__ __forceinline__ void mbar_arrive_lane0(uint64_t* b, int lane) {
    asm volatile("{\n .reg .pred p;\n setp.eq.s32 p, %1, 0;\n @p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(
                     smem_u32(b)),
                 "r"(lane)
                 : "memory");
}
// Shared-memory loads at 32-bit shared addresses (computed once per stage and slot): one ld.shared of T's width
// (uint16_t, uint32_t, float, uint2, uint4).
template <typename T>
__device__ __forceinline__ T lds(uint32_t a) {
    T v;
    if constexpr (sizeof(T) == 2) asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(a));
    else if constexpr (std::is_same_v<T, float>) asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a));
    else if constexpr (sizeof(T) == 4) asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    else if constexpr (sizeof(T) == 8) asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    else asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
// cp.async to 32-bit shared addresses (computed once per thread; + the stage's offset): 4 bytes through L1, 4 bytes
// with the first src_bytes read and the rest zero-filled.
__device__ __forceinline__ void cp_async_4_s(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_4z_s(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_16_s(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// Whether an expert's scale rows (K / 32 bytes each) allow one 16-byte copy per row and four stages.
__device__ __forceinline__ bool wide_scales(int K, const void* a, const void* b) {
    return K % 512 == 0 && ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
}
// Named barrier of the two math warpgroups (id 1; 0 is __syncthreads).
__device__ __forceinline__ void math_sync() { asm volatile("bar.sync 1, 256;" ::: "memory"); }

// Chunk c of raw row r: chunks rotated by (r / 2) % 4 (the TMA's 64-byte swizzle; a quarter warp's 16-byte reads of
// two rows then cover all banks).
__device__ __forceinline__ int raw_chunk_offset(int r, int c) { return 64 * r + 16 * (c ^ ((r >> 1) & 3)); }

// d (64 x BM fp32) (+)= A (64 x 32 e4m3, registers) * B (BM slots x 32, K-major 128B-swizzled descriptor): one
// m64nBMk32 wgmma. Every width computes an element from the same 32 products of the same operands; the tile widths
// give the same bits if the tensor core's per-element sum does not depend on N (checked bit for bit on the device:
// tests/cuda/linear/test_moe_gemm.cpp, SlotTileWidthsGiveTheSameBits).
template <int BM>
__device__ __forceinline__ void mma_rs(float (&d)[BM / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                       uint32_t accumulate) {
    if constexpr (BM == 128) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" FS_WGMMA_REGS64
                     "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
                     : FS_WGMMA_ACC64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
    } else if constexpr (BM == 64) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" FS_WGMMA_REGS32
                     "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
                     : FS_WGMMA_ACC32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
    } else {
        static_assert(BM == 32, "slot tiles of 32, 64 or 128 rows");
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {" FS_WGMMA_REGS16
                     "}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}\n"
                     : FS_WGMMA_ACC16(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
    }
}

using fp4_expand::codes8;
using fp4_expand::group_table;

#endif

template <bool UP, int BM>
__global__ void __launch_bounds__(kThreads, 1) grouped_fp4_kernel(const __grid_constant__ GroupedParams p) {
#if FS_WGMMA_AVAILABLE
    using L = Smem<BM>;
    constexpr int kSubTiles = UP ? 2 : 1;
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* const a_tiles = smem;
    unsigned char* const raw_tiles = smem + L::kRawOffset;
    unsigned char* const scale_blocks = smem + L::kScaleOffset;
    uint2* const tables = reinterpret_cast<uint2*>(smem + L::kTableOffset);
    float* const a_scales = reinterpret_cast<float*>(smem + L::kSaOffset);
    uint8_t* const ref_bytes = smem + L::kRefOffset;
    float* const row_scales = reinterpret_cast<float*>(smem + L::kRowScaleOffset);
    uint16_t* const staging = reinterpret_cast<uint16_t*>(smem + L::kStagingOffset);
    uint64_t* const full = reinterpret_cast<uint64_t*>(smem + L::kBarrierOffset);
    constexpr int kStages = L::kStages;
    uint64_t* const empty = full + kStages;
    uint64_t* const landed = empty + kStages;
    int* const prefix = reinterpret_cast<int*>(smem + L::kPrefixOffset);

    const int tid = threadIdx.x, lane = tid & 31;
    if (tid == 0) {
        tma::prefetch_map(&p.map_a);
#pragma unroll 1
        for (int s = 0; s < kStages; ++s) {
            mbar_init_count(&full[s], 1 + 64);  // the issuer's expect_tx + the 64 finishers
            mbar_init_count(&empty[s], kMathThreads / 32);
            mbar_init_count(&landed[s], 64 + 1);  // the issuers' cp.async arrivals + the weights' expect_tx
        }
        mbar_init_fence();
    }
    pdl_wait();
    pdl_trigger();
    if (tid < 32) block_prefix(p.count, p.E, BM, prefix, lane);
    __syncthreads();
    const int tiles = prefix[p.E] * p.n_blocks;
    const int KB = p.K / 128;

    if (tid >= kMathThreads) {  // producer warpgroup
        tma::release_registers<56>();
        const int my_tiles = int(blockIdx.x) < tiles ? (tiles - 1 - int(blockIdx.x)) / int(gridDim.x) + 1 : 0;
        // Warps 8-9 issue every stage's loads into its slot once the math warps freed it (the weight tile and the
        // slot tile by TMA from thread 0; scales by cp.async from every thread, rows i0 and i0 + 64), and the
        // stage's landed barrier fires when the weight bytes and all their copies are in. Warps 10-11 finish:
        // thread i waits for the landed barrier and makes the tables and column scales of the same rows. Issuing
        // never waits for data, so every free slot has its loads in flight. Tile, rows and source pointers are set
        // once per sub-tile; a stage costs the issuers only its copies.
        const int ptid = tid - kMathThreads;
        const bool issuer = ptid < 64;
        const int i0 = ptid & 63;
        int s = 0;
        uint32_t phase = 0;
        auto advance = [&]() {
            if (++s == kStages) {
                s = 0;
                phase ^= 1;
            }
        };
        if (issuer) {
            // This thread's shared-memory destinations (fixed per thread; + the stage's offset).
            const uint32_t sc_dst = smem_u32(scale_blocks + 16 * i0);
            const uint32_t ref_dst = smem_u32(ref_bytes + i0), sa_dst = smem_u32(a_scales + L::sa_index(2 * i0));
            for (int it = 0; it < my_tiles; ++it) {
                int e, mb, nb;
                tile_of(int(blockIdx.x) + it * int(gridDim.x), prefix, p.E, p.n_blocks, e, mb, nb);
                const int first = p.offset[e] + mb * BM;
                // The activation scales of slots 2 i0 and 2 i0 + 1 (zero past the last slot of the act_quant).
                const int slot = first + 2 * i0;
                const float* as = p.a_scales + min(slot, p.slots - 1);
                const int as0_bytes = slot < p.slots ? 4 : 0, as1_bytes = slot + 1 < p.slots ? 4 : 0;
                const unsigned char* sca = static_cast<const unsigned char*>(p.s_a[e]);
                const void* map0 = p.maps_a + 384 * int64_t(e);
                const void* map1 = p.maps_b + 384 * int64_t(e);
                if (ptid == 0) {
                    tma::prefetch_map(map0);
                    if (UP) tma::prefetch_map(map1);
                }
                const unsigned char* scb = UP ? static_cast<const unsigned char*>(p.s_b[e]) : sca;
                const bool wide = wide_scales(p.K, sca, scb);
                for (int sub = 0; sub < kSubTiles; ++sub) {
                    // Weight rows of raw rows i0 and i0 + 64 (up: w1 and w3 of one h column; down: two w2 rows).
                    const int wrow0 = UP ? nb * 128 + 64 * sub + i0 : nb * kBN + i0;
                    const int wrow1 = UP ? wrow0 : wrow0 + 64;
                    const unsigned char* c0 = sca + int64_t(wrow0) * (p.K / 32);
                    const unsigned char* c1 = scb + int64_t(wrow1) * (p.K / 32);
                    // The weight tile's two 64-row halves by TMA (raw_chunk_offset is the 64-byte swizzle).
                    const int tma_row0 = UP ? nb * 128 + 64 * sub : nb * kBN, tma_row1 = UP ? tma_row0 : tma_row0 + 64;
                    for (int kb = 0; kb < KB; ++kb) {
                        mbar_wait(&empty[s], phase ^ 1);
                        if (ptid == 0) {
                            unsigned char* raw = raw_tiles + size_t(s) * kRawTile;
                            mbar_expect_tx(&landed[s], kRawTile);
                            tma::load_2d(raw, map0, kb * 64, tma_row0, &landed[s]);
                            tma::load_2d(raw + kRawTile / 2, map1, kb * 64, tma_row1, &landed[s]);
                        }
                        // The rows' E8M0 scales: 16 bytes (this stage and the next three) at every fourth stage,
                        // else 4 bytes per stage. Each row is its own 128-byte line, so a warp's copy costs 32
                        // L1 wavefronts whatever its width: one wide copy per four stages is a quarter of them.
                        const uint32_t sc = sc_dst + uint32_t(s * kScaleBlock);
                        if (!wide) {
                            cp_async_4_s(sc, c0 + kb * 4);
                            cp_async_4_s(sc + 64 * 16, c1 + kb * 4);
                        } else if ((kb & 3) == 0) {
                            cp_async_16_s(sc, c0 + kb * 4);
                            cp_async_16_s(sc + 64 * 16, c1 + kb * 4);
                        }
                        if (2 * i0 < BM) {  // the tile's BM slots: threads 0 .. BM / 2 - 1
                            const uint32_t sa = sa_dst + uint32_t(s * L::kSaStage);
                            const float* a_src = as + int64_t(kb) * p.a_scales_ld;
                            cp_async_4z_s(sa, a_src, as0_bytes);
                            cp_async_4z_s(sa + 4, a_src + (as1_bytes >> 2), as1_bytes);
                        }
                        if (kb == 0 && (i0 & 3) == 0) {
                            // The references of rows i0 .. i0 + 3 (and + 64), once per sub-tile (the finisher keeps
                            // them): aligned words (ref_stride and the row blocks are multiples of 4).
                            const uint8_t* r0 = p.ref_a + int64_t(e) * p.ref_stride + wrow0;
                            const uint8_t* r1 = (UP ? p.ref_b : p.ref_a) + int64_t(e) * p.ref_stride + wrow1;
                            cp_async_4_s(ref_dst + uint32_t(s * kBN), r0);
                            cp_async_4_s(ref_dst + uint32_t(s * kBN + 64), r1);
                        }
                        bulk::cp_async_mbar_arrive(&landed[s]);
                        if (ptid == 0) {
                            mbar_expect_tx(&full[s], L::kATile);
                            tma::load_2d(a_tiles + size_t(s) * L::kATile, &p.map_a, kb * 128, first, &full[s]);
                        }
                        advance();
                    }
                }
            }
            cp_async_wait_all();  // no thread leaves with copies in flight
        } else {
            // The same walk as the issuers (an expert's scale rows decide the copy width).
            const uint32_t sc_src = smem_u32(scale_blocks + 16 * i0), ref_src = smem_u32(ref_bytes + (i0 & ~3));
            for (int it = 0; it < my_tiles; ++it) {
                int e, mb, nb;
                tile_of(int(blockIdx.x) + it * int(gridDim.x), prefix, p.E, p.n_blocks, e, mb, nb);
                const bool wide = wide_scales(p.K, p.s_a[e], UP ? p.s_b[e] : p.s_a[e]);
                for (int sub = 0; sub < kSubTiles; ++sub) {
                    uint4 blk[2] = {};  // the rows' scale words, this stage's first
                    int rf[2] = {0, 0};   // the rows' references
                    for (int kb = 0; kb < KB; ++kb) {
                        mbar_wait(&landed[s], phase);
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int row = i0 + 64 * h;
                            if (!wide || (kb & 3) == 0) {
                                blk[h] = lds<uint4>(sc_src + uint32_t(s * kScaleBlock + 64 * 16 * h));
                            } else {
                                blk[h] = make_uint4(blk[h].y, blk[h].z, blk[h].w, 0u);
                            }
                            const uint32_t scales4 = blk[h].x;
                            if (kb == 0) {
                                rf[h] = int((lds<uint32_t>(ref_src + uint32_t(s * kBN + 64 * h)) >> (8 * (i0 & 3))) &
                                            0xffu);
                                // The column scale, read by the math warps at the sub-tile's first stage only.
                                row_scales[s * kBN + row] = fp4_expand::column_scale(rf[h]);
                            }
                            // Row-major tables: a math thread reads its row's group t4, a half warp 128
                            // contiguous bytes.
                            uint2 tg[4];
#pragma unroll
                            for (int g = 0; g < 4; ++g) tg[g] = group_table(int((scales4 >> (8 * g)) & 0xffu) - rf[h]);
                            uint4* dst = reinterpret_cast<uint4*>(tables + (s * kBN + row) * 4);
                            dst[0] = make_uint4(tg[0].x, tg[0].y, tg[1].x, tg[1].y);
                            dst[1] = make_uint4(tg[2].x, tg[2].y, tg[3].x, tg[3].y);
                        }
                        tma::mbar_arrive(&full[s]);
                        advance();
                    }
                }
            }
        }
        return;
    }

    tma::claim_registers<224>();  // math warps: tid 0..255
    const int mw = tid / 128;
    const int warp = (tid / 32) & 3, g = lane >> 2, t4 = lane & 3;
    // Raw rows of this thread's fragment rows g and g + 8: up: w1 and w3 of h column 32 mw + 8 warp + g; down: w2
    // rows 64 mw + 16 warp + g, + 8.
    const int row_g = UP ? 32 * mw + 8 * warp + g : 64 * mw + 16 * warp + g;
    const int row_g8 = UP ? 64 + row_g : row_g + 8;
    float acc[BM / 2], fin[BM / 2];
    uint32_t frag[2][4][4];  // [buffer][32-k step][a0..a3]
    int s = 0;
    uint32_t phase = 0;

    // Fragment of stage slot `st` (16 values per 32-k step). The slot tile's codes are GROUP_INTERLEAVED
    // (gemm/act_quant.cuh): k-step j's a0 / a1 are k 32 t4 + 8 j .. + 3 of rows g / g + 8 and a2 / a3 the next four,
    // so one 16-byte load (32-group t4 of the row) and one table serve all four k-steps of a row. (In natural order
    // the thread needed two bytes per row and k-step, and each k-step's table: 24 shared loads per stage instead of
    // 4, ~190 of the ~900 shared-memory wavefronts of a stage: Nsight Compute, run 88 of
    // docs/perf-log/2026-12-02_row-reference-experts.md; runs 91-97 of docs/perf-log/2026-12-02_interleaved-experts.md.)
    const uint32_t raw_base = smem_u32(raw_tiles), table_base = smem_u32(tables);
    const uint32_t sa_base = smem_u32(a_scales) + 4 * uint32_t(t4 * L::kSaPitch), wsc_base = smem_u32(row_scales);
    const uint32_t raw_g = raw_base + raw_chunk_offset(row_g, t4), raw_g8 = raw_base + raw_chunk_offset(row_g8, t4);
    const uint32_t tab_g = table_base + uint32_t(row_g * 4 + t4) * 8, tab_g8 = table_base + uint32_t(row_g8 * 4 + t4) * 8;
    auto convert = [&](int st, uint32_t (&f)[4][4]) {
        const uint4 ra = lds<uint4>(raw_g + uint32_t(st) * kRawTile), rb = lds<uint4>(raw_g8 + uint32_t(st) * kRawTile);
        const uint2 ta = lds<uint2>(tab_g + uint32_t(st) * kTables), tb = lds<uint2>(tab_g8 + uint32_t(st) * kTables);
        const uint32_t wa[4] = {ra.x, ra.y, ra.z, ra.w}, wb[4] = {rb.x, rb.y, rb.z, rb.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            codes8(wa[k], ta, f[k][0], f[k][2]);
            codes8(wb[k], tb, f[k][1], f[k][3]);
        }
    };
    auto issue_mma = [&](int st, const uint32_t (&f)[4][4]) {
        const uint32_t b_addr = smem_u32(a_tiles + size_t(st) * L::kATile);
#pragma unroll
        for (int i = 0; i < BM / 2; ++i) wgmma::fence_operand(acc[i]);
        wgmma::fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) mma_rs<BM>(acc, f[k], tma::sw128_descriptor(b_addr + 32 * k), k > 0 ? 1u : 0u);
        wgmma::commit();
#pragma unroll
        for (int i = 0; i < BM / 2; ++i) wgmma::fence_operand(acc[i]);
    };
    // Waits for the stage's wgmma, folds acc into fin, frees the stage.
    auto promote = [&](int st, uint32_t (&f)[4][4]) {
        wgmma::wait<0>();
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
            for (int q = 0; q < 4; ++q) wgmma::fence_operand(f[k][q]);  // the A registers were live until here
#pragma unroll
        for (int i = 0; i < BM / 2; ++i) wgmma::fence_operand(acc[i]);
        const uint32_t sa = sa_base + uint32_t(st * L::kSaStage);
#pragma unroll
        for (int q = 0; q < BM / 16; ++q) {
            const uint4 v = lds<uint4>(sa + 16 * q);  // slots 16q + 2 t4 + {0, 1} and 16q + 8 + 2 t4 + {0, 1}
            const float sc[4] = {__uint_as_float(v.x), __uint_as_float(v.y), __uint_as_float(v.z),
                                 __uint_as_float(v.w)};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int i = 2 * q + h;
                fin[4 * i + 0] = fmaf(acc[4 * i + 0], sc[2 * h], fin[4 * i + 0]);
                fin[4 * i + 1] = fmaf(acc[4 * i + 1], sc[2 * h + 1], fin[4 * i + 1]);
                fin[4 * i + 2] = fmaf(acc[4 * i + 2], sc[2 * h], fin[4 * i + 2]);
                fin[4 * i + 3] = fmaf(acc[4 * i + 3], sc[2 * h + 1], fin[4 * i + 3]);
            }
        }
        __syncwarp();
        mbar_arrive_lane0(&empty[st], lane);
    };
    // The stage's tables, slot tile and (through the finishers' wait on landed) raw bytes.
    auto wait_stage = [&]() { mbar_wait(&full[s], phase); };
    auto advance = [&]() {
        if (++s == kStages) {
            s = 0;
            phase ^= 1;
        }
    };

    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int e, mb, nb;
        tile_of(t, prefix, p.E, p.n_blocks, e, mb, nb);
        const int count = p.count[e], first = p.offset[e] + mb * BM;
        const int rows = min(BM, count - mb * BM);  // slots of this tile
        for (int sub = 0; sub < kSubTiles; ++sub) {
#pragma unroll
            for (int i = 0; i < BM / 2; ++i) fin[i] = 0.f;
            // Two stages per iteration so that the fragment buffers stay compile-time registers: stage kb uses
            // frag[kb % 2]; the conversion of kb + 1 overlaps the wgmma of kb.
            wait_stage();
            // The rows' column scales: the same in every stage of the sub-tile; read before its first is freed.
            const float wg = lds<float>(wsc_base + 4 * uint32_t(s * kBN + row_g));
            const float wg8 = lds<float>(wsc_base + 4 * uint32_t(s * kBN + row_g8));
            convert(s, frag[0]);
            int prev = -1;  // slot of the stage whose wgmma is in flight
            for (int kb = 0; kb < KB; kb += 2) {
                // stage kb (frag[0])
                if (prev >= 0) promote(prev, frag[1]);
                issue_mma(s, frag[0]);
                prev = s;
                advance();
                if (kb + 1 < KB) {
                    wait_stage();
                    convert(s, frag[1]);
                    promote(prev, frag[0]);
                    issue_mma(s, frag[1]);
                    prev = s;
                    advance();
                    if (kb + 2 < KB) {
                        wait_stage();
                        convert(s, frag[0]);
                    }
                } else {
                    promote(prev, frag[0]);
                    prev = -1;
                }
            }
            if (prev >= 0) promote(prev, frag[1]);

            if constexpr (UP) {
                // h of this sub-tile's 64 columns: gate at fragment row g, up at row g + 8, slot 8i + 2 t4 + j.
                const int col = 64 * sub + 32 * mw + 8 * warp + g;
#pragma unroll
                for (int i = 0; i < BM / 8; ++i)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int n = 8 * i + 2 * t4 + j;
                        const float wt = n < rows ? __ldg(p.slot_weight + first + n) : 0.f;
                        staging[n * kStagingPitch + col] =
                            swiglu_bf16(fin[4 * i + j] * wg, fin[4 * i + 2 + j] * wg8, wt, p.limit);
                    }
                if (sub == 0) continue;
                math_sync();
                if (tid < 2 * BM) {  // whole warps: 2 BM is a multiple of 64
                    // Slot n's 128 values: threads 2n (columns 0..63) and 2n + 1 (64..127).
                    const int n = tid >> 1, half = tid & 1;
                    const uint32_t src = smem_u32(staging) + 2 * uint32_t(n * kStagingPitch + 64 * half);
                    float v[64];
                    float amax = 0.f;
#pragma unroll
                    for (int q = 0; q < 8; ++q) {
                        const uint4 u = lds<uint4>(src + 16 * q);
                        const uint32_t w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                        for (int h = 0; h < 4; ++h) {
                            v[8 * q + 2 * h] = bf16_bits_to_f32(uint16_t(w4[h] & 0xffffu));
                            v[8 * q + 2 * h + 1] = bf16_bits_to_f32(uint16_t(w4[h] >> 16));
                            amax = fmaxf(amax, fmaxf(fabsf(v[8 * q + 2 * h]), fabsf(v[8 * q + 2 * h + 1])));
                        }
                    }
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                    if (n < rows) {
                        const int64_t slot = first + n;
                        const float sc = fp8_block_scale(amax), inv = 1.f / sc;
                        // GROUP_INTERLEAVED (the down-projection's slot tile): the 4-column runs at 64 half + 8 j + 4 w
                        // and 32 columns on (the next group) sit in adjacent words, one 8-byte store.
                        uint8_t* out = p.h_codes + slot * p.ldo + nb * 128;
                        auto code4 = [&](const float* x) { return fp8_code4(x, inv); };
#pragma unroll
                        for (int j = 0; j < 4; ++j)
#pragma unroll
                            for (int w = 0; w < 2; ++w)
                                *reinterpret_cast<uint2*>(
                                    out + fp8_code_position(64 * half + 8 * j + 4 * w, Fp8CodeOrder::GROUP_INTERLEAVED)) =
                                    make_uint2(code4(v + 8 * j + 4 * w), code4(v + 32 + 8 * j + 4 * w));
                        if (half == 0) p.h_scales[int64_t(nb) * p.h_scales_ld + slot] = sc;
                    }
                }
                math_sync();  // the staging block is rewritten by the next tile
            } else if (p.y_bf16) {
                // bf16 rows through the staging block (slot n, column row_g / row_g8; the four rows a store
                // instruction writes are 8 banks apart), then each slot's 256 bytes as 16 coalesced 16-byte stores.
#pragma unroll
                for (int i = 0; i < BM / 8; ++i)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int n = 8 * i + 2 * t4 + j;
                        staging[n * kStagingPitch + row_g] = f32_to_bf16_bits_rn(fin[4 * i + j] * wg);
                        staging[n * kStagingPitch + row_g8] = f32_to_bf16_bits_rn(fin[4 * i + 2 + j] * wg8);
                    }
                math_sync();
#pragma unroll
                for (int k = 0; k < BM * 16 / kMathThreads; ++k) {
                    const int chunk = tid + k * kMathThreads, n = chunk >> 4, c = chunk & 15;
                    if (n < rows)
                        *reinterpret_cast<uint4*>(p.y_bf16 + (first + n) * p.ldo + nb * kBN + 8 * c) =
                            lds<uint4>(smem_u32(staging) + 2 * uint32_t(n * kStagingPitch + 8 * c));
                }
                math_sync();  // the staging block is rewritten by the next tile
            } else {
                const int col = nb * kBN + row_g;
#pragma unroll
                for (int i = 0; i < BM / 8; ++i)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int n = 8 * i + 2 * t4 + j;
                        if (n >= rows) continue;
                        float* out = p.y + (first + n) * p.ldo + col;
                        out[0] = fin[4 * i + j] * wg;
                        out[8] = fin[4 * i + 2 + j] * wg8;
                    }
            }
        }
    }
#else
    __trap();
#endif
}

template <int BM>
void launch_width(bool up, const GroupedParams& p, cudaStream_t stream) {
    auto kernel = up ? grouped_fp4_kernel<true, BM> : grouped_fp4_kernel<false, BM>;
    allow_dynamic_smem(kernel, Smem<BM>::kBytes);
    static const std::string name_up = "grouped_fp4_kernel<up, " + std::to_string(BM) + ">",
                             name_down = "grouped_fp4_kernel<down, " + std::to_string(BM) + ">";
    launch_pdl(up ? name_up.c_str() : name_down.c_str(), kernel,
               dim3(unsigned(current_arch().sm_count)), dim3(kThreads), Smem<BM>::kBytes, stream, p);
}

}  // namespace

void launch_sm90(const Problem& q, cudaStream_t stream) {
    FS_REQUIRE(q.slot_rows == 32 || q.slot_rows == 64 || q.slot_rows == 128,
               "grouped expert GEMM (sm_90a): slot rows per tile must be 32, 64 or 128, got ", q.slot_rows);
    FS_REQUIRE(q.a.order == Fp8CodeOrder::GROUP_INTERLEAVED && (!q.up || q.h_q.order == Fp8CodeOrder::GROUP_INTERLEAVED),
               "grouped expert GEMM (sm_90a): the slot codes and h must be GROUP_INTERLEAVED");
    GroupedParams p{};
    p.map_a = tma::make_2d(q.a.codes, tma::Element::U8, uint64_t(q.a.m), uint64_t(q.a.k), uint64_t(q.a.codes_ld),
                           uint32_t(q.slot_rows), 128, tma::Swizzle::B128, "grouped expert GEMM activation");
    p.a_scales = q.a.scales;
    p.a_scales_ld = q.a.scales_ld;
    p.slots = int(q.a.m);
    p.s_a = q.s_a;
    p.s_b = q.s_b;
    p.maps_a = q.maps_a;
    p.maps_b = q.maps_b;
    p.ref_a = q.ref_a;
    p.ref_b = q.ref_b;
    p.ref_stride = q.ref_stride;
    p.count = q.count;
    p.offset = q.offset;
    p.E = q.E;
    p.K = q.K;
    p.n_blocks = q.n_blocks;
    p.slot_weight = q.slot_weight;
    p.limit = q.limit;
    p.h_codes = q.h_q.codes;
    p.h_scales = q.h_q.scales;
    p.h_scales_ld = q.h_q.scales_ld;
    p.y = q.y;
    p.y_bf16 = q.y_bf16;
    p.ldo = q.ldo;
    switch (q.slot_rows) {
        case 32: launch_width<32>(q.up, p, stream); break;
        case 64: launch_width<64>(q.up, p, stream); break;
        default: launch_width<128>(q.up, p, stream); break;
    }
}

}  // namespace flashseek::cuda::grouped_gemm
