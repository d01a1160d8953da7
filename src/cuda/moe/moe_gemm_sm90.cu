// Grouped FP4 expert GEMMs on sm_90a (moe_gemm.cuh): the dense FP8 GEMM design of gemm/gemm_sm90.cu (TMA,
// warp specialization, wgmma m64n128k32, per-128-K fp32 promotion, persistent CTAs) over the per-expert slot groups
// of a MoeGrouping, with the FP4 weights expanded to e4m3 in shared memory. Our own kernel (not CUTLASS) for the
// reasons given in gemm_sm90.cu, and because the weight expansion with per-32 scale folding and the SwiGLU /
// routing-weight epilogue are specific to this checkpoint format.
// Design:
//   - Tiles of grouped_gemm_common.cuh. Up-projection: a tile is one 128-column block of h, computed as two
//     sub-tiles whose weight rows 0..63 are w1 rows i0..i0+63 and rows 64..127 the same rows of w3 (i0 = the
//     block's first column, + 64 for the second), so gate and up of an h column meet in one thread (accumulator
//     columns j and j + 64); the first half's h values wait in registers, then each row's 128 values (a thread
//     quad) are quantized together: the epilogue writes the down-projection's act_quant input directly
//     (gemm/fp8_quant.cuh, identical to quantize_fp8_activation of the bf16 h). Down-projection: 128 rows of w2.
//   - Producer warpgroup (128 threads, 56 registers): producer thread r owns weight row r of every B tile. It keeps
//     its row's FP4 bytes (four 16-byte cp.async per stage) and E8M0 scales (one 4-byte cp.async) kRawSlots - 1
//     stages ahead in a thread-private ring (cp.async groups: weights live in per-expert allocations, no tensor map
//     per expert), and for the stage at hand expands them into the stage's 128-byte-swizzled e4m3 B tile and its
//     promotion scale, fence.proxy.async, then arrives on the stage's full barrier (count 1 + 128); thread 0 also
//     loads the A tile (gathered act_quant codes of the tile's slots, TMA, 128-byte swizzle) and its 128 scales
//     (TMA, a box of 132 from the 4-aligned row at or below the tile's first: see kScaleBox) with expect_tx.
//     The expansion sits in the producer because the math warps were issue-bound with it (Nsight Compute at 64
//     decode sequences: 0.36 issued warps per scheduler, the scale loads and the expansion's PRMT / LOP3 on the
//     critical path of every stage, the producer warps idle on their empty barriers). That gained only ~10%: now
//     the math warps wait on the full barrier (31% of the stall samples) for the expansion's instruction chain on
//     one producer warp per scheduler, which is the next thing to make cheaper (docs/perf.md §1.2, perf-log).
//   - Math warpgroups (2 x 128 threads, 224 registers), per stage: wait for the full barrier, four wgmma
//     m64n128k32 (each warpgroup 64 slot rows), wait, fp32 promotion acc * sa[row] * sc[column], free the stage.
//   - Expansion and scale folding: moe/fp4_expand.cuh.
//   - Epilogue: up: h = bf16(silu(min(bf16 g, L)) * clamp(bf16 u) * weight[slot]) -> e4m3 codes and the row's
//     block scale; down: fp32 pairs.
//     Rows past the expert's count are not stored (the A rows there belong to the next expert or are zeros).
#include <cuda.h>

#include <algorithm>

#include "cuda/common/arch.cuh"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/smem.cuh"
#include "cuda/gemm/tensor_map.h"
#include "cuda/gemm/tma.cuh"
#include "cuda/gemm/fp8_quant.cuh"
#include "cuda/gemm/mma_tile.cuh"
#include "cuda/gemm/wgmma_ss.cuh"
#include "cuda/moe/fp4_expand.cuh"
#include "cuda/moe/grouped_gemm_common.cuh"

namespace flashseek::cuda::grouped_gemm {
namespace {

constexpr int kThreads = 384;
constexpr int kBM = kBlockM, kBN = kBlockN;
constexpr int kStages = 4;               // A tiles, expanded B tiles, their scales: what the math warps consume
constexpr int kRawSlots = 8;             // the producer's FP4 ring: kRawSlots - 1 stages of weights in flight
constexpr int kATile = kBM * 128;       // e4m3 codes, 128 K per stage
constexpr int kRawTile = kBN * 64;      // packed FP4, 128 K per stage (thread r's 64 bytes at 64 r, chunks swizzled)
constexpr int kRawScales = kBN * 4;     // the E8M0 scales of a stage, 4 bytes per weight row
// The A scales of a stage: one TMA box of kScaleBox floats from the 4-aligned row at or below the tile's first
// row. A tensor copy's start in the innermost dimension must be 16-byte aligned (4 floats); an expert's first slot
// can be any row, and a box starting there is an illegal instruction on the H200 (the first GPU run: every
// MoeGemm test died at this load). The tile's rows are then at offset row0 % 4 inside the box.
constexpr int kScaleBox = kBM + 4;
constexpr int kScaleBytes = kScaleBox * 4;                                    // 528: a multiple of 16
constexpr int kScaleStride = (kScaleBytes + 127) / 128 * 128;                 // stage stride (128-byte aligned boxes)
constexpr int kBTile = kBN * 128;                                             // expanded e4m3
constexpr size_t kBOffset = size_t(kStages) * kATile;                        // kStages expanded B tiles
constexpr size_t kRawOffset = kBOffset + size_t(kStages) * kBTile;
constexpr size_t kRawScaleOffset = kRawOffset + size_t(kRawSlots) * kRawTile;
constexpr size_t kSaOffset = kRawScaleOffset + size_t(kRawSlots) * kRawScales;
constexpr size_t kColScaleOffset = kSaOffset + size_t(kStages) * kScaleStride;  // kStages x 128 floats
constexpr size_t kBarrierOffset = kColScaleOffset + size_t(kStages) * kBN * 4;
constexpr size_t kPrefixOffset = kBarrierOffset + 2 * kStages * 8;           // (E + 1) ints
constexpr size_t kSmemBytes = kPrefixOffset + (kMaxExperts + 1) * 4 + 1024;  // + alignment slack
static_assert(kATile % 1024 == 0 && kBOffset % 1024 == 0 && kBTile % 1024 == 0, "swizzled tiles 1024-aligned");
static_assert(kRawOffset % 128 == 0 && kSaOffset % 128 == 0 && kScaleStride % 128 == 0, "TMA / cp.async alignment");
static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");

struct GroupedParams {
    CUtensorMap map_a, map_sa;
    const void* const* w_a;  // up: w1, down: w2
    const void* const* s_a;
    const void* const* w_b;  // up: w3, down: unused
    const void* const* s_b;
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
    float* y;          // down: fp32 [slots, ldo]
    int64_t ldo;
};

#if FS_WGMMA_AVAILABLE
constexpr int kMathThreads = 256;

using bulk::cp_async_16;
using bulk::fence_proxy_async;
using bulk::mbar_expect_tx;
using bulk::mbar_init_count;
using bulk::mbar_init_fence;
using bulk::mbar_wait;
using bulk::smem_u32;

// 4 bytes global -> shared (cp.async.ca; src and dst 4-byte aligned: a row's E8M0 scales are K / 32 bytes, a multiple
// of 4 since K is a multiple of 128).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
using mma_tile::cp_async_commit;
using mma_tile::cp_async_wait;

// Chunk c (16 bytes) of producer thread r's 64 raw bytes in a raw slot: chunks rotated by (r / 2) % 4 so that the
// eight threads of a 16-byte shared-memory phase (rows r..r+7, 64 bytes apart) hit eight different bank quads.
__device__ __forceinline__ int raw_chunk_offset(int r, int c) { return 64 * r + 16 * (c ^ ((r >> 1) & 3)); }

// The CTA's tile i (tiles blockIdx.x, blockIdx.x + gridDim.x, ...), the last one looked up kept: stage j of the CTA
// is k-block j % KB of sub-tile (j / KB) % kSubTiles of its tile j / (KB * kSubTiles).
struct TileCursor {
    int cached = -1, e = 0, mb = 0, nb = 0;
    __device__ __forceinline__ void seek(int i, const int* prefix, const GroupedParams& p) {
        if (i == cached) return;
        cached = i;
        tile_of(int(blockIdx.x) + i * int(gridDim.x), prefix, p.E, p.n_blocks, e, mb, nb);
    }
};
#endif

template <bool UP>
__global__ void __launch_bounds__(kThreads, 1) grouped_fp4_kernel(const __grid_constant__ GroupedParams p) {
#if FS_WGMMA_AVAILABLE
    constexpr int kSubTiles = UP ? 2 : 1;  // up: two 64-column halves of a 128-column block of h
    extern __shared__ unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    unsigned char* const a_tiles = smem;
    unsigned char* const b_tiles = smem + kBOffset;
    unsigned char* const raw_tiles = smem + kRawOffset;
    uint32_t* const raw_scales = reinterpret_cast<uint32_t*>(smem + kRawScaleOffset);
    float* const a_scales = reinterpret_cast<float*>(smem + kSaOffset);
    float* const col_scales = reinterpret_cast<float*>(smem + kColScaleOffset);
    uint64_t* const full = reinterpret_cast<uint64_t*>(smem + kBarrierOffset);
    uint64_t* const empty = full + kStages;
    int* const prefix = reinterpret_cast<int*>(smem + kPrefixOffset);

    const int tid = threadIdx.x, lane = tid & 31;
    if (tid == 0) {
        tma::prefetch_map(&p.map_a);
        tma::prefetch_map(&p.map_sa);
#pragma unroll 1
        for (int s = 0; s < kStages; ++s) {
            mbar_init_count(&full[s], 1 + 128);  // thread 0's expect_tx + every producer thread's expanded row
            mbar_init_count(&empty[s], kMathThreads / 32);
        }
        mbar_init_fence();
    }
    pdl_wait();  // the counts come from the grouping kernel, A from act_quant
    pdl_trigger();
    if (tid < 32) block_prefix(p.count, p.E, prefix, lane);
    __syncthreads();
    const int tiles = prefix[p.E] * p.n_blocks;
    const int KB = p.K / 128;

    if (tid < 128) {  // producer warpgroup: thread tid owns row tid of every B tile
        // setmaxnreg.inc waits until the CTA's own warps have released what it asks for: 128 x (168 - 56) = 256 x
        // (224 - 168) registers exactly (64 / 224 hung every launch on the H200: 1,024 registers short).
        tma::release_registers<56>();
        const int per_tile = kSubTiles * KB;
        const int my_tiles = int(blockIdx.x) < tiles ? (tiles - 1 - int(blockIdx.x)) / int(gridDim.x) + 1 : 0;
        const int n_stages = my_tiles * per_tile;
        TileCursor load_walk, expand_walk;
        // This thread's weight row and its scales at stage j: up: w1 (tid < 64) or w3 row nb * 128 + 64 * sub +
        // tid % 64; down: w2 row nb * 128 + tid.
        auto issue = [&](int j) {
            const int i = j / per_tile, r = j - i * per_tile, sub = r / KB, kb = r - sub * KB;
            load_walk.seek(i, prefix, p);
            const int e = load_walk.e, nb = load_walk.nb;
            const int wrow = UP ? nb * 128 + 64 * sub + (tid & 63) : nb * kBN + tid;
            const bool second = UP && tid >= 64;
            const unsigned char* w = static_cast<const unsigned char*>(second ? p.w_b[e] : p.w_a[e]) +
                                     int64_t(wrow) * (p.K / 2) + kb * 64;
            const unsigned char* sc = static_cast<const unsigned char*>(second ? p.s_b[e] : p.s_a[e]) +
                                      int64_t(wrow) * (p.K / 32) + kb * 4;
            const int slot = j % kRawSlots;
            unsigned char* dst = raw_tiles + size_t(slot) * kRawTile;
#pragma unroll
            for (int c = 0; c < 4; ++c) cp_async_16(dst + raw_chunk_offset(tid, c), w + 16 * c);
            cp_async_4(raw_scales + slot * kBN + tid, sc);
        };
        for (int j = 0; j < kRawSlots - 1; ++j) {
            if (j < n_stages) issue(j);
            cp_async_commit();  // empty groups too: the wait below counts groups
        }
        int s = 0;
        uint32_t phase = 0;
        for (int j = 0; j < n_stages; ++j) {
            if (j + kRawSlots - 1 < n_stages) issue(j + kRawSlots - 1);  // into the slot stage j - 1 freed
            cp_async_commit();
            cp_async_wait<kRawSlots - 1>();  // this thread's copies of stage j have landed
            const int i = j / per_tile;
            expand_walk.seek(i, prefix, p);
            mbar_wait(&empty[s], phase ^ 1);
            if (tid == 0) {
                const int row0 = p.offset[expand_walk.e] + expand_walk.mb * kBM;  // first slot row of the tile
                const int kb = (j - i * per_tile) % KB;
                mbar_expect_tx(&full[s], kATile + kScaleBytes);
                tma::load_2d(a_tiles + size_t(s) * kATile, &p.map_a, kb * 128, row0, &full[s]);
                tma::load_2d(a_scales + s * (kScaleStride / 4), &p.map_sa, row0 & ~3, kb, &full[s]);
            }
            const int slot = j % kRawSlots;
            const unsigned char* raw = raw_tiles + size_t(slot) * kRawTile;
            const uint32_t scales4 = raw_scales[slot * kBN + tid];
            const int ref = fp4_expand::reference_exponent(scales4);
            unsigned char* btile = b_tiles + size_t(s) * kBTile;
#pragma unroll
            for (int g = 0; g < 4; ++g)
                fp4_expand::expand_group(*reinterpret_cast<const uint4*>(raw + raw_chunk_offset(tid, g)), btile, tid, g,
                                         scales4, ref);
            col_scales[s * kBN + tid] = fp4_expand::column_scale(ref);
            fence_proxy_async();  // the expanded tile (generic stores) is read by wgmma (async proxy)
            tma::mbar_arrive(&full[s]);
            if (++s == kStages) {
                s = 0;
                phase ^= 1;
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");  // no thread leaves with copies in flight
        return;
    }

    tma::claim_registers<224>();
    const int m_tid = tid - 128;                 // 0..255
    const int mw = m_tid / 128;                  // math warpgroup: slot rows 64 * mw ..
    const int warp = (m_tid / 32) & 3, g = lane >> 2, t4 = lane & 3;
    const int r0 = 64 * mw + 16 * warp + g;      // this thread's rows r0, r0 + 8 of the tile
    float acc[64], fin[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    int s = 0;
    uint32_t phase = 0;
    float h0[2][16];  // up: sub-tile 0's h values (rows r0, r0 + 8; columns 8i + 2t4 + j) until sub-tile 1 is done
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int e, mb, nb;
        tile_of(t, prefix, p.E, p.n_blocks, e, mb, nb);
        const int count = p.count[e], first = p.offset[e] + mb * kBM;
        const int sa_row = (first & 3) + r0;  // row r0 of the tile inside the stage's scale box
        float wt[2] = {0.f, 0.f};  // up: the routing weights of rows r0, r0 + 8 (0 past the expert's count)
        if constexpr (UP) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (mb * kBM + r0 + 8 * h < count) wt[h] = p.slot_weight[first + r0 + 8 * h];
        }
        for (int sub = 0; sub < kSubTiles; ++sub) {
#pragma unroll
            for (int i = 0; i < 64; ++i) fin[i] = 0.f;
            for (int kb = 0; kb < KB; ++kb) {
                mbar_wait(&full[s], phase);
                const float* csc = col_scales + s * kBN;
                const float sa0 = a_scales[s * (kScaleStride / 4) + sa_row],
                            sa1 = a_scales[s * (kScaleStride / 4) + sa_row + 8];
                const uint32_t a_addr = smem_u32(a_tiles + size_t(s) * kATile + 64 * mw * 128);
                const uint32_t b_addr = smem_u32(b_tiles + size_t(s) * kBTile);
#pragma unroll
                for (int i = 0; i < 64; ++i) wgmma::fence_operand(acc[i]);
                wgmma::fence();
#pragma unroll
                for (int k = 0; k < 4; ++k)
                    wgmma::mma_e4m3_n128(acc, tma::sw128_descriptor(a_addr + 32 * k),
                                         tma::sw128_descriptor(b_addr + 32 * k), k > 0 ? 1u : 0u);
                wgmma::commit();
#pragma unroll
                for (int i = 0; i < 64; ++i) wgmma::fence_operand(acc[i]);
                wgmma::wait<0>();
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    const float2 c = *reinterpret_cast<const float2*>(csc + 8 * i + 2 * t4);
                    fin[4 * i + 0] = fmaf(acc[4 * i + 0], sa0 * c.x, fin[4 * i + 0]);
                    fin[4 * i + 1] = fmaf(acc[4 * i + 1], sa0 * c.y, fin[4 * i + 1]);
                    fin[4 * i + 2] = fmaf(acc[4 * i + 2], sa1 * c.x, fin[4 * i + 2]);
                    fin[4 * i + 3] = fmaf(acc[4 * i + 3], sa1 * c.y, fin[4 * i + 3]);
                }
                // The stage's column scales were read above: only now may the producer refill it.
                __syncwarp();
                if (lane == 0) tma::mbar_arrive(&empty[s]);
                if (++s == kStages) {
                    s = 0;
                    phase ^= 1;
                }
            }
            if constexpr (UP) {
                // h of this sub-tile: gate in accumulator columns 8i + 2t4 + j, up in the same columns + 64.
                float hv[2][16];
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int i = 0; i < 8; ++i)
#pragma unroll
                        for (int j = 0; j < 2; ++j)
                            hv[h][2 * i + j] = bf16_bits_to_f32(
                                swiglu_bf16(fin[4 * i + 2 * h + j], fin[4 * (i + 8) + 2 * h + j], wt[h], p.limit));
                if (sub == 0) {
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int q = 0; q < 16; ++q) h0[h][q] = hv[h][q];
                    continue;
                }
                // Both halves of the 128-column block: act_quant per row (the quad t4 = 0..3 holds the row's 128 values).
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float amax = 0.f;
#pragma unroll
                    for (int q = 0; q < 16; ++q) amax = fmaxf(amax, fmaxf(fabsf(h0[h][q]), fabsf(hv[h][q])));
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                    if (mb * kBM + r0 + 8 * h >= count) continue;
                    const int64_t slot = first + r0 + 8 * h;
                    const float sc = fp8_block_scale(amax), inv = 1.f / sc;
                    uint8_t* out = p.h_codes + slot * p.ldo + nb * 128 + 2 * t4;
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        *reinterpret_cast<uint16_t*>(out + 8 * i) =
                            uint16_t(fp8_code(h0[h][2 * i], inv) | fp8_code(h0[h][2 * i + 1], inv) << 8);
                        *reinterpret_cast<uint16_t*>(out + 64 + 8 * i) =
                            uint16_t(fp8_code(hv[h][2 * i], inv) | fp8_code(hv[h][2 * i + 1], inv) << 8);
                    }
                    if (t4 == 0) p.h_scales[int64_t(nb) * p.h_scales_ld + slot] = sc;
                }
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if (mb * kBM + r0 + 8 * h >= count) continue;
                    const int64_t slot = first + r0 + 8 * h;
                    float* out = p.y + slot * p.ldo + nb * kBN + 2 * t4;
#pragma unroll
                    for (int i = 0; i < 16; ++i)
                        *reinterpret_cast<float2*>(out + 8 * i) = make_float2(fin[4 * i + 2 * h], fin[4 * i + 2 * h + 1]);
                }
            }
        }
    }
#else
    __trap();
#endif
}

}  // namespace

void launch_sm90(const Problem& q, cudaStream_t stream) {
    GroupedParams p{};
    p.map_a = tma::make_2d(q.a.codes, tma::Element::U8, uint64_t(q.a.m), uint64_t(q.a.k), uint64_t(q.a.codes_ld), kBM,
                           128, tma::Swizzle::B128, "grouped expert GEMM activation");
    p.map_sa = tma::make_2d(q.a.scales, tma::Element::F32, uint64_t((q.a.k + 127) / 128), uint64_t(q.a.m),
                            uint64_t(q.a.scales_ld) * 4, 1, kScaleBox, tma::Swizzle::NONE,
                            "grouped expert GEMM activation scales");
    p.w_a = q.w_a;
    p.s_a = q.s_a;
    p.w_b = q.w_b;
    p.s_b = q.s_b;
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
    p.ldo = q.ldo;
    auto kernel = q.up ? grouped_fp4_kernel<true> : grouped_fp4_kernel<false>;
    allow_dynamic_smem(kernel, kSmemBytes);
    launch_pdl(q.up ? "grouped_fp4_kernel<up>" : "grouped_fp4_kernel<down>", kernel,
               dim3(unsigned(current_arch().sm_count)), dim3(kThreads), kSmemBytes, stream, p);
}

}  // namespace flashseek::cuda::grouped_gemm
